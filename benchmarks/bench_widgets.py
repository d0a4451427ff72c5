"""Slider redraw time of the tile-schedule widget (issue 4's target: about 0.2 s per step, N <= 4096).

Traces one run per algorithm once, builds the widget, then moves the step slider to 30 random
steps and times each full redraw (the widget's callback, PNG included). CPU only; no GPU needed.

    PYTHONPATH=src python benchmarks/bench_slider_redraw.py [--out benchmarks/results/slider_redraw.json]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

CASES = (("fa2", False), ("fa2", True), ("fa1", False), ("backward", True))  # (algorithm, causal)


def time_case(algorithm: str, causal: bool, n: int, d: int, block: int, steps: int, rng) -> dict:
    from flashlab.viz.traffic_plots import traced_forward
    from flashlab.viz.widgets import tile_schedule_widget

    t0 = time.perf_counter()
    tracer = traced_forward(n, d, block, block, causal=causal, algorithm=algorithm)
    t1 = time.perf_counter()
    widget = tile_schedule_widget(tracer)
    t2 = time.perf_counter()
    times = []
    for step in rng.integers(0, widget.slider.max + 1, steps):
        start = time.perf_counter()
        widget.on_step({"new": int(step)})
        times.append(time.perf_counter() - start)
    times = np.array(times)  # (steps,) seconds
    return {"algorithm": algorithm, "causal": causal, "n": n, "d": d, "block": block,
            "schedule_steps": widget.slider.max + 1, "trace_s": t1 - t0, "build_s": t2 - t1,
            "redraw_median_ms": float(np.median(times) * 1e3), "redraw_max_ms": float(times.max() * 1e3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--block", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "slider_redraw.json")
    args = parser.parse_args()
    rng = np.random.default_rng()
    rows = []
    for algorithm, causal in CASES:
        row = time_case(algorithm, causal, args.n, args.d, args.block, args.steps, rng)
        rows.append(row)
        print(f"{algorithm:8s} causal={causal!s:5s} N={row['n']} d={row['d']} blocks {args.block}: "
              f"{row['schedule_steps']} steps, trace {row['trace_s']:.1f} s, widget {row['build_s']:.2f} s, "
              f"redraw median {row['redraw_median_ms']:.0f} ms, max {row['redraw_max_ms']:.0f} ms")
    result = {"environment": {"date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              "python": platform.python_version(), "machine": platform.machine(),
                              "cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0]},
              "target_ms": 200, "rows": rows}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
