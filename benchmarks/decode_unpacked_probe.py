"""Grouped decode rows read once per query head, with L2 catching the repeats: a probe.

flash_decode packs the ``G = H // Hkv`` query heads of one kv head into one program's query tile,
so each K/V byte leaves HBM once and the grid is ``B * Hkv`` programs (x splits). At
(16, 32, 8, 4k) that is 128 wide programs, one wave on 132 SMs, and SDPA's default is faster there
than at the multi-head row with the same bytes and grid (benchmarks/NOTES.md, "twelve rounds per
row"). SDPA may run one program per query head instead. This probe asks whether flash_decode does
better so too, with no kernel change: the cache is viewed as ``B * Hkv`` sequences of ``G`` heads
whose head stride is 0 (``expand``), so the kernel sees multi-head attention, runs ``B * H``
programs, and the G programs of one kv head are neighbours in the grid; they read the same lines
at about the same time, and L2 serves all but the first.

Variants per row, timed in rotated rounds (``bench_decode.rotated_rounds``; the L2 cleared before
every run): SDPA's default, flash_decode as shipped, and the expanded view with the split rule's
choice for that view and with one split. Outputs are checked against SDPA's first.

Run on a GPU::

    python benchmarks/decode_unpacked_probe.py --rounds 8 --out results/decode_unpacked_probe.json
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
import bench_decode  # noqa: E402


def expanded(q, k, v):
    """q (B, H, Nq, d), k, v (B, Hkv, N, d) as multi-head inputs of B * Hkv sequences with G heads:
    q (B*Hkv, G, Nq, d) (a view), k, v (B*Hkv, G, N, d) with head stride 0 (no copy)."""
    B, H, Nq, d = q.shape
    Hkv, N = k.shape[1], k.shape[2]
    G = H // Hkv
    qv = q.reshape(B * Hkv, G, Nq, d)
    kv = [t.reshape(B * Hkv, 1, N, d).expand(B * Hkv, G, N, d) for t in (k, v)]
    return qv, kv[0], kv[1]


def time_row(B, H, Hkv, nk, rounds):
    import torch

    import flashlab

    g = torch.Generator(device="cuda").manual_seed(B * 1000003 + nk + Hkv)  # bench_decode's inputs
    q = torch.randn(B, H, 1, bench_decode.D, device="cuda", dtype=torch.bfloat16, generator=g)
    k = torch.randn(B, Hkv, nk, bench_decode.D, device="cuda", dtype=torch.bfloat16, generator=g)
    v = torch.randn(B, Hkv, nk, bench_decode.D, device="cuda", dtype=torch.bfloat16, generator=g)
    scale = bench_decode.D ** -0.5
    base = bench_decode.make_variants(H, Hkv, scale)
    qe, ke, ve = expanded(q, k, v)
    shape = q.shape
    fns = {
        "sdpa_default": lambda: base["sdpa_default"](q, k, v),
        "flash_decode": lambda: base["flash_decode"](q, k, v),
        "expanded_rule": lambda: flashlab.flash_decode(qe, ke, ve, scale=scale).reshape(shape),
        "expanded_1split": lambda: flashlab.flash_decode(qe, ke, ve, scale=scale, num_splits=1).reshape(shape),
    }
    with torch.no_grad():
        ref = fns["sdpa_default"]().float()
        errs = {n: _common.rel_err(f(), ref) for n, f in fns.items()}
        runs = bench_decode.rotated_rounds(fns, rounds)
    from flashlab import decode

    entry = {"B": B, "H": H, "Hkv": Hkv, "Nk": nk, "rel_err_vs_sdpa_default": errs,
             "splits_packed": decode.choice_for(q, k).splits, "splits_expanded_rule": decode.choice_for(qe, ke).splits,
             "us_runs": runs}
    med = {n: bench_decode._median(r) for n, r in runs.items()}
    entry["median_us"] = med
    entry["over_sdpa_default"] = {n: med[n] / med["sdpa_default"] for n in med}
    return entry


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parent / "results" / "decode_unpacked_probe.json")
    args = parser.parse_args(argv)
    refusal = _common.timing_refusal()
    if refusal:
        print(refusal)
        return 1
    import torch

    out = []
    for B, H, Hkv, nk, skip in bench_decode.rows():
        if skip is not None or H == Hkv:
            continue
        entry = time_row(B, H, Hkv, nk, args.rounds)
        torch.cuda.empty_cache()
        out.append(entry)
        r = entry["over_sdpa_default"]
        print(f"B={B:>2} H={H} Hkv={Hkv} Nk={nk:>6} splits {entry['splits_packed']}/{entry['splits_expanded_rule']}: "
              f"flash_decode {r['flash_decode']:.4f}  expanded(rule) {r['expanded_rule']:.4f}  "
              f"expanded(1 split) {r['expanded_1split']:.4f}  of SDPA {entry['median_us']['sdpa_default']:.1f} us; "
              f"errors {', '.join(f'{n} {e:.1e}' for n, e in entry['rel_err_vs_sdpa_default'].items())}", flush=True)
    _common.write_json(args.out, {"environment": _common.environment(), "rounds": args.rounds,
                                  "method": __doc__.split("\n\n")[2].replace("\n", " "), "rows": out})
    return 0


if __name__ == "__main__":
    sys.exit(main())
