"""One colour scheme and one bytes formatter, shared by every flashlab figure.

The same meaning always gets the same colour, in every view:
HBM (off-chip) vs SRAM (on-chip), read (HBM -> SRAM) vs write (SRAM -> HBM), naive vs flash.
"""
from __future__ import annotations

import os

# -- memory levels
HBM = "#c0392b"  # brick red: off-chip, slow, large
SRAM = "#2e86c1"  # blue: on-chip, fast, small
# -- transfer directions
READ = "#27ae60"  # green: HBM -> SRAM (a load)
WRITE = "#e67e22"  # orange: SRAM -> HBM (a store)
# -- algorithms
NAIVE = "#7f8c8d"  # grey: standard attention, materialises S and P
FLASH = "#8e44ad"  # purple: FlashAttention-2 loop order (the course's main algorithm)
FLASH_FA1 = "#d35486"  # pink: FlashAttention-1 loop order
BACKWARD = "#16a085"  # teal: FlashAttention-2 backward
DECODE = "#b7950b"  # ochre: one query row against a KV cache
BOUND = "#34495e"  # dark slate: the Theta(N^2 d^2 / M) line and lower bounds
# -- tile states in the tile-schedule grids. "Done" and "not yet done" differ in lightness (contrast
# ratio 5.5:1, WCAG's formula) as well as hue, so they stay apart in greyscale and for every
# colour-vision deficiency (tests/test_widgets.py simulates protan-, deuteran- and tritanopia)
TILE_IDLE = "#d9d9d9"  # light grey: S/P tile not yet done; Q/K/... tile in HBM, not touched this step
TILE_DONE = "#6b4e00"  # dark ochre: S/P tile already computed
TILE_SKIPPED = "#ffffff"  # white: causal, never computed
TILE_RESIDENT = "#aed6f1"  # in SRAM this step (a lighter SRAM blue)
TILE_CURRENT = SRAM  # the S/P tile being computed this step

ALGORITHM_COLOURS = {"naive": NAIVE, "fa2": FLASH, "fa1": FLASH_FA1, "backward": BACKWARD,
                     "decode": DECODE}

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def format_bytes(nbytes: float, digits: int = 3) -> str:
    """Human-readable bytes in binary units: ``format_bytes(1536) == '1.5 KiB'``.

    ``digits`` is the number of significant digits kept (trailing zeros dropped).
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float)) and not hasattr(nbytes, "__float__"):
        raise TypeError(f"nbytes={nbytes!r} must be a number of bytes")
    value = float(nbytes)
    if value != value or value < 0:
        raise ValueError(f"nbytes={nbytes!r} must be a non-negative number of bytes")
    unit = 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value /= 1024
        unit += 1
    if unit == 0:
        return f"{int(round(value))} B"
    text = f"{value:.{digits}g}"
    if "e" in text:  # e.g. 1.02e+03 after rounding up to the next unit boundary
        text = f"{value:.0f}"
    return f"{text} {_UNITS[unit]}"


def bytes_axis(axis, log: bool = True) -> None:
    """Label a matplotlib axis (``ax.xaxis`` or ``ax.yaxis``) with :func:`format_bytes` ticks.

    On a log axis the ticks sit on powers of 2 (so labels read 4 KiB, 1 MiB, ...), at most ~8 of them.
    """
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if log:
        axis.set_major_locator(LogLocator(base=2, subs=(1.0,), numticks=8))
        axis.set_minor_formatter(NullFormatter())
    axis.set_major_formatter(FuncFormatter(lambda x, _pos: format_bytes(x) if x > 0 else "0"))


def pyplot():
    """matplotlib.pyplot, switched to the Agg backend first when there is no display.

    In Jupyter the inline / widget backend is already chosen and is left alone.
    """
    import matplotlib

    headless = not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY")
    in_notebook = "inline" in matplotlib.get_backend() or "ipympl" in matplotlib.get_backend()
    if headless and not in_notebook and os.environ.get("MPLBACKEND") is None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def new_figure(*args, managed: bool = True, **kwargs):
    """``plt.subplots`` with the course's defaults (constrained layout, readable font sizes).

    ``managed=False`` makes a figure pyplot does not track (an Agg canvas of its own): widgets
    use it, so that the notebook does not also show the figure and pyplot's list stays short.
    """
    import matplotlib

    kwargs.setdefault("layout", "constrained")
    with matplotlib.rc_context({"font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10}):
        if managed:
            return pyplot().subplots(*args, **kwargs)
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig_kw = {k: kwargs.pop(k) for k in ("figsize", "dpi", "layout") if k in kwargs}
        fig = Figure(**fig_kw)
        FigureCanvasAgg(fig)
        return fig, fig.subplots(*args, **kwargs)
