"""Decode: is the last 0.3-0.5 % to SDPA's default a property of the kernels or of the L2 flush?

At the rows over SDPA's default in the full runs (benchmarks/NOTES.md, call 10) flash_decode and
cuDNN's kernel run the same grid (128 programs of 128 threads), the same load instruction
(``LDGSTS.E.BYPASS.128``, no L2 qualifier) and, profiled by Nsight Compute with clean caches, the same
time (``decode_ncu_compare.py``). The targets' method (``do_bench``) clears L2 by writing 256 MB
before each call, which leaves L2 full of dirty lines that go back to HBM while the kernel reads.

This probe times, at those rows, flash_decode (the split rule's choice), SDPA's default and two
configs with less shared memory in flight (cuDNN's kernel holds 86 KB, flash_decode's wide config
139 KB): the default config unsplit (64-key tiles, 3 stages) and the wide config with 2 stages. Each
call sits between two CUDA events after one of two flushes, not timed: ``dirty`` (a 256 MB write,
as ``do_bench``) and ``clean`` (a 256 MB read: L2 holds clean lines, dropped for free). ``ROUNDS``
rounds, variants rotated in each, ``CALLS`` calls per variant per round, median; every output is
checked against SDPA's first.

    python benchmarks/decode_flush_probe.py [--variants smem|deeper|stagger]   # -> $OUT/decode_flush_probe_<variants>.json
"""
from __future__ import annotations

import dataclasses
import json
import os

import _common
from bench_decode import D, _median, make_variants

# the rows over SDPA's default in call 10 (all one wave of wide programs, unsplit or 4 splits, or 512 programs)
ROWS = ((4, 32, 32, 4096), (16, 32, 32, 4096), (4, 32, 32, 32768), (1, 32, 32, 131072), (4, 32, 32, 131072),
        (64, 32, 8, 4096), (16, 32, 8, 32768), (4, 32, 8, 131072), (16, 32, 8, 131072))
FLUSHES = ("dirty", "clean")
ROUNDS = 3
CALLS = 30
FLUSH_BYTES = 256 * 10**6


def events_us(fn, flush, calls: int = CALLS) -> float:
    """Median us of ``fn`` between two CUDA events, ``flush()`` before each call (not timed)."""
    import torch

    times = []
    for _ in range(calls):
        flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(1e3 * start.elapsed_time(end))
    return _median(times)


def variants(q, k, v, kind: str = "smem") -> dict:
    """{name: call}: SDPA's default, the rule, and configs of the kind asked for. ``smem`` (less shared
    memory in flight), where the rule runs one wide program per (sequence, kv head) unsplit: the
    default config unsplit and the wide config with 2 stages. ``deeper``, at the rule's splits: the
    wide config with 4 stages (three K/V buffers, 200 KB), with 4 and with 8 warps. ``stagger``, the
    rule's choice with each program starting at another block of its chunk (``DecodeConfig.stagger``
    2, 4, 8, 16: program p at (p mod s) / s of the chunk), so that the programs streaming at once read
    different offsets of their caches."""
    import torch

    import flashlab
    from flashlab import decode
    from flashlab.kernels import decode_plan as plans
    from flashlab.kernels import flash_decode as kernels

    H, Hkv = q.shape[1], k.shape[1]
    scale = D ** -0.5
    sdpa = make_variants(H, Hkv, scale)["sdpa_default"]
    fns = {"sdpa_default": lambda: sdpa(q, k, v), "flash_decode": lambda: flashlab.flash_decode(q, k, v, scale=scale)}
    choice = decode.choice_for(q, k)
    wide = kernels.config_for(D, torch.bfloat16, True)
    default = kernels.config_for(D, torch.bfloat16, False)
    configs = []
    if kind == "smem" and choice.splits == 1 and choice.wide:
        configs = [("default@1", default), ("wide_2stages@1", dataclasses.replace(wide, num_stages=2))]
    elif kind == "deeper" and choice.wide:
        deeper = dataclasses.replace(wide, num_stages=4, fused_combine=choice.fused)
        configs = [(f"wide_4stages@{choice.splits}", deeper),
                   (f"wide_4stages_8warps@{choice.splits}", dataclasses.replace(deeper, num_warps=8))]
    elif kind == "stagger":
        chosen = kernels.config_for(D, torch.bfloat16, choice.wide, choice.fused)
        configs = [(f"stagger_{s}@{choice.splits}", dataclasses.replace(chosen, stagger=s)) for s in (2, 4, 8, 16)]
    for name, config in configs:
        fns[name] = (lambda c=config: plans.forward(q, k, v, None, scale, False, choice.splits, c)[0])
    return fns


def probe(rows=ROWS, rounds=ROUNDS, kind: str = "smem") -> dict:
    import torch

    flush_buf = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    flushes = {"dirty": lambda: flush_buf.zero_(), "clean": lambda: flush_buf.sum()}
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rounds": rounds, "calls": CALLS,
           "variants": kind, "rows": []}
    for B, H, Hkv, nk in rows:
        g = torch.Generator(device="cuda").manual_seed(31 * nk + 7 * B + Hkv)
        q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, H, 1, d)
        k, v = (torch.randn(B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        fns = variants(q, k, v, kind)
        row = {"B": B, "H": H, "Hkv": Hkv, "Nk": nk, "rel_err": {}, "runs": {f: {n: [] for n in fns} for f in FLUSHES}}
        with torch.no_grad():
            ref = fns["sdpa_default"]().float()
            row["rel_err"] = {name: _common.rel_err(fn(), ref) for name, fn in fns.items()}
            names = list(fns)
            for r in range(rounds):
                for flush in FLUSHES:
                    for name in names[r % len(names):] + names[:r % len(names)]:
                        row["runs"][flush][name].append(events_us(fns[name], flushes[flush]))
        row["us"] = {f: {n: _median(x) for n, x in runs.items()} for f, runs in row["runs"].items()}
        row["vs_sdpa"] = {f: {n: us[n] / us["sdpa_default"] for n in us} for f, us in row["us"].items()}
        row["round_ratios"] = {f: [a / b for a, b in zip(runs["flash_decode"], runs["sdpa_default"])]
                               for f, runs in row["runs"].items()}
        out["rows"].append(row)
        print(f"{str((B, H, Hkv, nk)):>22} " + " | ".join(
            f"{f}: " + " ".join(f"{n}={row['us'][f][n]:.1f}({row['vs_sdpa'][f][n]:.4f})" for n in fns)
            for f in FLUSHES), flush=True)
        del q, k, v, fns
        torch.cuda.empty_cache()
    return out


if __name__ == "__main__":
    import sys

    kind = sys.argv[sys.argv.index("--variants") + 1] if "--variants" in sys.argv else "smem"
    if kind not in ("smem", "deeper", "stagger"):
        sys.exit(f"--variants {kind!r}: expected smem, deeper or stagger")
    result = probe(kind=kind)
    folder = os.environ.get("OUT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    with open(os.path.join(folder, f"decode_flush_probe_{kind}.json"), "w") as f:
        json.dump(result, f, indent=1)
