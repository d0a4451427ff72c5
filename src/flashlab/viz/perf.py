"""Notebook 08's figures, drawn from benchmark results files (committed or live).

Each function takes a parsed results file (``course.load_results()["bench_attention"]`` or a live
run) and a ``where`` label for the title, and returns a matplotlib Figure. The numbers behind
them are in :mod:`flashlab.perf`. matplotlib is imported only when a figure is made.
"""
from __future__ import annotations

from ..perf import rows_of
from .style import format_bytes

IMPLS = {"flashlab": "flashlab", "sdpa_flash": "SDPA FLASH (FA2)", "sdpa_cudnn": "SDPA cuDNN",
         "sdpa_efficient": "SDPA EFFICIENT", "naive": "naive PyTorch"}
PANELS = ((64, False), (64, True), (128, False), (128, True))


def _series(rows, impl, key):
    pts = [(r["n"], r["results"].get(impl, {}).get(key)) for r in rows]
    return [p for p in pts if p[1] is not None]


def plot_throughput(bench: dict, mode: str = "fwd", where: str = ""):
    """TFLOP/s against N, one panel per (d, causal), one line per implementation (bf16)."""
    import matplotlib.pyplot as plt

    if mode not in ("fwd", "fwdbwd"):
        raise ValueError(f"mode={mode!r} must be 'fwd' or 'fwdbwd'")
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.8), sharey=True, layout="constrained")
    for ax, (d, causal) in zip(axes, PANELS):
        for impl, label in IMPLS.items():
            pts = _series(rows_of(bench, d, causal), impl, f"{mode}_tflops")
            if pts:
                ax.plot(*zip(*pts), marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(f"d={d}, {'causal' if causal else 'not causal'}")
        ax.set_xlabel("sequence length N (B x N = 16384)")
    axes[0].set_ylabel(f"{mode} TFLOP/s (bf16)")
    axes[-1].legend(fontsize=8)
    fig.suptitle(f"{mode}: {where}")
    return fig


def plot_ladder(bench: dict, d: int = 128, where: str = ""):
    """Forward TFLOP/s of every rung of flashlab.kernels.ladder against N, not causal and causal."""
    import matplotlib.pyplot as plt

    rungs = sorted({k for r in bench["rows"] for k in r["results"] if k.startswith("rung:")})
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True, layout="constrained")
    for ax, causal in zip(axes, (False, True)):
        for rung in rungs:
            pts = _series(rows_of(bench, d, causal), rung, "fwd_tflops")
            if pts:
                ax.plot(*zip(*pts), marker="o", label=rung.removeprefix("rung:"))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N (B x N = 16384)")
        ax.set_title(f"forward, bf16, d={d}, {'causal' if causal else 'not causal'}: {where}")
    axes[0].set_ylabel("TFLOP/s")
    axes[1].legend(fontsize=8)
    return fig


def plot_memory(memory: dict, where: str = ""):
    """Peak extra memory of one forward against N (bench_memory.json), out-of-memory marked."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    rows = sorted((r for r in memory["rows"] if not r["causal"]), key=lambda r: r["n"])
    # distinct markers and line styles: from N = 16384 SDPA FLASH's bytes equal flashlab's (O and lse)
    # plus 1 KiB, so the two lines coincide and only the markers tell them apart
    styles = {"naive": dict(marker="o", linestyle="-", markersize=6),
              "sdpa_flash": dict(marker="s", linestyle="--", markersize=9, markerfacecolor="none", markeredgewidth=1.5),
              "flashlab": dict(marker="x", linestyle=":", markersize=7, markeredgewidth=1.8, zorder=3)}
    for impl, label in (("naive", "naive PyTorch"), ("sdpa_flash", "SDPA FLASH"), ("flashlab", "flashlab")):
        pts = [(r["n"], r["results"].get(impl, {}).get("peak_extra_bytes")) for r in rows]
        pts = [p for p in pts if p[1]]
        if pts:
            ax.loglog(*zip(*pts), label=label, base=2, linewidth=1.6, **styles[impl])
    for r in rows:
        if r["results"].get("naive", {}).get("status") == "oom":
            ax.axvline(r["n"], color="grey", linestyle=":")
            ax.text(r["n"], ax.get_ylim()[1], " naive: out of memory", rotation=90, va="top", fontsize=8)
    ax.set_xlabel("sequence length N (one head, d = 128)")
    ax.set_ylabel("peak extra memory (bytes)")
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda y, _: format_bytes(y)))
    ax.set_title(where)
    ax.legend()
    return fig


def largest_common_memory(memory: dict) -> str:
    """The largest N at which naive attention and flashlab both ran, with their peak extra memory."""
    rows = sorted((r for r in memory["rows"] if not r["causal"]), key=lambda r: r["n"])
    both = [r for r in rows if r["results"].get("naive", {}).get("peak_extra_bytes")
            and r["results"].get("flashlab", {}).get("peak_extra_bytes")]
    if not both:
        return "no N at which both ran"
    last = both[-1]["results"]
    return (f"largest N both ran: {both[-1]['n']}: naive {format_bytes(last['naive']['peak_extra_bytes'])}, "
            f"flashlab {format_bytes(last['flashlab']['peak_extra_bytes'])}")
