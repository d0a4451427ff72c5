"""Does the distance between the K and V tiles read at the same moment change the decode read rate?

flash_decode's pipelined loop loads the K tile and the V tile of the same keys together, so at any
moment the 128 programs of a one-wave row stream 256 regions whose K and V halves sit at the same
offset inside their tensors. cuDNN's kernel (SDPA's default there) issues K and V at different points
of its step. If the coincident offsets cost DRAM efficiency, reading V from a copy shifted by part of
a tile should make flash_decode faster without changing its kernel, and a kernel whose V stream runs
a tile behind its K stream would earn the same.

The probe gives both kernels the same K and, per variant, V copied into a buffer at a storage offset
of ``OFFSETS`` bytes (contiguous, 16-byte aligned, same values), and times flash_decode and SDPA's
default on every variant in ``--rounds`` rotated rounds per row (``triton.testing.do_bench`` median,
L2 cleared before every run). Reported per row and offset: the median time of each, and each over
flash_decode at offset 0 (``vs_offset0``) and over SDPA at the same offset (``vs_sdpa``).

Run on a GPU::

    python benchmarks/decode_skew_probe.py --rounds 8 --out results/decode_skew_probe.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
import bench_decode  # noqa: E402

OFFSETS = (0, 4096, 32768, 98304, 524288)  # bytes V's copy is shifted by inside its buffer
ROWS = ((16, 32, 8, 4096), (4, 32, 32, 32768), (16, 32, 8, 32768), (1, 32, 32, 131072),
        (4, 32, 32, 4096), (64, 32, 8, 4096))  # the four rows over SDPA in 12 rounds, two level ones


def shifted(v, offset_bytes: int):
    """A contiguous copy of v whose first element lies ``offset_bytes`` into a fresh buffer."""
    import torch

    shift = offset_bytes // v.element_size()
    buf = torch.empty(v.numel() + shift, dtype=v.dtype, device=v.device)
    out = buf[shift:].view(v.shape)
    out.copy_(v)
    return out


def time_row(B, H, Hkv, nk, rounds: int) -> dict:
    import torch

    g = torch.Generator(device="cuda").manual_seed(B * 1000003 + nk + Hkv)  # bench_decode's inputs
    q = torch.randn(B, H, 1, bench_decode.D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, H, 1, d)
    k = torch.randn(B, Hkv, nk, bench_decode.D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, Hkv, Nk, d)
    v = torch.randn(B, Hkv, nk, bench_decode.D, device="cuda", dtype=torch.bfloat16, generator=g)
    vs = {off: (v if off == 0 else shifted(v, off)) for off in OFFSETS}
    variants = bench_decode.make_variants(H, Hkv, bench_decode.D ** -0.5)
    fns = {}
    for off, vv in vs.items():
        for name in ("flash_decode", "sdpa_default"):
            fns[(name, off)] = (lambda f=variants[name], vv=vv: f(q, k, vv))
    errors = {}
    with torch.no_grad():
        ref = fns[("sdpa_default", 0)]().float()
        for key, fn in fns.items():
            errors[f"{key[0]}@{key[1]}"] = _common.rel_err(fn(), ref)
        keys, runs = list(fns), {key: [] for key in fns}
        for r in range(rounds):
            for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                runs[key].append(bench_decode.bench_us(fns[key]))
    med = {key: bench_decode._median(xs) for key, xs in runs.items()}
    base = med[("flash_decode", 0)]
    table = [{"offset_bytes": off,
              "flash_decode_us": med[("flash_decode", off)], "sdpa_default_us": med[("sdpa_default", off)],
              "flash_decode_runs": runs[("flash_decode", off)], "sdpa_default_runs": runs[("sdpa_default", off)],
              "flash_decode_vs_offset0": med[("flash_decode", off)] / base,
              "sdpa_vs_offset0": med[("sdpa_default", off)] / med[("sdpa_default", 0)],
              "flash_decode_vs_sdpa": med[("flash_decode", off)] / med[("sdpa_default", off)]}
             for off in OFFSETS]
    return {"B": B, "H": H, "Hkv": Hkv, "Nk": nk, "rel_err_vs_sdpa": errors, "offsets": table}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parent / "results" / "decode_skew_probe.json")
    args = parser.parse_args(argv)
    refusal = _common.timing_refusal()
    if refusal:
        print(refusal)
        return 1
    import torch

    out = []
    for B, H, Hkv, nk in ROWS:
        entry = time_row(B, H, Hkv, nk, args.rounds)
        torch.cuda.empty_cache()
        out.append(entry)
        worst = max(entry["rel_err_vs_sdpa"].values())
        print(f"B={B:>2} H={H} Hkv={Hkv:>2} Nk={nk:>6} (max rel err {worst:.1e})", flush=True)
        for t in entry["offsets"]:
            print(f"   V shifted {t['offset_bytes']:>7} B: flash_decode {t['flash_decode_us']:8.2f} us "
                  f"({t['flash_decode_vs_offset0']:.4f} of unshifted), SDPA {t['sdpa_default_us']:8.2f} us "
                  f"({t['sdpa_vs_offset0']:.4f}); flash_decode / SDPA {t['flash_decode_vs_sdpa']:.4f}", flush=True)
    _common.write_json(args.out, {"environment": _common.environment(), "rounds": args.rounds,
                                  "method": __doc__.split("\n\n")[2].replace("\n", " "), "rows": out})
    return 0


if __name__ == "__main__":
    sys.exit(main())
