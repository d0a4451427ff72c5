"""When does each program of a one-wave decode grid start and finish?

At the rows where flash_decode stays 0.2-0.5 % over SDPA's default (benchmarks/NOTES.md, decode,
sessions 17-21) both kernels run one program per (sequence, kv head) on 128 of the 132 SMs, and
flash_decode is the faster of the two where the caches are short: what it loses is in the long
stream. A kernel's time is that of its last program. If some programs finish well after the others
(an SM that draws less bandwidth, a late start), the tail would be where the time goes, and a tail of
0.3 % of the kernel is about 1.5 us at 32k keys.

The probe runs the library's split-KV kernel with two reads of ``%globaltimer`` (at the program's
first instruction and after its last store) and ``%smid``, written per program into a scratch buffer
(the kernel's ``OPart``, unused by an unsplit launch), on the unsplit rows only. Its source is the
library kernel's, patched at run time; the launch is the library's plan. Each run follows a 256 MB
write, as ``triton.testing.do_bench`` clears L2. Reported per row (median over ``--runs`` runs):
the span (first start to last finish), the spread of the starts and of the finishes, how long after
the median finish the last program ends, the slowest and fastest program's duration, and the mean
duration of programs alone on their TPC (SM pair) against those sharing it. The kernel is also timed
with and without the timer reads (do_bench median), to show the reads cost nothing.

The tail chunks this led to were timed with ``--tails`` in commit bd5b111 (benchmarks/NOTES.md, decode,
session 21) and removed with the kernel option they needed.

Run on a GPU::

    python benchmarks/decode_tail_probe.py --runs 20 --out results/decode_tail_probe.json
"""
from __future__ import annotations

import argparse
import inspect
import sys
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
import bench_decode  # noqa: E402

ROWS = ((4, 32, 32, 32768), (16, 32, 8, 32768), (4, 32, 32, 131072), (16, 32, 8, 131072),
        (4, 32, 32, 4096), (16, 32, 8, 4096), (16, 32, 32, 4096))  # unsplit rows: over SDPA, and level ones
_TIMER = 'tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)'
_SMID = 'tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)'


def timed_kernel():
    """The library's ``_decode_split_kv`` with a start and finish timestamp and the SM id per program
    stored at ``OPart`` (as int64, three per program, program index split + splits * (zh + ...))."""
    from flashlab.kernels import flash_decode

    source = textwrap.dedent(inspect.getsource(flash_decode._decode_split_kv.fn))
    head, body = source.split("):\n", 1)  # the signature, then the body
    lines = body.split("\n")
    indent = " " * (len(lines[0]) - len(lines[0].lstrip()))
    start = [f"{indent}t_start = {_TIMER}"]
    end = [f"{indent}t_end = {_TIMER}",
           f"{indent}sm_id = {_SMID}",
           f"{indent}prog = tl.program_id(0) + tl.num_programs(0) * (tl.program_id(1) + tl.num_programs(1) * "
           "tl.program_id(2))",
           f"{indent}stamps = OPart.to(tl.pointer_type(tl.int64)) + 3 * prog.to(tl.int64)",
           f"{indent}tl.store(stamps, t_start)",
           f"{indent}tl.store(stamps + 1, t_end)",
           f"{indent}tl.store(stamps + 2, sm_id.to(tl.int64))"]
    patched = head.replace("def _decode_split_kv(", "def _decode_split_kv_timed(") + "):\n" + "\n".join(
        start + lines[:len(lines) - next(i for i, x in enumerate(reversed(lines)) if x.strip())] + end) + "\n"
    patched = "\n".join(x for x in patched.split("\n") if not x.startswith("@"))
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="decode_tail_probe_"))  # triton.jit reads the kernel's source file
    path = folder / "_decode_split_kv_timed.py"
    path.write_text("from flashlab.kernels.flash_decode import *  # noqa\nfrom flashlab.kernels.flash_decode import "
                    "_dot, _table_entries  # noqa\nimport triton\nimport triton.language as tl\n\n\n"
                    "@triton.jit(do_not_specialize=['H_KV', 'GROUP', 'N_Q', 'N_MAX', 'NUM_SPLITS', 'NUM_BLOCKS'])\n"
                    + patched)
    import importlib

    sys.path.insert(0, str(folder))
    return importlib.import_module("_decode_split_kv_timed")._decode_split_kv_timed


def summary(stamps, programs: int) -> dict:
    """One run's timings (ns -> us) from the (programs, 3) int64 stamps."""
    import numpy as np

    t0, t1, sm = stamps[:, 0].astype(np.float64), stamps[:, 1].astype(np.float64), stamps[:, 2]
    dur = (t1 - t0) / 1e3
    base = t0.min()
    tpc = sm // 2
    counts = np.bincount(tpc, minlength=int(tpc.max()) + 1)
    alone = counts[tpc] == 1
    return {"span_us": (t1.max() - base) / 1e3, "start_spread_us": (t0.max() - base) / 1e3,
            "finish_spread_us": (t1.max() - t1.min()) / 1e3, "last_after_median_finish_us":
            (t1.max() - np.median(t1)) / 1e3, "slowest_us": float(dur.max()), "fastest_us": float(dur.min()),
            "median_us": float(np.median(dur)), "alone_on_tpc": int(alone.sum()),
            "mean_us_alone_on_tpc": float(dur[alone].mean()) if alone.any() else None,
            "mean_us_sharing_tpc": float(dur[~alone].mean()) if (~alone).any() else None,
            "distinct_sms": int(len(set(sm.tolist()))), "programs": programs}


def time_row(B, H, Hkv, nk, runs: int, kernel) -> dict:
    import numpy as np
    import torch

    from flashlab import decode
    from flashlab.kernels import decode_plan

    g = torch.Generator(device="cuda").manual_seed(B * 1000003 + nk + Hkv)  # bench_decode's inputs
    q = torch.randn(B, H, 1, bench_decode.D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, H, 1, d)
    k = torch.randn(B, Hkv, nk, bench_decode.D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, Hkv, Nk, d)
    v = torch.randn(B, Hkv, nk, bench_decode.D, device="cuda", dtype=torch.bfloat16, generator=g)
    scale = bench_decode.D ** -0.5
    choice = decode.choice_for(q, k)
    if choice.splits != 1:
        raise SystemExit(f"row {(B, H, Hkv, nk)} runs {choice.splits} splits: the probe times unsplit rows only")
    config = decode.config_of(q, choice)
    plan = decode_plan.plan_for(q, k, v, None, None, False, 1, config)
    programs = plan.grid[0] * plan.grid[1] * plan.grid[2]
    stamps = torch.zeros(programs, 3, dtype=torch.int64, device="cuda")
    o = torch.empty(B, H, 1, bench_decode.D, device="cuda", dtype=torch.bfloat16)
    values = dict(plan.values, Q=q, K=k, V=v, Out=o, LSE=plan.lse, sm_scale=scale, OPart=stamps)

    def timed():
        kernel[plan.grid](**values, **plan.options)

    def library():
        return decode_plan.forward(q, k, v, None, scale, False, 1, config)

    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    per_run, raw = [], []
    with torch.no_grad():
        timed()
        err = _common.rel_err(o, library()[0])
        for r in range(runs):
            flush.zero_()  # as do_bench: 256 MB written, L2 left dirty
            timed()
            torch.cuda.synchronize()
            got = stamps.cpu().numpy()
            per_run.append(summary(got, programs))
            if r < 3:  # per program: start and finish (ns after the first start), SM
                raw.append([[int(a - got[:, 0].min()), int(b - got[:, 0].min()), int(c)] for a, b, c in got])
        us = {"timed": [], "library": []}
        for r in range(5):
            for name, fn in ((("timed", timed), ("library", library)) if r % 2 == 0 else
                             (("library", library), ("timed", timed))):
                us[name].append(bench_decode.bench_us(fn))
    keys = [key for key in per_run[0] if isinstance(per_run[0][key], float)]
    med = {key: float(np.median([run[key] for run in per_run if run[key] is not None])) for key in keys}
    return {"B": B, "H": H, "Hkv": Hkv, "Nk": nk, "programs": programs, "grid": list(plan.grid),
            "rel_err_timed_vs_library": err, "median_of_runs": med, "alone_on_tpc": per_run[0]["alone_on_tpc"],
            "distinct_sms": per_run[0]["distinct_sms"], "runs": per_run, "programs_first_runs": raw,
            "do_bench_us": {name: bench_decode._median(xs) for name, xs in us.items()}, "do_bench_rounds_us": us}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "decode_tail_probe.json")
    args = parser.parse_args(argv)
    refusal = _common.timing_refusal()
    if refusal:
        print(refusal)
        return 1
    import torch

    kernel = timed_kernel()
    out = []
    for B, H, Hkv, nk in ROWS:
        entry = time_row(B, H, Hkv, nk, args.runs, kernel)
        torch.cuda.empty_cache()
        out.append(entry)
        m = entry["median_of_runs"]
        print(f"B={B:>2} H={H} Hkv={Hkv:>2} Nk={nk:>6} ({entry['programs']} programs on {entry['distinct_sms']} SMs, "
              f"{entry['alone_on_tpc']} alone on their TPC): span {m['span_us']:.1f} us, starts within "
              f"{m['start_spread_us']:.2f}, finishes within {m['finish_spread_us']:.2f}, last {m['last_after_median_finish_us']:.2f} "
              f"after the median finish; durations {m['fastest_us']:.1f}-{m['slowest_us']:.1f} (median {m['median_us']:.1f}); "
              f"alone {m.get('mean_us_alone_on_tpc', float('nan')):.1f} vs sharing {m.get('mean_us_sharing_tpc', float('nan')):.1f}; "
              f"do_bench timed {entry['do_bench_us']['timed']:.1f} vs library {entry['do_bench_us']['library']:.1f} us",
              flush=True)
    _common.write_json(args.out, {"environment": _common.environment(), "runs": args.runs,
                                  "method": __doc__.split("\n\n")[2].replace("\n", " "), "rows": out})
    return 0


if __name__ == "__main__":
    sys.exit(main())
