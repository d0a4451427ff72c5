"""Probes of one-wave decode grids on one GPU (benchmarks/NOTES.md, decode, calls 12-15).

``--sm-count``: do more busy SMs help a grid of one wide program per SM? ``flash_decode`` and
SDPA's default at B = 4 with H = Hkv = 31, 32 and 33 (124, 128 and 132 kv heads; the split rule
runs 128 and 132 unsplit), 32k and 128k keys; K/V read bandwidth per row, so the rows compare
per byte. Also names the kernel each one launches (torch profiler, no L2 flush).

``--partial-wave``: 124 programs (B = 4, H = Hkv = 31): the rule's choice beside 2 splits (the
rule's choice before ``PARTIAL_WAVE_FILL``: 248 programs, a second wave on 132 SMs), beside SDPA,
at 4k, 32k and 128k keys. Outputs checked against SDPA first.

A third probe, ``--prefetch`` (K/V loaded into registers a step ahead with plain loads that keep
the ``evict_first`` hint, ``DecodeConfig.prefetch_regs``), was refuted in call 14 (1.08-1.7x the
pipelined kernel's time) and removed with the kernel option; it is in commit 9efff12
(``git show 9efff12:benchmarks/decode_wave_probe.py``), with ``results/decode_prefetch_call14.json``.

Timing as ``bench_decode.py``: bf16, d = 128, Nq = 1, do_bench with L2 cleared, 5 rotated rounds,
median. ``python benchmarks/decode_wave_probe.py --partial-wave --out results/x.json``
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import _common
import bench_decode as bd

D = 128


def _inputs(B, h, nk, seed):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, h, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, H, 1, d)
    k, v = (torch.randn(B, h, nk, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    return q, k, v, bd.make_variants(h, h, D ** -0.5)["sdpa_default"]


def sm_count_rows() -> dict:
    import torch

    from flashlab import decode

    rows = []
    for nk in (32768, 131072):
        for h in (31, 32, 33):
            q, k, v, sdpa = _inputs(4, h, nk, h)
            choice = decode.choice_for(q, k)
            fns = {"flash_decode": lambda: decode.flash_decode(q, k, v), "sdpa_default": lambda: sdpa(q, k, v)}
            with torch.no_grad():
                runs = bd.rotated_rounds(fns, rounds=5)
            nbytes = 2 * k.numel() * k.element_size()
            row = {"B": 4, "H": h, "Nk": nk, "splits": choice.splits, "wide": choice.wide,
                   "programs": 4 * h * choice.splits}
            for name, r in runs.items():
                row[name] = dict(bd.rounds_entry(r), tb_s=nbytes / bd._median(r) / 1e6)
            row["ratio"] = row["flash_decode"]["us"] / row["sdpa_default"]["us"]
            rows.append(row)
            print(f"B=4 H={h} Nk={nk} programs={row['programs']}: ours {row['flash_decode']['us']:.1f} us "
                  f"{row['flash_decode']['tb_s']:.3f} TB/s, SDPA {row['sdpa_default']['us']:.1f} us "
                  f"{row['sdpa_default']['tb_s']:.3f} TB/s, ratio {row['ratio']:.4f}", flush=True)
    return {"rows": rows, "kernels": _kernel_names()}


def _kernel_names() -> dict:
    """The GPU kernels each side launches for one step (B = 4, H = Hkv = 32, 32k keys), and their time."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from flashlab import decode

    q, k, v, sdpa = _inputs(4, 32, 32768, 0)
    out = {}
    for name, fn in (("sdpa_default", lambda: sdpa(q, k, v)), ("flash_decode", lambda: decode.flash_decode(q, k, v))):
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
        out[name] = [{"kernel": e.key, "us": e.device_time_total / max(1, e.count), "count": e.count}
                     for e in prof.key_averages() if e.device_time_total > 0]
        print(name, out[name], flush=True)
    return out


def partial_wave_rows() -> dict:
    import torch

    from flashlab import decode

    rows = []
    for nk in (4096, 32768, 131072):
        q, k, v, sdpa = _inputs(4, 31, nk, nk)
        choice = decode.choice_for(q, k)
        fns = {"rule": lambda: decode.flash_decode(q, k, v),
               "splits2": lambda: decode.flash_decode(q, k, v, num_splits=2),
               "sdpa_default": lambda: sdpa(q, k, v)}
        with torch.no_grad():
            ref = sdpa(q, k, v).float()
            errors = {n: ((f().float() - ref).abs().max() / ref.abs().max()).item() for n, f in fns.items()}
            runs = bd.rotated_rounds(fns, rounds=5)
        row = {"B": 4, "H": 31, "Nk": nk, "rule_splits": choice.splits, "errors": errors,
               **{n: bd.rounds_entry(r) for n, r in runs.items()}}
        rows.append(row)
        print(f"B=4 H=Hkv=31 Nk={nk}: rule ({choice.splits} split) {row['rule']['us']:.1f} us, 2 splits "
              f"{row['splits2']['us']:.1f}, SDPA {row['sdpa_default']['us']:.1f}; rule/SDPA "
              f"{row['rule']['us'] / row['sdpa_default']['us']:.4f}; max rel err {max(errors.values()):.4f}", flush=True)
    return {"rows": rows}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sm-count", action="store_true", help="124, 128, 132 kv heads at B = 4")
    parser.add_argument("--partial-wave", action="store_true", help="124 programs: rule vs 2 splits")
    parser.add_argument("--out", default=None, help="results file (JSON)")
    args = parser.parse_args(argv)
    refusal = _common.timing_refusal()
    if refusal:
        sys.exit(refusal)
    result = {"environment": _common.environment()}
    if args.sm_count:
        result["sm_count"] = sm_count_rows()
    if args.partial_wave:
        result["partial_wave"] = partial_wave_rows()
    if args.out:
        _common.write_json(Path(args.out), result)


if __name__ == "__main__":
    main()
