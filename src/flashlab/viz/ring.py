"""Pictures of ring attention: which K/V shard each rank holds at each step, and what it costs.

:func:`ring_schedule_data` turns :func:`flashlab.distributed.ring_schedule` into plain arrays (the
tests check them); :func:`plot_ring_schedule` draws them as a steps x ranks grid, as the tile
schedule draws tiles; :func:`ring_results_table` reads a committed ``bench_ring.json``.
"""
from __future__ import annotations

import numpy as np

from flashlab import distributed


def ring_schedule_data(world_size: int, layout: str = "contiguous", causal: bool = False) -> dict:
    """{"source": (steps, ranks) int, "work": (steps, ranks) float, "per_rank": (ranks,) float}.

    ``source[s, r]``: the rank whose K/V shard rank r holds at step s. ``work[s, r]``: the attention
    rank r does at step s, in units of one full (N_local x N_local) block (a causal diagonal pair is
    half of a full pair; a skipped pair is 0).
    """
    schedule = distributed.ring_schedule(world_size, layout, causal)
    share = 1.0 if layout == "contiguous" else 0.5  # a chunk's fraction of a rank's shard
    source = np.array([[src for src, _ in row] for row in schedule])  # (steps, ranks)
    work = np.array([[sum(share ** 2 * (0.5 if w.kind == "diagonal" else 1.0) for w in items)
                      for _, items in row] for row in schedule])  # (steps, ranks)
    return dict(source=source, work=work, per_rank=work.sum(axis=0))


def plot_ring_schedule(world_size: int = 4, causal: bool = True):
    """Both layouts side by side: per step and rank, the K/V shard held (label) and the work done
    (shade); the title gives the busiest rank's total against the average."""
    import matplotlib.pyplot as plt

    from flashlab.viz.style import FLASH

    fig, axes = plt.subplots(1, 2, figsize=(4.2 * 2, 0.9 + 0.55 * world_size), constrained_layout=True)
    for ax, layout in zip(axes, distributed.LAYOUTS):
        data = ring_schedule_data(world_size, layout, causal)
        ax.imshow(data["work"], cmap="Purples", vmin=0, vmax=1.25, aspect="auto")
        for s in range(world_size):
            for r in range(world_size):
                ax.text(r, s, f"K/V {data['source'][s, r]}\n{data['work'][s, r]:g}", ha="center", va="center",
                        fontsize=8, color="black")
        ax.set_xticks(range(world_size), [f"rank {r}" for r in range(world_size)])
        ax.set_yticks(range(world_size), [f"step {s}" for s in range(world_size)])
        busiest, mean = data["per_rank"].max(), data["per_rank"].mean()
        ax.set_title(f"{layout}{', causal' if causal else ''}: busiest rank {busiest:g} "
                     f"blocks, mean {mean:g}", fontsize=9, color=FLASH)
    return fig


def ring_results_table(results: dict) -> str:
    """A ``bench_ring.json`` payload (see benchmarks/bench_ring.py) as an aligned text table, one row
    per (N, causal): times in ms (median of the run's repetitions, slowest rank), the ring's speed-up
    over one GPU, the ring's steps without communication ("no-comm") and the communication left
    exposed (ring minus no-comm)."""
    head = (f"{'N':>8} {'causal':>6} {'layout':>10} {'1 GPU ms':>9} {'ring ms':>8} {'1 GPU/ring':>10} "
            f"{'no-comm ms':>10} {'exposed ms':>10}  naive on 1 GPU")
    lines = [head]
    for r in results["rows"]:
        quiet = r.get("compute_only_ms")
        naive = "fits" if r["naive_one_gpu"] == "ok" else r["naive_one_gpu"]
        lines.append(f"{r['n']:>8,} {'yes' if r['causal'] else 'no':>6} {r['layout']:>10} {r['one_gpu_ms']:>9.2f} "
                     f"{r['ring_ms']:>8.2f} {r['speedup_vs_one_gpu']:>9.2f}x "
                     f"{'-' if quiet is None else f'{quiet:.2f}':>10} {r['exposed_comm_ms']:>10.2f}  {naive}")
    return "\n".join(lines)
