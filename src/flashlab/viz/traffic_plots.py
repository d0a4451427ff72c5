"""HBM traffic figures, from the formulas and from traced runs.

- :func:`plot_traffic_vs_n`: bytes between HBM and SRAM against sequence length N (log-log):
  naive vs flash formula curves, traced runs as points on them, and the paper's
  Theta(N^2 d^2 / M) line (FlashAttention, Dao et al. 2022, Theorem 2).
- :func:`plot_traffic_vs_sram`: flash traffic against SRAM size M at fixed N and d, falling about
  as 1/M until it meets the compulsory traffic (read Q, K, V and write O once); real shared-memory
  sizes marked, per SM and summed over all SMs (:mod:`flashlab.hardware`).
- :func:`plot_moved_vs_touched`: bytes moved between HBM and SRAM next to bytes read and written
  inside SRAM by the compute, per algorithm.

Block sizes from an SRAM size M (in elements) follow the paper: ``paper_block_sizes(M, d)``
(block_k = ceil(M / 4d), block_q = min(block_k, d)). Every data function returns plain numbers so
that tests can tie each plotted value to a formula or a trace.

Tables of traced runs (notebooks 03 and 04): :func:`trace_table` (FA1 against FA2 side by side),
:func:`bytes_by_tensor_table`, :func:`formulas_vs_traces_table` (the formulas of
:mod:`flashlab.traffic` against traces on random shapes).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from .. import hardware
from . import style


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive int")
    return int(value)


def traced_forward(n: int, d: int, block_q: int, block_k: int, causal: bool = False, itemsize: int = 2,
                   algorithm: str = "fa2", seed: int = 0):
    """Run a tiled forward (or backward) on random inputs with a tracer; returns the tracer.

    ``algorithm``: "fa2" (:func:`flashlab.tiled.tiled_attention`), "fa1" or "backward".
    Bytes are counted at ``itemsize`` bytes per element and 4 bytes per row statistic.
    """
    from ..tiled import tiled_attention, tiled_attention_backward, tiled_attention_fa1
    from ..tracer import TrafficTracer

    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((n, d)).astype(np.float32) for _ in range(3))  # (N, d) each
    tracer = TrafficTracer(itemsize=itemsize, stat_itemsize=4)
    kw = dict(causal=causal, block_q=block_q, block_k=block_k)
    if algorithm == "fa2":
        tiled_attention(q, k, v, tracer=tracer, **kw)
    elif algorithm == "fa1":
        tiled_attention_fa1(q, k, v, tracer=tracer, **kw)
    elif algorithm == "backward":
        o, lse = tiled_attention(q, k, v, return_lse=True, **kw)  # (N, d), (N,)
        do = rng.standard_normal((n, d)).astype(np.float32)  # (N, d)
        tiled_attention_backward(q, k, v, o, lse, do, tracer=tracer, **kw)
    else:
        raise ValueError(f"algorithm={algorithm!r} must be 'fa2', 'fa1' or 'backward'")
    return tracer


@functools.lru_cache(maxsize=256)
def traced_hbm_bytes(n: int, d: int, block_q: int, block_k: int, causal: bool, itemsize: int) -> int:
    """``traced_forward(...).hbm_bytes`` of the FA2 forward, remembered per shape: a widget control
    moved back to a setting it has shown redraws without tracing again. (The bytes depend on
    the shape only, never on the random values.)"""
    return traced_forward(n, d, block_q, block_k, causal, itemsize).hbm_bytes


# -- trace tables (notebooks 03 and 04) ----------------------------------------------------------
_FLOAT_NAMES = {1: "fp8", 2: "fp16", 4: "fp32", 8: "fp64"}


def _traces_arg(traces) -> dict:
    """{label: TrafficTracer} of finished runs that share one shape."""
    from ..tracer import TrafficTracer

    if not isinstance(traces, dict) or not traces or not all(
            isinstance(t, TrafficTracer) and t.meta for t in traces.values()):
        raise ValueError(f"traces={traces!r} must be a non-empty dict of label -> TrafficTracer of a finished run")
    shapes = {tuple(t.meta.get(key) for key in ("Nq", "Nk", "d", "block_q", "block_k", "itemsize", "stat_itemsize"))
              for t in traces.values()}
    if len(shapes) > 1:
        raise ValueError(f"traces must share one shape (Nq, Nk, d, block_q, block_k, itemsizes); got {sorted(shapes)}")
    return traces


def trace_table(traces) -> str:
    """Side by side, one column per traced run of the same shape (``traces``: {label: tracer},
    e.g. ``{"FA1": t1, "FA2": t2}`` from :func:`traced_forward`): HBM bytes read and written,
    matmul FLOPs and bytes touched in SRAM, under a line that gives the shape."""
    meta = next(iter(_traces_arg(traces).values())).meta
    sizes = f"N = {meta['Nq']}" if meta["Nq"] == meta["Nk"] else f"Nq = {meta['Nq']}, Nk = {meta['Nk']}"
    kinds = [_FLOAT_NAMES.get(meta[key], f"{meta[key]}-byte") for key in ("itemsize", "stat_itemsize")]
    lines = [f"{sizes}, d = {meta['d']}, blocks {meta['block_q']} x {meta['block_k']}, "
             f"{kinds[0]} tensors, {kinds[1]} statistics",
             f"{'':<22}" + "".join(f"{label:>12}" for label in traces)]
    rows = (("HBM bytes read", lambda t: style.format_bytes(t.hbm_read_bytes)),
            ("HBM bytes written", lambda t: style.format_bytes(t.hbm_write_bytes)),
            ("matmul FLOPs", lambda t: f"{t.flops:,}"),
            ("bytes touched in SRAM", lambda t: style.format_bytes(t.sram_bytes)))
    for name, cell in rows:
        lines.append(f"{name:<22}" + "".join(f"{cell(t):>12}" for t in traces.values()))
    return "\n".join(lines)


def bytes_by_tensor_table(traces) -> str:
    """One line per traced run (``traces``: {label: tracer}): its HBM bytes per (tensor,
    direction), largest first."""
    lines = []
    for label, t in _traces_arg(traces).items():
        parts = sorted(t.bytes_by_tensor().items(), key=lambda kv: -kv[1])
        lines.append(f"{label}:  " + ",  ".join(f"{tensor} {direction} {style.format_bytes(b)}"
                                                 for (tensor, direction), b in parts))
    return "\n".join(lines)


def formulas_vs_traces_table(trials: int = 6, seed: int = 0) -> str:
    """The traffic formulas of :mod:`flashlab.traffic` (FA1 and FA2 forward, backward) against
    traced NumPy runs (:func:`traced_forward`) on ``trials`` random shapes, one line per shape:
    whether all three formulas equal the traced bytes, else the traced and formula bytes of each
    that differs. Shapes from ``default_rng(seed)``: N in [20, 300), d, block_q and block_k in
    {16, 32, 64}, causal or not."""
    from .. import traffic as tr

    trials = _positive_int("trials", trials)
    formulas = {"fa2": tr.fa2_forward_traffic, "fa1": tr.fa1_forward_traffic, "backward": tr.backward_traffic}
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(trials):
        n, d = int(rng.integers(20, 300)), int(rng.choice([16, 32, 64]))
        block_q, block_k = int(rng.choice([16, 32, 64])), int(rng.choice([16, 32, 64]))
        causal = bool(rng.integers(2))
        differ = []
        for algorithm, formula in formulas.items():
            traced = traced_forward(n, d, block_q, block_k, causal=causal, algorithm=algorithm).hbm_bytes
            model = formula(n, n, d, block_q=block_q, block_k=block_k, causal=causal, itemsize=2,
                            stat_itemsize=4).total
            if traced != model:
                differ.append(f"{algorithm} traced {traced:,} B, formula {model:,} B")
        verdict = ("FA1, FA2 and backward formulas equal the traced bytes" if not differ
                   else "DIFFER: " + "; ".join(differ))
        lines.append(f"N={n:>3} d={d:>2} blocks {block_q}x{block_k} causal={causal!s:<5}: {verdict}")
    return "\n".join(lines)


# -- view 3: traffic vs N ------------------------------------------------------------------------

@dataclass(frozen=True)
class TrafficVsN:
    ns: np.ndarray  # (len(ns),) sequence lengths N (Nq = Nk = N)
    naive: np.ndarray  # bytes, naive_traffic
    fa2: np.ndarray  # bytes, fa2_forward_traffic with the paper's blocks for M
    fa1: np.ndarray  # bytes, fa1_forward_traffic with the same blocks
    theta: np.ndarray  # bytes: N^2 d^2 / M elements x itemsize (Theorem 2's scaling, constant 1)
    traced_ns: tuple[int, ...]
    traced_fa2: tuple[int, ...]  # tracer.hbm_bytes of tiled_attention at traced_ns
    d: int
    sram_bytes: int
    itemsize: int
    causal: bool
    block_q: int
    block_k: int


def forward_totals(ns, d: int, block_q: int, block_k: int, causal: bool, itemsize: int,
                   stat_itemsize: int) -> tuple[np.ndarray, np.ndarray]:
    """Total bytes of :func:`flashlab.traffic.fa2_forward_traffic` and ``fa1_forward_traffic`` for
    Nq = Nk = N at each N of ``ns``, one head: the same sums over blocks, taken with NumPy instead
    of a Python loop (a widget redraws a curve of 25 N up to 65536 in milliseconds, where the loops
    over up to 16384 blocks per N take seconds). Tested equal to the flashlab.traffic functions.
    Returns (fa2, fa1), each (len(ns),) int64."""
    fa2, fa1 = [], []
    for n in (int(n) for n in ns):
        n_q, n_k = -(-n // block_q), -(-n // block_k)
        # FA2: Q read once; per query block i, the keys of the tiles it computes; O and lse written once
        i = np.arange(n_q, dtype=np.int64)  # (n_q,) query blocks
        visited = np.full(n_q, n_k, dtype=np.int64)
        if causal:
            visited = np.minimum(n_k, (np.minimum((i + 1) * block_q, n) - 1) // block_k + 1)
        kv_rows = np.minimum(visited * block_k, n)  # (n_q,) keys seen by query block i
        fa2.append(2 * n * d * itemsize + int(kv_rows.sum()) * 2 * d * itemsize + n * stat_itemsize)
        # FA1: O, l, m initialised; per loaded key block j: K_j, V_j read, then the query rows from the
        # first query block that sees j: Q, O, l, m read and O, l, m written
        j = np.arange(n_k, dtype=np.int64)  # (n_k,) key blocks
        i0 = np.zeros(n_k, dtype=np.int64)
        if causal:
            i0 = np.where(j * block_k > n - 1, n_q, (j * block_k) // block_q)
        loaded = i0 < n_q
        ck = np.minimum((j + 1) * block_k, n) - j * block_k  # (n_k,) rows of key block j
        q_rows = n - i0 * block_q  # (n_k,) query rows that see key block j
        per_block = ck * 2 * d * itemsize + q_rows * (3 * d * itemsize + 4 * stat_itemsize)
        fa1.append(n * d * itemsize + 2 * n * stat_itemsize + int(per_block[loaded].sum()))
    return np.array(fa2, dtype=np.int64), np.array(fa1, dtype=np.int64)


def traffic_vs_n_data(d: int = 64, sram_bytes: int = 128 * 1024, itemsize: int = 2, causal: bool = False,
                      ns=None, traced_ns=(128, 256, 512), max_traced_tiles: int | None = None) -> TrafficVsN:
    """The curves and traced points of :func:`plot_traffic_vs_n` (one head, Nq = Nk = N).

    ``max_traced_tiles``: trace only the N in ``traced_ns`` whose schedule has at most this many
    (block_q x block_k) tiles (a traced NumPy run costs about 0.3 ms per tile on one CPU core);
    the others are left out of ``traced_ns``. None traces every N."""
    from .. import traffic as tr

    d, sram_bytes, itemsize = (_positive_int(k, v) for k, v in
                               (("d", d), ("sram_bytes", sram_bytes), ("itemsize", itemsize)))
    sram_elements = sram_bytes // itemsize
    if sram_elements < 4 * d:
        raise ValueError(f"sram_bytes={sram_bytes} holds {sram_elements} elements; the paper's blocks need "
                         f"at least 4*d = {4 * d} (raise sram_bytes or lower d)")
    block_q, block_k = tr.paper_block_sizes(sram_elements, d)
    ns = np.unique(np.geomspace(128, 65536, 25).astype(int)) if ns is None else np.asarray(ns, dtype=int)
    naive = np.array([tr.naive_traffic(int(n), int(n), d, itemsize=itemsize).total for n in ns])
    fa2, fa1 = forward_totals(ns, d, block_q, block_k, bool(causal), itemsize, stat_itemsize=4)
    theta = ns.astype(float) ** 2 * d**2 / sram_elements * itemsize
    traced_ns = tuple(int(n) for n in traced_ns)
    if max_traced_tiles is not None:
        traced_ns = tuple(n for n in traced_ns if -(-n // block_q) * -(-n // block_k) <= max_traced_tiles)
    traced = tuple(traced_hbm_bytes(n, d, block_q, block_k, bool(causal), itemsize) for n in traced_ns)
    return TrafficVsN(ns, naive, fa2, fa1, theta, traced_ns, traced, d, sram_bytes,
                      itemsize, causal, block_q, block_k)


def traffic_vs_n_limits(datas) -> tuple[tuple[float, float], tuple[float, float]]:
    """((x_min, x_max), (y_min, y_max)) of a log-log axis that holds every curve of ``datas``
    (:class:`TrafficVsN` objects), with the margins :class:`TrafficVsNView` uses."""
    ns = np.concatenate([data.ns for data in datas])
    every = np.concatenate([np.concatenate([data.naive, data.fa2, data.fa1, data.theta]) for data in datas])
    return (float(ns.min()) * 0.8, float(ns.max()) * 1.25), (float(every[every > 0].min()) / 2, float(every.max()) * 2)


class TrafficVsNView:
    """Figure of :class:`TrafficVsN`; :meth:`update` swaps in new data without rebuilding it.

    ``limits`` (from :func:`traffic_vs_n_limits`) fixes the axes for every update that fits in
    them, as the widget does: moving a slider then moves the curves against still axes, and
    :meth:`render_png` redraws only the curves and the title over a cached background."""

    def __init__(self, data: TrafficVsN, figsize=(8, 6), dpi: int = 100, managed: bool = True,
                 limits=None) -> None:
        self.limits = limits
        self._background = None
        self.fig, self.ax = style.new_figure(figsize=figsize, dpi=dpi, managed=managed)
        ax = self.ax
        # naive drawn wider, so it shows around a flash curve that lies on it (small M, large d)
        self.naive, = ax.loglog([], [], color=style.NAIVE, linewidth=4, alpha=0.8, label="naive (formula)")
        self.fa1, = ax.loglog([], [], color=style.FLASH_FA1, linewidth=1.5, linestyle="--",
                              label="FlashAttention-1 loop order (formula)")
        self.fa2, = ax.loglog([], [], color=style.FLASH, linewidth=2, label="FlashAttention-2 (formula)")
        self.theta, = ax.loglog([], [], color=style.BOUND, linestyle=":", linewidth=1.5,
                                label="N²d²/M × itemsize, M in elements: the Θ(N²d²/M) scaling (paper, Thm 2)")
        self.traced, = ax.loglog([], [], "o", color=style.FLASH, markeredgecolor="black", markersize=7,
                                 label="traced tiled_attention runs")
        style.bytes_axis(ax.yaxis)
        from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

        ax.xaxis.set_major_locator(LogLocator(base=2, subs=(1.0,), numticks=10))
        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("sequence length N (Nq = Nk = N), log scale")
        ax.set_ylabel("HBM ↔ SRAM bytes, one head (log scale)")
        ax.grid(True, which="major", alpha=0.3)
        # below the axes, where no curve of any setting reaches it: a redraw leaves it in the background
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncols=2, fontsize=8)
        self.update(data)
        if not managed:  # a widget's figure: solve the constrained layout once, then keep it
            self.fig.canvas.draw()
            self.fig.set_layout_engine("none")

    def _dynamic_artists(self) -> list:
        """What an update changes, in drawing order."""
        return [self.naive, self.fa1, self.fa2, self.theta, self.traced, self.ax.title]

    def update(self, data: TrafficVsN) -> None:
        self.data = data
        self.naive.set_data(data.ns, data.naive)
        self.fa1.set_data(data.ns, data.fa1)
        self.fa2.set_data(data.ns, data.fa2)
        self.theta.set_data(data.ns, data.theta)
        self.traced.set_data(data.traced_ns, data.traced_fa2)
        (x0, x1), (y0, y1) = traffic_vs_n_limits([data])
        if self.limits is not None:  # keep the fixed axes unless these curves do not fit in them
            (fx0, fx1), (fy0, fy1) = self.limits
            if fx0 <= x0 and x1 <= fx1 and fy0 <= y0 and y1 <= fy1:
                (x0, x1), (y0, y1) = self.limits
            else:
                self.limits = ((min(fx0, x0), max(fx1, x1)), (min(fy0, y0), max(fy1, y1)))
                (x0, x1), (y0, y1) = self.limits
        if (x0, x1) != self.ax.get_xlim() or (y0, y1) != self.ax.get_ylim():
            self.ax.set_xlim(x0, x1)
            self.ax.set_ylim(y0, y1)
            self._background = None  # the ticks moved: the cached background is stale
        causal = ", causal" if data.causal else ""
        self.ax.set_title(f"HBM traffic vs N: d={data.d}, M={style.format_bytes(data.sram_bytes)} "
                          f"({data.sram_bytes // data.itemsize} elements of {data.itemsize} B){causal}\n"
                          f"paper blocks for M: block_q={data.block_q}, block_k={data.block_k}; "
                          + (f"traced at N = {', '.join(map(str, data.traced_ns))}" if data.traced_ns
                             else "no traced run (too many tiles to trace quickly)"), fontsize=10)

    def render_rgba(self) -> np.ndarray:
        """Draw the current data: the axes, ticks, grid and legend are drawn once and cached; each
        call restores them and draws only the curves and the title (blitting). Returns the
        canvas pixels, an (H, W, 4) uint8 array."""
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
        """:meth:`render_rgba` as PNG bytes (what the notebook widget shows)."""
        import io

        from PIL import Image

        buffer = io.BytesIO()
        Image.fromarray(self.render_rgba()).convert("RGB").save(buffer, format="png", compress_level=1)
        return buffer.getvalue()


def plot_traffic_vs_n(data: TrafficVsN | None = None, **kwargs):
    """View 3: traffic vs N. Returns the Figure (``fig.view.update(new_data)`` redraws)."""
    view = TrafficVsNView(data or traffic_vs_n_data(**kwargs))
    view.fig.view = view
    return view.fig


# -- view 4: traffic vs SRAM size M --------------------------------------------------------------

@dataclass(frozen=True)
class TrafficVsSram:
    sram_bytes: np.ndarray  # (K,) SRAM sizes M in bytes
    fa1: np.ndarray  # bytes, FA1 loop order with the paper's blocks for M (the Theorem 2 algorithm)
    fa2: np.ndarray  # bytes, FA2 loop order with the same blocks
    theta: np.ndarray  # bytes: N^2 d^2 / M elements x itemsize
    lower_bound: np.ndarray  # bytes: io_lower_bound(N, d, M) x itemsize = max(theta, compulsory)
    compulsory: int  # bytes: read Q, K, V once and write O once
    naive: int  # bytes: naive_traffic (does not depend on M)
    n: int
    d: int
    itemsize: int
    marks: tuple[tuple[str, int], ...] = field(default=())  # (label, bytes) of real SRAM sizes


def traffic_vs_sram_data(n: int = 16384, d: int = 64, itemsize: int = 2, sram_bytes=None) -> TrafficVsSram:
    """The curves of :func:`plot_traffic_vs_sram` (one head, Nq = Nk = n, not causal)."""
    from .. import traffic as tr

    n, d, itemsize = (_positive_int(k, v) for k, v in (("n", n), ("d", d), ("itemsize", itemsize)))
    if sram_bytes is None:
        sram_bytes = np.unique(np.geomspace(4 * d * itemsize * 2, 64 * 2**20, 40).astype(np.int64))
    sram_bytes = np.asarray(sram_bytes, dtype=np.int64)  # (K,)
    if sram_bytes.ndim != 1 or sram_bytes.size == 0 or sram_bytes.min() // itemsize < 4 * d:
        raise ValueError(f"sram_bytes={sram_bytes.tolist()!r} must be a non-empty list of sizes in bytes, each "
                         f"holding at least 4*d = {4 * d} elements of {itemsize} B (the paper's blocks need them)")
    fa1, fa2, theta, bound = [], [], [], []
    for m_bytes in sram_bytes:
        m = int(m_bytes) // itemsize
        bq, bk = tr.paper_block_sizes(m, d)
        kw = dict(block_q=bq, block_k=bk, itemsize=itemsize, stat_itemsize=4)
        fa1.append(tr.fa1_forward_traffic(n, n, d, **kw).total)
        fa2.append(tr.fa2_forward_traffic(n, n, d, **kw).total)
        theta.append(n * n * d * d / m * itemsize)
        bound.append(tr.io_lower_bound(n, d, m) * itemsize)
    marks = []
    for spec in (hardware.A100, hardware.H100):
        short = "H100/H200" if spec is hardware.H100 else spec.name.split()[0]
        marks.append((f"{short} per SM", spec.smem_per_sm))
        marks.append((f"{short} all {spec.sms} SMs", spec.smem_aggregate))
    return TrafficVsSram(sram_bytes, np.array(fa1), np.array(fa2), np.array(theta, dtype=float),
                         np.array(bound, dtype=float), 4 * n * d * itemsize,
                         tr.naive_traffic(n, n, d, itemsize=itemsize).total, n, d, itemsize, tuple(marks))


def plot_traffic_vs_sram(data: TrafficVsSram | None = None, figsize=(9, 6.2), dpi: int = 100, **kwargs):
    """View 4: flash traffic vs SRAM size M, with real shared-memory sizes marked."""
    data = data or traffic_vs_sram_data(**kwargs)
    fig, ax = style.new_figure(figsize=figsize, dpi=dpi)
    m = data.sram_bytes
    ax.loglog(m, np.full(len(m), data.naive), color=style.NAIVE, linewidth=2, label="naive (does not depend on M)")
    ax.loglog(m, data.fa1, color=style.FLASH_FA1, linewidth=2, label="FlashAttention-1 loop order, paper blocks")
    ax.loglog(m, data.fa2, color=style.FLASH, linewidth=2,
              label="FlashAttention-2 loop order, paper blocks (block_q = min(block_k, d) stops growing)")
    ax.loglog(m, data.theta, color=style.BOUND, linestyle=":", linewidth=1.5,
              label="N²d²/M × itemsize, M in elements (falls as 1/M)")
    bottom = data.compulsory / 3
    ax.fill_between(m, bottom, data.lower_bound, color=style.BOUND, alpha=0.12, linewidth=0,
                    label="below io_lower_bound = max(N²d²/M, 4Nd) × itemsize")
    # between the per-SM and the summed marks, on a white box so a line crossing it stays readable
    per_sm = [size for label, size in data.marks if "per SM" in label] or [m[0]]
    summed = [size for label, size in data.marks if "per SM" not in label] or [m[-1]]
    ax.text(np.sqrt(max(per_sm) * min(summed)), data.compulsory / 1.25,
            f"read Q, K, V + write O once: {style.format_bytes(data.compulsory)}", fontsize=8, ha="center", va="top",
            bbox=dict(facecolor="white", edgecolor="none", alpha=0.8, pad=1))
    top = max(data.naive, data.fa1.max(), data.theta.max()) * 3
    for k, (label, size) in enumerate(data.marks):
        per_sm = "per SM" in label
        ax.axvline(size, color=style.SRAM, linestyle="-" if per_sm else ":", linewidth=1.2)
        first = k < 2  # A100: label left of its line; H100/H200: right of it
        ax.text(size * (0.94 if first else 1.06), top / 1.6, f"{label}: {style.format_bytes(size)}",
                color=style.SRAM, fontsize=7.5, rotation=90, va="top", ha="right" if first else "left")
    style.bytes_axis(ax.xaxis)
    style.bytes_axis(ax.yaxis)
    ax.set_ylim(bottom, top)
    ax.set_xlabel("SRAM size M (bytes, log scale); solid blue: shared memory per SM, dotted: summed over all SMs")
    ax.set_ylabel("HBM ↔ SRAM bytes, one head (log scale)")
    ax.set_title(f"Traffic vs SRAM size: N={data.n}, d={data.d}, {data.itemsize}-byte elements\n"
                 "one thread block sees only its own SM's shared memory; the sum is not one pool",
                 fontsize=10)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncols=2, fontsize=8)
    ax.grid(True, which="major", alpha=0.3)
    return fig


# -- view 6: bytes moved vs bytes touched ---------------------------------------------------------

@dataclass(frozen=True)
class MovedVsTouched:
    names: tuple[str, ...]
    kinds: tuple[str, ...]  # "naive", "fa2", "fa1", "backward": picks the colour
    hbm_bytes: tuple[int, ...]  # moved between HBM and SRAM
    sram_bytes: tuple[int, ...]  # read + written inside SRAM by the compute
    n: int
    d: int
    itemsize: int
    block_q: int
    block_k: int
    causal: bool


def naive_sram_bytes(nq: int, nk: int, d: int, dv: int | None = None, itemsize: int = 2) -> int:
    """Bytes naive attention reads and writes inside SRAM, counted as tiled.py counts Step.sram_bytes.

    S = Q K^T reads Q, K and writes S; P = softmax(S) reads S and writes P; O = P V reads P, V and
    writes O: (Nq d + Nk d + Nq Nk) + 2 Nq Nk + (Nq Nk + Nk dv + Nq dv) elements. Each kernel
    streams its operands through SRAM once, so this equals naive's HBM traffic: every byte naive
    touches on chip it also moves to or from HBM.
    """
    dv = d if dv is None else dv
    return (nq * d + nk * d + 4 * nq * nk + nk * dv + nq * dv) * itemsize


def naive_backward_sram_bytes(nq: int, nk: int, d: int, dv: int | None = None, itemsize: int = 2) -> int:
    """Bytes naive attention's backward (paper Algorithm 3) reads and writes inside SRAM, counted as
    tiled.py counts Step.sram_bytes (per-row statistics ignored).

    dV = P^T dO (Nq Nk + Nq dv + Nk dv), dP = dO V^T (Nq dv + Nk dv + Nq Nk), dS = P * (dP - D)
    (3 Nq Nk), dQ = dS K (Nq Nk + Nk d + Nq d), dK = dS^T Q (Nq Nk + Nq d + Nk d) elements. As in
    the forward, each kernel streams its operands through SRAM once, so this equals
    :func:`flashlab.traffic.naive_backward_traffic`.
    """
    dv = d if dv is None else dv
    return (7 * nq * nk + 2 * (nq + nk) * dv + 2 * (nq + nk) * d) * itemsize


def moved_vs_touched_data(n: int = 1024, d: int = 64, block_q: int = 64, block_k: int = 64,
                          itemsize: int = 2, causal: bool = False) -> MovedVsTouched:
    """Naive forward and backward (formulas) and the three traced tiled algorithms at one shape (one head)."""
    from .. import traffic as tr

    n, d, block_q, block_k, itemsize = (_positive_int(k, v) for k, v in (
        ("n", n), ("d", d), ("block_q", block_q), ("block_k", block_k), ("itemsize", itemsize)))
    names, kinds, moved, touched = ["naive forward"], ["naive"], [tr.naive_traffic(n, n, d, itemsize=itemsize).total], \
        [naive_sram_bytes(n, n, d, itemsize=itemsize)]
    for name, kind in (("FA2 forward", "fa2"), ("FA1 forward", "fa1"), ("naive backward", "naive"),
                       ("FA2 backward", "backward")):
        names.append(name)
        kinds.append(kind)
        if kind == "naive":
            moved.append(tr.naive_backward_traffic(n, n, d, itemsize=itemsize).total)
            touched.append(naive_backward_sram_bytes(n, n, d, itemsize=itemsize))
            continue
        tracer = traced_forward(n, d, block_q, block_k, causal, itemsize, algorithm=kind)
        moved.append(tracer.hbm_bytes)
        touched.append(tracer.sram_bytes)
    return MovedVsTouched(tuple(names), tuple(kinds), tuple(moved), tuple(touched), n, d, itemsize,
                          block_q, block_k, causal)


def plot_moved_vs_touched(data: MovedVsTouched | None = None, figsize=(9, 5), dpi: int = 100, **kwargs):
    """View 6: per algorithm, bytes moved HBM <-> SRAM (red) beside bytes touched inside SRAM (blue)."""
    data = data or moved_vs_touched_data(**kwargs)
    fig, ax = style.new_figure(figsize=figsize, dpi=dpi)
    x = np.arange(len(data.names))
    width = 0.38
    hbm = ax.bar(x - width / 2, data.hbm_bytes, width, color=style.HBM, label="moved between HBM and SRAM")
    sram = ax.bar(x + width / 2, data.sram_bytes, width, color=style.SRAM, label="read + written inside SRAM")
    for bars in (hbm, sram):
        for bar in bars:
            ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height() * 1.08, style.format_bytes(bar.get_height()),
                    ha="center", va="bottom", fontsize=8)
    ax.set_yscale("log")
    style.bytes_axis(ax.yaxis)
    ax.set_xticks(x, data.names)
    for label, kind in zip(ax.get_xticklabels(), data.kinds):
        label.set_color(style.ALGORITHM_COLOURS[kind])
        label.set_fontweight("bold")
    ax.set_ylim(min(min(data.hbm_bytes), min(data.sram_bytes)) / 3, max(max(data.hbm_bytes), max(data.sram_bytes)) * 4)
    ax.set_ylabel("bytes, one head (log scale)")
    causal = ", causal" if data.causal else ""
    ax.set_title(f"Bytes moved vs bytes touched: N={data.n}, d={data.d}, block_q={data.block_q}, "
                 f"block_k={data.block_k}, {data.itemsize}-byte elements{causal}\n"
                 "naive from the formulas; flash from traced tiled runs", fontsize=10)
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(True, axis="y", which="major", alpha=0.3)
    return fig
