"""Redraw time per step of the two notebook widgets at N = 4096 (target: at most 0.2 s per step).

- Tile schedule (notebook 03): one traced run per algorithm at N = 4096; the step slider moved to
  30 random steps.
- Traffic vs N (notebook 04): curves for N = 128 .. 65536 (4096 among them), traced points at
  N = 128, 256, 512 (those of at most 256 tiles); 30 changes of d, M, the element-size dropdown or
  the causal box, each to a random other value. Every change is a setting the widget has not
  shown before in this process where possible, so the traced runs are not cached.

Each step is timed as a full widget update: the control's callback, which redraws the figure on
its Agg canvas and encodes the PNG the Image widget shows. Wall time and the process's CPU time
are both recorded: on a machine shared with other jobs the wall time includes waiting for a core.
The traced runs of the traffic widget call NumPy matmuls; with OpenBLAS's threads on a busy
machine each call can wait for a second core, so ``OPENBLAS_NUM_THREADS=1`` (recorded in the
results) separates that wait from the widget's own cost. CPU only; no GPU needed.

    PYTHONPATH=src python benchmarks/bench_widgets.py [--out benchmarks/results/bench_widgets.json]
    OPENBLAS_NUM_THREADS=1 PYTHONPATH=src python benchmarks/bench_widgets.py --out benchmarks/results/bench_widgets_blas1.json
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

TILE_CASES = (("fa2", False), ("fa2", True), ("fa1", False), ("backward", True))  # (algorithm, causal)
TARGET_MS = 200


def _summary(times: list[float], cpu_times: list[float]) -> dict:
    """Wall time per step, and the process's CPU time per step: on a machine shared with other
    jobs the wall time includes waiting for a core, the CPU time does not."""
    t = np.array(times) * 1e3  # (steps,) ms
    c = np.array(cpu_times) * 1e3  # (steps,) ms
    return {"steps_timed": len(t), "median_ms": float(np.median(t)), "p90_ms": float(np.percentile(t, 90)),
            "max_ms": float(t.max()), "cpu_median_ms": float(np.median(c)), "cpu_max_ms": float(c.max())}


def _timed(update) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    update()
    return time.perf_counter() - wall, time.process_time() - cpu


def time_tile_widget(algorithm: str, causal: bool, n: int, d: int, block: int, steps: int, rng) -> dict:
    from flashlab.viz.traffic_plots import traced_forward
    from flashlab.viz.widgets import tile_schedule_widget

    t0 = time.perf_counter()
    tracer = traced_forward(n, d, block, block, causal=causal, algorithm=algorithm)
    t1 = time.perf_counter()
    widget = tile_schedule_widget(tracer)
    t2 = time.perf_counter()
    times, cpu_times = [], []
    for step in rng.integers(0, widget.slider.max + 1, steps):
        # the slider's observer: frame, artists, blit, PNG
        wall, cpu = _timed(lambda: setattr(widget.slider, "value", int(step)))
        times.append(wall)
        cpu_times.append(cpu)
    return {"widget": "tile_schedule", "algorithm": algorithm, "causal": causal, "n": n, "d": d, "block": block,
            "schedule_steps": widget.slider.max + 1, "trace_s": t1 - t0, "build_s": t2 - t1,
            **_summary(times, cpu_times)}


def time_traffic_widget(steps: int, rng) -> dict:
    from flashlab.viz.widgets import traffic_vs_n_widget

    t0 = time.perf_counter()
    widget = traffic_vs_n_widget(d=64, sram_kib=128, traced_ns=(128, 256, 512))
    build_s = time.perf_counter() - t0
    controls = [(widget.d, list(widget.D_CHOICES)), (widget.sram, list(widget.SRAM_KIB_CHOICES)),
                (widget.itemsize, [size for _, size in widget.ITEMSIZE_CHOICES]), (widget.causal, [False, True])]
    times, cpu_times, changes = [], [], []
    for _ in range(steps):
        control, values = controls[rng.integers(len(controls))]
        value = rng.choice([v for v in values if v != control.value]).item()
        # the observer: formulas, traced runs not seen before, blit, PNG
        wall, cpu = _timed(lambda: setattr(control, "value", value))
        times.append(wall)
        cpu_times.append(cpu)
        changes.append(f"{control.description}={value}")
    data = widget.view.data
    return {"widget": "traffic_vs_n", "n_range": [int(data.ns.min()), int(data.ns.max())],
            "traced_ns": [128, 256, 512],
            "max_traced_tiles": widget.max_traced_tiles, "build_s": build_s, "changes": changes,
            **_summary(times, cpu_times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--block", type=int, default=64)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "bench_widgets.json")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    rows = []
    for algorithm, causal in TILE_CASES:
        row = time_tile_widget(algorithm, causal, args.n, args.d, args.block, args.steps, rng)
        rows.append(row)
        print(f"tile schedule {algorithm:8s} causal={causal!s:5s} N={row['n']}: {row['schedule_steps']} steps; "
              f"per step median {row['median_ms']:.0f} ms, max {row['max_ms']:.0f} ms "
              f"(CPU median {row['cpu_median_ms']:.0f} ms, max {row['cpu_max_ms']:.0f} ms)")
    row = time_traffic_widget(args.steps, rng)
    rows.append(row)
    print(f"traffic vs N, N {row['n_range'][0]}..{row['n_range'][1]}: per change median {row['median_ms']:.0f} ms, "
          f"max {row['max_ms']:.0f} ms (CPU median {row['cpu_median_ms']:.0f} ms, max {row['cpu_max_ms']:.0f} ms)")
    result = {"environment": {"date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              "python": platform.python_version(), "machine": platform.machine(),
                              "cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0],
                              "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS")},
              "target_ms": TARGET_MS, "seed": args.seed, "rows": rows,
              "worst_max_ms": max(r["max_ms"] for r in rows), "worst_cpu_max_ms": max(r["cpu_max_ms"] for r in rows)}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}; worst step {result['worst_max_ms']:.0f} ms (target {TARGET_MS} ms)")


if __name__ == "__main__":
    main()
