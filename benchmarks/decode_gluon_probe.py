"""Decode: does a load schedule written by hand (a producer warp feeding a TMA ring) beat cp.async?

The rows still over SDPA's default (benchmarks/NOTES.md, decode) run at the HBM read ceiling, and every
Triton-level change to flash_decode's loads has been measured (tiles, stages, warps, TMA, L2 qualifiers,
walk order). What was left: a schedule as FlashAttention-3 writes it, producer warps issuing the copies
while consumer warps compute. The course already has such a kernel, the warp-specialised Gluon forward
(``flashlab.kernels.flash_fwd_gluon``: one producer warp, TMA copies of K and V into a ring, wgmma
consumers of 64 query rows). At multi-head rows with one new query (H = Hkv, Nq = 1) it reads each
(sequence, head)'s cache once with one program, as flash_decode does, so it can be timed there unchanged
(its 128-row query tile holds one real row: the tensor cores do 64-128x the work, which decode can
afford). Grouped rows it would read once per query head, so they are left out of the graph timing.

Two timings at each row, beside SDPA's default and flash_decode:
* ``events``: each call between CUDA events after a 256 MB write (``dirty``) or read (``clean``), 5
  rotated rounds of 30 calls (``decode_flush_probe.events_us``). The Gluon forward builds its tensor
  descriptors on the host at every call (~120 us, longer than a 4k row's kernel), so these times can
  include host time.
* ``graph``: 20 calls captured in one CUDA graph, replayed (no host work, no flush); 7 rotated rounds.

    python benchmarks/decode_gluon_probe.py [--graph]   # -> $OUT/decode_gluon_probe_{events,graph}.json
"""
from __future__ import annotations

import json
import os
import sys

import _common
from bench_decode import D, _median, make_variants
from decode_flush_probe import FLUSH_BYTES, events_us

EVENT_ROWS = ((4, 32, 32, 4096), (16, 32, 32, 4096), (4, 32, 32, 32768), (4, 32, 32, 131072),
              (16, 32, 8, 4096), (16, 32, 8, 32768))
GRAPH_ROWS = EVENT_ROWS[:4]  # multi-head only: one program per (sequence, head) reads its cache once
REPS = 20  # calls per graph


def variants(q, k, v, configs) -> dict:
    """{name: call}: SDPA's default, flash_decode and the Gluon forward with each config."""
    import flashlab
    from flashlab.kernels import flash_fwd_gluon as gluon

    sdpa = make_variants(q.shape[1], k.shape[1], D ** -0.5)["sdpa_default"]
    fns = {"sdpa_default": lambda: sdpa(q, k, v),
           "flash_decode": lambda: flashlab.flash_decode(q, k, v, scale=D ** -0.5, check_lengths=False)}
    for name, (block_n, buffers, persistent) in configs.items():
        config = gluon.GluonConfig(block_n=block_n, num_buffers=buffers, persistent=persistent)
        fns[name] = (lambda c=config: gluon.forward(q, k, v, scale=D ** -0.5, config=c)[0])
    return fns


def _inputs(B, H, Hkv, nk):
    import torch

    g = torch.Generator(device="cuda").manual_seed(nk + B)
    q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, H, 1, d)
    k, v = (torch.randn(B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    return q, k, v


def events(rows=EVENT_ROWS, rounds: int = 5) -> dict:
    import torch

    flush_buf = torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda")
    flushes = {"dirty": lambda: flush_buf.zero_(), "clean": lambda: flush_buf.sum()}
    configs = {"g128x2": (128, 2, 0), "g64x4": (64, 4, 0), "g64x3": (64, 3, 0), "g128x2p": (128, 2, 1)}
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rounds": rounds, "configs": configs,
           "rows": []}
    for B, H, Hkv, nk in rows:
        q, k, v = _inputs(B, H, Hkv, nk)
        fns = variants(q, k, v, configs)
        row = {"row": [B, H, Hkv, nk], "runs": {f: {n: [] for n in fns} for f in flushes}}
        with torch.no_grad():
            ref = fns["sdpa_default"]().float()
            row["rel_err"] = {n: _common.rel_err(fn(), ref) for n, fn in fns.items()}
            names = list(fns)
            for r in range(rounds):
                for f in flushes:
                    for n in names[r % len(names):] + names[:r % len(names)]:
                        row["runs"][f][n].append(events_us(fns[n], flushes[f]))
        row["us"] = {f: {n: _median(x) for n, x in runs.items()} for f, runs in row["runs"].items()}
        row["vs_sdpa"] = {f: {n: u / us["sdpa_default"] for n, u in us.items()} for f, us in row["us"].items()}
        out["rows"].append(row)
        for f in flushes:
            print(row["row"], f, " ".join(f"{n}={row['us'][f][n]:.1f}({row['vs_sdpa'][f][n]:.4f})" for n in fns),
                  flush=True)
        del q, k, v, fns
        torch.cuda.empty_cache()
    return out


def graphs(rows=GRAPH_ROWS, rounds: int = 7) -> dict:
    import torch

    configs = {"g128x2": (128, 2, 0), "g64x3": (64, 3, 0), "g64x4": (64, 4, 0)}
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rounds": rounds, "reps": REPS,
           "configs": configs, "rows": []}
    for B, H, Hkv, nk in rows:
        q, k, v = _inputs(B, H, Hkv, nk)
        fns = variants(q, k, v, configs)
        captured = {}
        with torch.no_grad():
            ref = fns["sdpa_default"]().float()
            rel_err = {n: _common.rel_err(fn(), ref) for n, fn in fns.items()}
            for n, fn in fns.items():
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(3):
                        fn()
                torch.cuda.current_stream().wait_stream(side)
                captured[n] = torch.cuda.CUDAGraph()
                with torch.cuda.graph(captured[n]):
                    for _ in range(REPS):
                        fn()
            runs = {n: [] for n in fns}
            names = list(fns)
            for r in range(rounds):
                for n in names[r % len(names):] + names[:r % len(names)]:
                    captured[n].replay()
                    torch.cuda.synchronize()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    captured[n].replay()
                    end.record()
                    end.synchronize()
                    runs[n].append(1e3 * start.elapsed_time(end) / REPS)
        us = {n: _median(x) for n, x in runs.items()}
        out["rows"].append({"row": [B, H, Hkv, nk], "rel_err": rel_err, "runs": runs, "us": us,
                            "vs_sdpa": {n: u / us["sdpa_default"] for n, u in us.items()}})
        print([B, H, Hkv, nk], " ".join(f"{n}={u:.1f}({u / us['sdpa_default']:.4f})" for n, u in us.items()), flush=True)
        del captured, q, k, v, fns
        torch.cuda.empty_cache()
    return out


if __name__ == "__main__":
    kind = "graph" if "--graph" in sys.argv else "events"
    result = graphs() if kind == "graph" else events()
    folder = os.environ.get("OUT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
    with open(os.path.join(folder, f"decode_gluon_probe_{kind}.json"), "w") as f:
        json.dump(result, f, indent=1)
