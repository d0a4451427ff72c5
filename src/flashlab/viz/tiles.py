"""The tile schedule, drawn from a traced tiled run.

A :class:`TileSchedule` is built once from a :class:`~flashlab.tracer.TrafficTracer` that a tiled
function filled (``tiled_attention``, ``tiled_attention_fa1`` or ``tiled_attention_backward``).
:meth:`TileSchedule.frame` then gives the plain numbers behind step ``t`` of the figure: which
tiles of Q, K, V, O (and statistics, gradients) are resident in SRAM, which were loaded and stored
in this step, which S/P tiles are done, current or skipped (causal), the SRAM occupancy and the
HBM bytes moved so far next to naive attention's total. :class:`TileScheduleView` draws a frame
and redraws the next one by updating its artists (``set_data``), never rebuilding the figure;
:meth:`TileScheduleView.render_png` blits (static axes drawn once, only changed artists redrawn),
which keeps a slider step near 0.1 s for N = 4096.

A "tile" of a (rows x d) tensor is one block of ``block_q`` query rows or ``block_k`` key rows,
the whole head dimension wide; statistics (``lse``, ``m``, ``l``, ``D``) are tiled with the query rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..tracer import READ, TrafficTracer
from . import style

# HBM tensors and on-chip accumulators, tiled by block_q along query rows / by block_k along key rows
QUERY_SIDE = ("Q", "O", "acc", "m", "l", "lse", "dO", "D", "dQ")
KEY_SIDE = ("K", "V", "dK_acc", "dV_acc", "dK", "dV")
# -- cell codes of the tile images (index into TILE_COLOURS)
IDLE, RESIDENT, DONE, SKIPPED, CURRENT = range(5)
TILE_COLOURS = (style.TILE_IDLE, style.TILE_RESIDENT, style.TILE_DONE, style.TILE_SKIPPED,
                style.TILE_CURRENT)


@dataclass(frozen=True)
class Geometry:
    """Shape of a traced run, as the tile grids need it."""

    algorithm: str
    nq: int
    nk: int
    block_q: int
    block_k: int
    causal: bool
    query_tensors: tuple[str, ...]  # in drawing order
    key_tensors: tuple[str, ...]

    @property
    def n_q_tiles(self) -> int:
        return -(-self.nq // self.block_q)

    @property
    def n_k_tiles(self) -> int:
        return -(-self.nk // self.block_k)


@dataclass(frozen=True)
class TileFrame:
    """Everything step ``step`` of the tile-schedule figure shows, as plain numbers and arrays."""

    step: int
    label: str
    batch: int
    query_states: np.ndarray  # (len(query_tensors), n_q_tiles) cell codes IDLE/RESIDENT
    key_states: np.ndarray  # (len(key_tensors), n_k_tiles) cell codes IDLE/RESIDENT
    s_states: np.ndarray  # (n_q_tiles, n_k_tiles) cell codes IDLE/DONE/SKIPPED/CURRENT
    reads: tuple[tuple[str, int, int, int], ...]  # (tensor, first tile, last tile + 1, bytes) loaded now
    writes: tuple[tuple[str, int, int, int], ...]  # (tensor, first tile, last tile + 1, bytes) stored now
    resident: tuple[tuple[str, int], ...]  # (buffer name, bytes) in SRAM during this step
    sram_bytes: int  # bytes resident in SRAM during this step
    sram_capacity: int | None  # the capacity the occupancy is compared with
    read_bytes_so_far: int  # HBM -> SRAM bytes up to and including this step
    write_bytes_so_far: int  # SRAM -> HBM bytes up to and including this step
    total_bytes: int  # HBM bytes of the whole traced run
    naive_bytes: int  # HBM bytes naive attention moves for the same shape (formula)


def _tile_span(rows: tuple[int, int], block: int) -> tuple[int, int]:
    return rows[0] // block, -(-rows[1] // block)


def describe_transfers(transfers, width: int = 36, max_ranges: int = 8) -> str:
    """One step's loads or stores as short text: contiguous tiles of a tensor merged into a slice.

    ``transfers`` holds (tensor, first tile, last tile + 1, bytes) as in :attr:`TileFrame.reads`.
    FA1's "init O, l, m" step stores every O, l, m tile: that reads ``O[0:64], l[0:64], m[0:64]``
    (Python slices: tiles 0..63), not 192 names. At most ``max_ranges`` slices are listed (the
    rest counted), wrapped at ``width`` characters so that the text stays inside the figure.
    """
    import textwrap

    ranges: dict[str, list[list[int]]] = {}
    for tensor, lo, hi, _ in transfers:
        spans = ranges.setdefault(tensor, [])
        if spans and spans[-1][1] == lo:
            spans[-1][1] = hi
        else:
            spans.append([lo, hi])
    parts = [f"{t}[{lo}:{hi}]" if hi - lo > 1 else f"{t}[{lo}]" for t, spans in ranges.items() for lo, hi in spans]
    if len(parts) > max_ranges:
        parts = parts[:max_ranges] + [f"(+{len(parts) - max_ranges} more)"]
    return "\n".join(textwrap.wrap(", ".join(parts), width=width, subsequent_indent="       ")) or "-"


def _geometry(tracer: TrafficTracer) -> Geometry:
    meta = tracer.meta
    algorithm = str(meta.get("algorithm", "unknown"))
    names = {e.tensor for e in tracer.events} | {r.tensor for s in tracer.steps for r in s.resident}
    q_rows = [e.rows[1] for e in tracer.events if e.tensor in QUERY_SIDE]
    k_rows = [e.rows[1] for e in tracer.events if e.tensor in KEY_SIDE]
    nq = int(meta.get("Nq", max(q_rows, default=1)))
    nk = int(meta.get("Nk", max(k_rows, default=1)))
    block_q = int(meta.get("block_q", min((e.rows[1] - e.rows[0] for e in tracer.events
                                           if e.tensor == "Q"), default=nq)))
    block_k = int(meta.get("block_k", min((e.rows[1] - e.rows[0] for e in tracer.events
                                           if e.tensor == "K"), default=nk)))
    return Geometry(algorithm, nq, nk, block_q, block_k, bool(meta.get("causal", False)),
                    tuple(t for t in QUERY_SIDE if t in names), tuple(t for t in KEY_SIDE if t in names))


def _naive_bytes(geo: Geometry, meta: dict) -> int:
    from .. import traffic

    d = int(meta.get("d", 0))
    if not d:
        return 0
    kwargs = dict(dv=meta.get("dv"), itemsize=int(meta["itemsize"]), batch=int(meta.get("batch", 1)))
    if "backward" in geo.algorithm:
        return traffic.naive_backward_traffic(geo.nq, geo.nk, d, **kwargs).total
    return traffic.naive_traffic(geo.nq, geo.nk, d, **kwargs).total


class TileSchedule:
    """Indexes one traced run so that any step's :class:`TileFrame` costs O(tiles + events in the step)."""

    def __init__(self, tracer: TrafficTracer, sram_capacity: int | None = None) -> None:
        if not isinstance(tracer, TrafficTracer):
            raise TypeError(f"tracer must be a TrafficTracer filled by a tiled function, got {type(tracer).__name__}")
        if not tracer.steps:
            raise ValueError("tracer holds no steps: pass it to tiled_attention(..., tracer=tracer) first")
        if sram_capacity is not None and (not isinstance(sram_capacity, int) or sram_capacity < 1):
            raise ValueError(f"sram_capacity={sram_capacity!r} must be a positive number of bytes or None")
        self.tracer = tracer
        self.geometry = geo = _geometry(tracer)
        self.sram_capacity = sram_capacity
        self.n_steps = len(tracer.steps)
        self.n_batch = 1 + max((s.batch for s in tracer.steps), default=0)
        self.events_by_step: list[list] = [[] for _ in range(self.n_steps)]
        for e in tracer.events:
            self.events_by_step[e.step].append(e)
        reads, writes = tracer.cumulative_bytes()
        self.cumulative_read = np.asarray(reads, dtype=np.int64)  # (n_steps,)
        self.cumulative_write = np.asarray(writes, dtype=np.int64)  # (n_steps,)
        self.total_bytes = tracer.hbm_bytes
        self.naive_bytes = _naive_bytes(geo, tracer.meta)
        # step at which S/P tile (i, j) of batch b is computed; n_steps when never
        self.tile_step = np.full((self.n_batch, geo.n_q_tiles, geo.n_k_tiles), self.n_steps, dtype=np.int64)
        for s in tracer.steps:
            if s.q_block is not None and s.k_block is not None:
                cell = (s.batch, s.q_block, s.k_block)
                self.tile_step[cell] = min(self.tile_step[cell], s.index)
        self.skipped = self._skipped_mask()  # (n_q_tiles, n_k_tiles) bool
        self.resident_bytes = np.array([sum(r.nbytes for r in s.resident) for s in tracer.steps], dtype=np.int64)

    def _skipped_mask(self) -> np.ndarray:
        # the tiles the visibility model skips for the traced run's AttnSpec (older traces: causal flag)
        from ..attnspec import AttnSpec
        from ..visibility import SKIPPED, tiles

        geo = self.geometry
        spec = self.tracer.meta.get("spec") or AttnSpec(causal=geo.causal)
        return tiles(spec, geo.nq, geo.nk, geo.block_q, geo.block_k).states == SKIPPED

    def _check_step(self, step) -> int:
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise TypeError(f"step must be an int, got {type(step).__name__}")
        if not 0 <= step < self.n_steps:
            raise ValueError(f"step={step} is out of range: this run has steps 0..{self.n_steps - 1}")
        return int(step)

    def frame(self, step: int) -> TileFrame:
        """The data drawn at ``step``."""
        t = self._check_step(step)
        geo = self.geometry
        s = self.tracer.steps[t]
        q_states = np.full((len(geo.query_tensors), geo.n_q_tiles), IDLE, dtype=np.int8)
        k_states = np.full((len(geo.key_tensors), geo.n_k_tiles), IDLE, dtype=np.int8)
        for r in s.resident:
            if r.tensor in geo.query_tensors:
                lo, hi = _tile_span(r.rows, geo.block_q)
                q_states[geo.query_tensors.index(r.tensor), lo:hi] = RESIDENT
            elif r.tensor in geo.key_tensors:
                lo, hi = _tile_span(r.rows, geo.block_k)
                k_states[geo.key_tensors.index(r.tensor), lo:hi] = RESIDENT
        steps_of_batch = self.tile_step[s.batch]
        s_states = np.where(steps_of_batch < t, DONE, IDLE).astype(np.int8)
        s_states[self.skipped] = SKIPPED
        if s.q_block is not None and s.k_block is not None:
            s_states[s.q_block, s.k_block] = CURRENT
        reads, writes = [], []
        for e in self.events_by_step[t]:
            block = geo.block_k if e.tensor in KEY_SIDE else geo.block_q
            lo, hi = _tile_span(e.rows, block)
            (reads if e.direction == READ else writes).append((e.tensor, lo, hi, e.nbytes))
        return TileFrame(
            step=t, label=s.label, batch=s.batch, query_states=q_states, key_states=k_states,
            s_states=s_states, reads=tuple(reads), writes=tuple(writes),
            resident=tuple((r.tensor, r.nbytes) for r in s.resident),
            sram_bytes=int(self.resident_bytes[t]), sram_capacity=self.sram_capacity,
            read_bytes_so_far=int(self.cumulative_read[t]), write_bytes_so_far=int(self.cumulative_write[t]),
            total_bytes=self.total_bytes, naive_bytes=self.naive_bytes)


def tile_schedule_data(tracer: TrafficTracer | TileSchedule, step: int,
                       sram_capacity: int | None = None) -> TileFrame:
    """The numbers behind step ``step`` of the tile-schedule figure (builds the index once per call)."""
    schedule = tracer if isinstance(tracer, TileSchedule) else TileSchedule(tracer, sram_capacity)
    return schedule.frame(step)


def reuse_counts(tracer: TrafficTracer) -> dict[str, np.ndarray]:
    """How many times each tile of each tensor was loaded from HBM: {tensor: (n_tiles,) int array}.

    Tensors that are only written (O in FA2, dK, dV) are left out; S and P never appear in a
    flash trace.
    """
    geo = TileSchedule(tracer).geometry
    counts: dict[str, np.ndarray] = {}
    for e in tracer.events:
        if e.direction != READ or e.tensor not in QUERY_SIDE + KEY_SIDE:
            continue
        key_side = e.tensor in KEY_SIDE
        block, n = (geo.block_k, geo.n_k_tiles) if key_side else (geo.block_q, geo.n_q_tiles)
        lo, hi = _tile_span(e.rows, block)
        counts.setdefault(e.tensor, np.zeros(n, dtype=np.int64))[lo:hi] += 1
    order = [t for t in QUERY_SIDE + KEY_SIDE if t in counts]
    return {t: counts[t] for t in order}


# -- figures ---------------------------------------------------------------------------------------

def _title(geo: Geometry) -> str:
    names = {"fa2_forward": "FlashAttention-2 forward", "fa1_forward": "FlashAttention-1 forward",
             "backward": "FlashAttention-2 backward"}
    name = names.get(geo.algorithm, geo.algorithm)
    causal = ", causal" if geo.causal else ""
    return f"{name}: Nq={geo.nq}, Nk={geo.nk}, block_q={geo.block_q}, block_k={geo.block_k}{causal}"


def step_title(step: int, n_steps: int) -> str:
    """How the figure and the widget's slider name a step: 0-based, as ``frame(step)``, the
    slider's value and ``tracer.steps[step]``: "step 6 (of 0..17)"."""
    return f"step {step} (of 0..{n_steps - 1})"


def _tile_grid(ax_q, ax_k, ax_s) -> list:
    """Integer tick labels on the block axes; thin white lines between tiles (one LineCollection
    per grid, much cheaper to draw than one minor tick per tile). Returns the line collections."""
    from matplotlib.collections import LineCollection
    from matplotlib.ticker import MaxNLocator

    for axis in (ax_q.yaxis, ax_k.xaxis, ax_s.xaxis, ax_s.yaxis):
        axis.set_major_locator(MaxNLocator(nbins=8, integer=True))
    lines = []
    for ax in (ax_q, ax_k, ax_s):
        image = ax.get_images()[0]
        rows, cols = image.get_array().shape
        segments = [[(c - 0.5, -0.5), (c - 0.5, rows - 0.5)] for c in range(1, cols)]
        segments += [[(-0.5, r - 0.5), (cols - 0.5, r - 0.5)] for r in range(1, rows)]
        collection = LineCollection(segments, colors="white", linewidths=0.8 if max(rows, cols) <= 32 else 0.3)
        ax.add_collection(collection, autolim=False)
        lines.append(collection)
    return lines


class TileScheduleView:
    """The tile-schedule figure; :meth:`update` redraws another step by updating artists in place."""

    def __init__(self, schedule: TileSchedule, step: int = 0, figsize=(12.5, 7), dpi: int = 80,
                 managed: bool = True) -> None:
        from matplotlib.colors import ListedColormap
        from matplotlib.lines import Line2D
        from matplotlib.patches import Patch

        self.schedule = schedule
        geo = schedule.geometry
        self.fig, axes = style.new_figure(
            2, 3, figsize=figsize, dpi=dpi, managed=managed,
            gridspec_kw={"width_ratios": [0.45 * min(max(1, len(geo.query_tensors)), 7), 6, 3.6],
                         "height_ratios": [0.45 * max(3, len(geo.key_tensors)), 6]})
        self.fig.suptitle(_title(geo), fontsize=12)
        axes[0, 0].axis("off")
        self.ax_q, self.ax_k, self.ax_s = axes[1, 0], axes[0, 1], axes[1, 1]
        self.ax_text, self._bars_slot = axes[0, 2], axes[1, 2]  # the slot becomes two panels (_build_bars)
        cmap = ListedColormap(TILE_COLOURS)
        frame = schedule.frame(step)
        kw = dict(cmap=cmap, vmin=-0.5, vmax=len(TILE_COLOURS) - 0.5, interpolation="nearest", aspect="auto")
        self.im_q = self.ax_q.imshow(frame.query_states.T, **kw)  # (n_q_tiles, query tensors)
        self.im_k = self.ax_k.imshow(frame.key_states, **kw)  # (key tensors, n_k_tiles)
        self.im_s = self.ax_s.imshow(frame.s_states, **kw)  # (n_q_tiles, n_k_tiles)
        self.ax_q.set_xticks(range(len(geo.query_tensors)), geo.query_tensors)
        self.ax_q.set_ylabel(f"query block i ({geo.block_q} rows each)")
        self.ax_k.set_yticks(range(len(geo.key_tensors)), geo.key_tensors)
        self.ax_k.set_title(f"key block j ({geo.block_k} rows each)", fontsize=10)
        self.ax_k.xaxis.tick_top()
        self.ax_s.set_xlabel("S / P tile (i, j): key block j")
        self.ax_s.sharey(self.ax_q)
        self.ax_s.sharex(self.ax_k)
        self.ax_s.tick_params(labelleft=False)
        self.grid_lines = _tile_grid(self.ax_q, self.ax_k, self.ax_s)
        # this step's loads (green, pointing into SRAM) and stores (orange, pointing out)
        mk = dict(linestyle="none", markersize=9, markeredgecolor="black", markeredgewidth=0.6)
        self.rd_q, = self.ax_q.plot([], [], "v", color=style.READ, **mk)
        self.wr_q, = self.ax_q.plot([], [], "^", color=style.WRITE, **mk)
        self.rd_k, = self.ax_k.plot([], [], "v", color=style.READ, **mk)
        self.wr_k, = self.ax_k.plot([], [], "^", color=style.WRITE, **mk)
        legend = [Patch(color=style.TILE_RESIDENT, label="in SRAM"), Patch(color=style.TILE_CURRENT, label="S/P tile now"),
                  Patch(color=style.TILE_DONE, label="S/P done"),
                  Patch(color=style.TILE_IDLE, label="S/P not yet done (Q, K, ...: in HBM)"),
                  Patch(facecolor=style.TILE_SKIPPED, edgecolor="grey", label="skipped (causal)"),
                  Line2D([], [], marker="v", color=style.READ, label="loaded now (HBM→SRAM)", **mk),
                  Line2D([], [], marker="^", color=style.WRITE, label="stored now (SRAM→HBM)", **mk)]
        self.ax_text.axis("off")
        self.fig.legend(handles=legend, loc="outside lower center", fontsize=8, frameon=False, ncols=4)
        self.step_text = self.ax_text.text(0.0, 1.0, "", transform=self.ax_text.transAxes, fontsize=9,
                                           va="top", family="monospace")
        self.step_text.set_in_layout(False)  # its length changes per step; the layout is solved once
        self._build_bars(frame)
        self.update(step)
        self.fig.canvas.draw()  # solve the constrained layout once, then keep it: redraws skip it
        self.fig.set_layout_engine("none")
        self._background = None

    def _dynamic_artists(self) -> list:
        """Artists a step can change. The "flash total" and "naive total" bars (index 3, 4) are the
        same at every step, so they stay in the cached background."""
        return [self.im_q, self.im_k, self.im_s, *self.grid_lines, self.rd_q, self.wr_q, self.rd_k, self.wr_k,
                *self.bars[:3], *([self.capacity_line] if self.capacity_line else []), *self.bar_texts[:3],
                self.step_text]

    def render_rgba(self):
        """Render the current step fast: the static parts (axes, ticks, labels) are drawn once and
        cached; each call restores them and draws only the artists a step changes (blitting).
        Returns the canvas pixels, an (H, W, 4) uint8 array."""
        canvas = self.fig.canvas
        if self._background is None:
            for artist in self._dynamic_artists():
                artist.set_animated(True)
            canvas.draw()  # static parts only: animated artists are skipped
            self._background = canvas.copy_from_bbox(self.fig.bbox)
        canvas.restore_region(self._background)
        for artist in self._dynamic_artists():
            self.fig.draw_artist(artist)
        return np.asarray(canvas.buffer_rgba())

    def render_png(self) -> bytes:
        """:meth:`render_rgba` encoded as PNG bytes (what the notebook widget shows)."""
        import io

        from PIL import Image

        buffer = io.BytesIO()
        # convert("RGB") in Pillow is ~25x faster than NumPy copying the strided [..., :3] view
        Image.fromarray(self.render_rgba()).convert("RGB").save(buffer, format="png", compress_level=1)
        return buffer.getvalue()

    def _build_bars(self, frame: TileFrame) -> None:
        """Two panels in the lower right slot: SRAM occupancy against the SRAM capacity (bytes on
        chip, linear), and the HBM bytes moved (log scale). The capacity line is drawn only in the
        first: HBM totals are not comparable with it."""
        from matplotlib.ticker import MultipleLocator

        spec = self._bars_slot.get_subplotspec()
        self._bars_slot.remove()
        sub = spec.subgridspec(2, 1, height_ratios=[1.25, 4])
        self.ax_sram, self.ax_hbm = self.fig.add_subplot(sub[0]), self.fig.add_subplot(sub[1])
        run_colour = {"fa2_forward": style.FLASH, "fa1_forward": style.FLASH_FA1,
                      "backward": style.BACKWARD}.get(self.schedule.geometry.algorithm, style.FLASH)
        text_kw = dict(va="center", fontsize=8, bbox=dict(facecolor="white", edgecolor="none", alpha=0.75, pad=0.5))
        # -- on chip: this step's resident tiles against the capacity of one SM's shared memory
        ax = self.ax_sram
        sram_bar = ax.barh([0], [0], color=style.SRAM)[0]
        ax.set_yticks([0], ["SRAM now"])
        top = max(int(self.schedule.resident_bytes.max()), frame.sram_capacity or 0, 1)
        ax.set_xlim(0, top * 1.45)  # room for the label after the longest bar
        ax.xaxis.set_major_locator(MultipleLocator(2 ** int(np.log2(top * 1.45 / 2))))  # 2-3 ticks, powers of 2
        style.bytes_axis(ax.xaxis, log=False)
        ax.tick_params(axis="x", labelsize=8)
        self.capacity_line = None
        if frame.sram_capacity:  # dark, so that it shows where it crosses the bar
            self.capacity_line = ax.axvline(frame.sram_capacity, color="black", linestyle="--", linewidth=1)
            ax.set_title(f"on chip: SRAM of one SM\ncapacity {style.format_bytes(frame.sram_capacity)} (dashed)",
                         fontsize=9)
        else:
            ax.set_title("on chip: SRAM", fontsize=9)
        # -- off chip: bytes between HBM and SRAM so far, and the whole run's and naive attention's totals
        ax = self.ax_hbm
        labels = ["HBM read\nso far", "HBM written\nso far", "flash total", "naive total"]
        colours = [style.READ, style.WRITE, run_colour, style.NAIVE]  # as in every other view
        hbm_bars = list(ax.barh(range(4), [1] * 4, color=colours))
        ax.set_yticks(range(4), labels)
        ax.invert_yaxis()
        big = max(frame.naive_bytes, frame.total_bytes, 1)
        ax.set_xscale("log")
        sizes = [e.nbytes for e in self.schedule.tracer.events if e.nbytes > 0]
        small = max(1, min(sizes, default=2) // 2)
        ax.set_xlim(small, big * 8)
        style.bytes_axis(ax.xaxis)
        ax.tick_params(axis="x", labelsize=8, labelrotation=30)
        ax.set_xlabel("bytes (log scale)")
        ax.set_title("HBM traffic", fontsize=9)
        self.bars = [sram_bar, *hbm_bars]  # the order of TileFrame's values in update()
        self.bar_texts = [self.ax_sram.text(0, 0, "", **text_kw)] + [ax.text(0, k, "", **text_kw) for k in range(4)]

    def update(self, step: int) -> TileFrame:
        """Redraw for ``step``: image data, markers, bars and text change; nothing is rebuilt."""
        frame = self.schedule.frame(step)
        self.im_q.set_data(frame.query_states.T)
        self.im_k.set_data(frame.key_states)
        self.im_s.set_data(frame.s_states)
        geo = self.schedule.geometry
        for reads_or_writes, line_q, line_k, dx in ((frame.reads, self.rd_q, self.rd_k, -0.2),
                                                    (frame.writes, self.wr_q, self.wr_k, 0.2)):
            qx, qy, kx, ky = [], [], [], []
            for tensor, lo, hi, _ in reads_or_writes:
                if tensor in geo.query_tensors:
                    col = geo.query_tensors.index(tensor)
                    qx += [col + dx] * (hi - lo)
                    qy += list(range(lo, hi))
                elif tensor in geo.key_tensors:
                    row = geo.key_tensors.index(tensor)
                    kx += list(range(lo, hi))
                    ky += [row - dx] * (hi - lo)
            line_q.set_data(qx, qy)
            line_k.set_data(kx, ky)
        values = [frame.sram_bytes, frame.read_bytes_so_far, frame.write_bytes_so_far,
                  frame.total_bytes, frame.naive_bytes]
        lo = self.ax_hbm.get_xlim()[0]
        for k, (bar, text, value) in enumerate(zip(self.bars, self.bar_texts, values)):
            width = value if k == 0 else max(value, lo)  # SRAM: linear axis from 0; HBM: log axis
            gap = self.ax_sram.get_xlim()[1] * 0.02 if k == 0 else width * 0.1
            bar.set_width(width)
            text.set_position((width + gap, text.get_position()[1]))
            text.set_text(style.format_bytes(value))
        over = bool(frame.sram_capacity) and frame.sram_bytes > frame.sram_capacity
        self.bars[0].set_hatch("///" if over else None)  # over capacity: these tiles would not fit
        if over:
            self.bar_texts[0].set_text(style.format_bytes(frame.sram_bytes) + " (over)")
        batch = f"  batch {frame.batch}" if self.schedule.n_batch > 1 else ""
        self.step_text.set_text(f"{step_title(frame.step, self.schedule.n_steps)}: {frame.label}{batch}\n"
                                f"load : {describe_transfers(frame.reads)}\n"
                                f"store: {describe_transfers(frame.writes)}")
        self.frame = frame
        return frame


def plot_tile_schedule(tracer: TrafficTracer | TileSchedule, step: int = 0,
                       sram_capacity: int | None = None, **kwargs):
    """View 1: the tile schedule at ``step``. Returns the Figure; ``fig.view.update(t)`` redraws step t."""
    schedule = tracer if isinstance(tracer, TileSchedule) else TileSchedule(tracer, sram_capacity)
    view = TileScheduleView(schedule, step, **kwargs)
    view.fig.view = view
    return view.fig


def plot_reuse_heatmap(tracer: TrafficTracer, figsize=(10, 4), dpi: int = 100):
    """View 2: how many times each tile was loaded from HBM, one row per tensor, one column per tile."""
    from matplotlib.ticker import MaxNLocator

    counts = reuse_counts(tracer)
    geo = TileSchedule(tracer).geometry
    q_side = [t for t in counts if t in QUERY_SIDE]
    k_side = [t for t in counts if t in KEY_SIDE]
    panels = [(names, n, block, side) for names, n, block, side in
              ((q_side, geo.n_q_tiles, geo.block_q, "query"), (k_side, geo.n_k_tiles, geo.block_k, "key"))
              if names]
    fig, axes = style.new_figure(len(panels), 1, figsize=figsize, dpi=dpi, squeeze=False,
                                 height_ratios=[len(p[0]) for p in panels])
    top = max(int(c.max()) for c in counts.values())
    image = None
    for ax, (names, n, block, side) in zip(axes[:, 0], panels):
        grid = np.stack([counts[t] for t in names])  # (tensors, tiles)
        image = ax.imshow(grid, cmap="Greens", vmin=0, vmax=top, aspect="auto", interpolation="nearest")
        ax.set_yticks(range(len(names)), names)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=16, integer=True))
        ax.set_xlabel(f"{side} block ({block} rows each)")
        if n <= 32:
            for (r, c), value in np.ndenumerate(grid):
                ax.text(c, r, str(value), ha="center", va="center", fontsize=9,
                        color="white" if value > top * 0.6 else "black")
    colorbar = fig.colorbar(image, ax=axes[:, 0], label="loads from HBM per tile")
    colorbar.locator = MaxNLocator(integer=True)
    colorbar.update_ticks()
    fig.suptitle(f"Tile reuse: {_title(geo)}", fontsize=11)
    return fig
