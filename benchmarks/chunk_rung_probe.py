"""Which forward rung should run a bottom-right causal chunk: v4_hopper (what ``ladder.choose`` picks for
any AttnSpec option) or v5_gluon_ws (the warp-specialised Gluon forward, which computes the alignment but
is chosen only without options)?

A chunk of new queries against a long cache (Nq = 2048 against Nk = 32768, ``causal_align="bottom_right"``)
is nearly dense: only the last Nq keys hold a triangle. ``bench_decode.py``'s chunk row times it against a
dense run of the same FLOPs (Nk' = Nk - Nq/2) and found 1.09x at Hkv = 8 and 0.93x at Hkv = 32 (benchmarks/
NOTES.md, decode, session 23). The dense run takes v5 where ``flash_fwd_gluon.preferred`` says so; the chunk
always takes v4. This probe times both rungs on both problems at a few shapes, in rotated rounds, each
output checked first against PyTorch's SDPA with the same boolean mask on four heads.

Run on an H200 (bf16, d = 128, B = 1, H = 32)::

    python benchmarks/chunk_rung_probe.py --rounds 5 --out results/chunk_rung_probe.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

D = 128
SHAPES = ((8, 2048, 32768), (32, 2048, 32768), (8, 1024, 16384), (8, 4096, 8192), (32, 4096, 8192),
          (8, 4096, 4096), (32, 8192, 8192))  # (Hkv, Nq, Nk) at B = 1, H = 32


def _bench_us(fn) -> float:
    import triton

    return 1e3 * float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))


def time_shape(hkv: int, n_q: int, n_k: int, rounds: int, B: int = 1, H: int = 32) -> dict:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import flashlab
    from flashlab.kernels import ladder
    from flashlab.kernels.attention import attn_spec

    g = torch.Generator(device="cuda").manual_seed(7 * n_k + n_q + hkv)
    q = torch.randn(B, H, n_q, D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, H, Nq, d)
    k, v = (torch.randn(B, hkv, n_k, D, device="cuda", dtype=torch.bfloat16, generator=g)
            for _ in range(2))  # (B, Hkv, Nk, d)
    equal = n_k - n_q // 2
    ke, ve = k[:, :, :equal], v[:, :, :equal]  # the dense problem of the same FLOPs (views)
    v4, v5 = ladder.RUNGS["v4_hopper"], ladder.RUNGS["v5_gluon_ws"]
    variants = {
        "chunk_v4": lambda: v4(q, k, v, True, causal_align="bottom_right"),
        "chunk_v5": lambda: v5(q, k, v, True, causal_align="bottom_right"),
        "chunk_library": lambda: flashlab.flash_attention(q, k, v, causal=True, causal_align="bottom_right"),
        "dense_v4": lambda: v4(q, ke, ve, False),
        "dense_v5": lambda: v5(q, ke, ve, False),
        "dense_library": lambda: flashlab.flash_attention(q, ke, ve),
    }
    g4 = H // hkv
    heads = [0, 1, g4, H - 1]  # four query heads from more than one kv group
    kv_heads = [h // g4 for h in heads]
    mask = torch.ones(n_q, n_k, dtype=torch.bool, device="cuda").tril(n_k - n_q)  # (Nq, Nk) bottom-right
    with torch.no_grad(), sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]):
        ref_chunk = torch.nn.functional.scaled_dot_product_attention(
            q[:, heads], k[:, kv_heads], v[:, kv_heads], attn_mask=mask).float()
        ref_dense = torch.nn.functional.scaled_dot_product_attention(
            q[:, heads], ke[:, kv_heads], ve[:, kv_heads]).float()
    chunk_spec = attn_spec(q, k, v, True, None, causal_align="bottom_right")
    out = {"Hkv": hkv, "Nq": n_q, "Nk": n_k, "dense_Nk": equal, "B": B, "H": H,
           "rungs": {"chunk_library": ladder.choose(q, k, v, chunk_spec),
                     "chunk_v5": ladder.resolve("v5_gluon_ws", q, k, v, chunk_spec),
                     "dense_library": ladder.choose(q, ke, ve, attn_spec(q, ke, ve, False, None)),
                     "dense_v5": ladder.resolve("v5_gluon_ws", q, ke, ve, False)},
           "rel_err": {}, "us_runs": {}}
    with torch.no_grad():
        for name, fn in variants.items():
            o = fn()
            o = o[0] if isinstance(o, tuple) else o
            ref = ref_chunk if name.startswith("chunk") else ref_dense
            out["rel_err"][name] = _common.rel_err(o[:, heads], ref)
        names = list(variants)
        for r in range(rounds):
            order = names[r % len(names):] + names[:r % len(names)]
            for name in order:
                out["us_runs"].setdefault(name, []).append(_bench_us(variants[name]))
    med = {n: sorted(t)[len(t) // 2] for n, t in out["us_runs"].items()}
    out["us"] = med
    out["chunk_v5_over_v4"] = med["chunk_v5"] / med["chunk_v4"]
    out["chunk_library_over_dense_library"] = med["chunk_library"] / med["dense_library"]
    out["chunk_v5_over_dense_library"] = med["chunk_v5"] / med["dense_library"]
    torch.cuda.empty_cache()
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "chunk_rung_probe.json")
    args = parser.parse_args(argv)
    refusal = _common.timing_refusal()
    if refusal:
        print(refusal)
        return 2
    rows = []
    for hkv, n_q, n_k in SHAPES:
        rows.append(time_shape(hkv, n_q, n_k, args.rounds))
        r = rows[-1]
        print(f"Hkv={hkv:>2} Nq={n_q:>5} Nk={n_k:>6}: " + ", ".join(f"{n} {t:.1f}" for n, t in r["us"].items())
              + f" | chunk v5/v4 {r['chunk_v5_over_v4']:.3f}, chunk/dense (library) "
              f"{r['chunk_library_over_dense_library']:.3f}, chunk v5/dense (library) {r['chunk_v5_over_dense_library']:.3f}"
              f" | max rel err {max(r['rel_err'].values()):.1e} | rungs {r['rungs']}", flush=True)
        _common.write_json(args.out, {"environment": _common.environment(), "rounds": args.rounds, "method":
                                      "do_bench median (warmup 25 ms, rep 100 ms, L2 cleared) per round; variants "
                                      "in rotated order; us = median of the rounds", "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
