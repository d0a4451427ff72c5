"""Records every simulated HBM <-> SRAM transfer made by the NumPy tiled algorithms.

The tiled functions in :mod:`flashlab.tiled` take an optional ``tracer``. They call
:meth:`TrafficTracer.begin` once, :meth:`TrafficTracer.step` at the start of every step
(one inner-loop iteration, or a prologue/epilogue), and :meth:`TrafficTracer.read` /
:meth:`TrafficTracer.write` for every tile that crosses between HBM and on-chip SRAM.
The visualisations are drawn from these records alone; the traffic formulas in
:mod:`flashlab.traffic` are tested to equal their byte totals exactly.

Byte sizes are *simulated*: the NumPy code computes in float32 or float64, but a tracer built
with ``itemsize=2`` counts as if the tensors were fp16/bf16 in HBM. Row statistics
(``lse``, ``m``, ``l``, ``D``) use ``stat_itemsize`` (real kernels keep them in fp32).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field

READ = "read"  # HBM -> SRAM
WRITE = "write"  # SRAM -> HBM
STAT_TENSORS = frozenset({"lse", "m", "l", "D"})  # one value per query row

Range = tuple[int, int]  # half-open [start, stop)


@dataclass(frozen=True)
class Transfer:
    """One tile moved between HBM and SRAM."""

    step: int  # index into TrafficTracer.steps
    tensor: str  # "Q", "K", "V", "O", "lse", "m", "l", "dO", "D", "dQ", "dK", "dV", "S", "P"
    direction: str  # READ or WRITE
    rows: Range  # along the sequence axis of `tensor` (query rows for S and P)
    cols: Range  # along its last axis: (0, d) for Q/K/V/O, (0, 1) for statistics, key range for S/P
    nbytes: int
    batch: int = 0  # flat index over the leading batch dimensions


@dataclass(frozen=True)
class Resident:
    """A buffer that occupies SRAM during a step (loaded tile or on-chip accumulator)."""

    tensor: str  # names as in Transfer, plus on-chip ones: "acc", "S", "P", "dS", "dP"
    rows: Range
    cols: Range
    nbytes: int


@dataclass(frozen=True)
class Step:
    """One step of a tiled schedule."""

    index: int
    label: str  # e.g. "i=1 j=2", "init", "write O_1"
    q_block: int | None  # query block index i, when the step works on one
    k_block: int | None  # key/value block index j, when the step works on one
    batch: int
    resident: tuple[Resident, ...]
    flops: int = 0  # matmul FLOPs done in this step (2 per multiply-add)
    sram_bytes: int = 0  # bytes read and written inside SRAM by this step's compute


@dataclass
class TrafficTracer:
    """Collects :class:`Transfer` events and :class:`Step` records of one tiled run.

    ``itemsize`` (bytes per element of Q, K, V, O and gradients) and ``stat_itemsize`` (bytes per
    row statistic) default to the itemsize of the arrays the tiled function was given.
    """

    itemsize: int | None = None
    stat_itemsize: int | None = None
    events: list[Transfer] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("itemsize", "stat_itemsize"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"{name} must be an int (bytes per element) or None, got {type(value).__name__} {value!r}")
            if value < 1:
                raise ValueError(f"{name}={int(value)} must be >= 1 (bytes per element) or None")
            setattr(self, name, int(value))

    # -- called by the tiled algorithms -------------------------------------------------------
    def begin(self, algorithm: str, array_itemsize: int, **shape) -> None:
        """Start a run: records the algorithm name and its shape parameters in ``meta``."""
        if self.meta:
            raise RuntimeError("this TrafficTracer already holds a run; create a new one per run")
        self._itemsize = self.itemsize or array_itemsize
        self._stat_itemsize = self.stat_itemsize or self._itemsize
        self.meta = {"algorithm": algorithm, "itemsize": self._itemsize,
                     "stat_itemsize": self._stat_itemsize, **shape}

    def nbytes(self, tensor: str, rows: Range, cols: Range) -> int:
        """Bytes of the tile tensor[rows, cols] (``stat_itemsize`` per element for row statistics)."""
        size = self._stat_itemsize if tensor in STAT_TENSORS else self._itemsize
        return (rows[1] - rows[0]) * (cols[1] - cols[0]) * size

    def step(self, label: str, q_block: int | None = None, k_block: int | None = None,
             batch: int = 0, resident: tuple[tuple[str, Range, Range], ...] = (),
             flops: int = 0, sram_bytes: int = 0) -> None:
        """Open a new step; transfers recorded after this belong to it."""
        res = tuple(Resident(t, r, c, self.nbytes(t, r, c)) for t, r, c in resident)
        self.steps.append(Step(len(self.steps), label, q_block, k_block, batch, res, flops, sram_bytes))

    def read(self, tensor: str, rows: Range, cols: Range, batch: int = 0) -> None:
        """Record the tile tensor[rows, cols] of batch element `batch` moving HBM -> SRAM."""
        self._record(tensor, READ, rows, cols, batch)

    def write(self, tensor: str, rows: Range, cols: Range, batch: int = 0) -> None:
        """Record the tile tensor[rows, cols] of batch element `batch` moving SRAM -> HBM."""
        self._record(tensor, WRITE, rows, cols, batch)

    def _record(self, tensor: str, direction: str, rows: Range, cols: Range, batch: int) -> None:
        if not self.steps:
            raise RuntimeError("call step() before recording transfers")
        self.events.append(Transfer(len(self.steps) - 1, tensor, direction, tuple(rows), tuple(cols),
                                    self.nbytes(tensor, rows, cols), batch))

    # -- read by tests, formulas and visualisations --------------------------------------------
    @property
    def hbm_read_bytes(self) -> int:
        """Bytes moved HBM -> SRAM over the whole run."""
        return sum(e.nbytes for e in self.events if e.direction == READ)

    @property
    def hbm_write_bytes(self) -> int:
        """Bytes moved SRAM -> HBM over the whole run."""
        return sum(e.nbytes for e in self.events if e.direction == WRITE)

    @property
    def hbm_bytes(self) -> int:
        """hbm_read_bytes + hbm_write_bytes."""
        return self.hbm_read_bytes + self.hbm_write_bytes

    @property
    def flops(self) -> int:
        """Matmul FLOPs of all steps (2 per multiply-add)."""
        return sum(s.flops for s in self.steps)

    @property
    def sram_bytes(self) -> int:
        """Bytes read and written inside SRAM by all steps (see :mod:`flashlab.tiled`)."""
        return sum(s.sram_bytes for s in self.steps)

    def bytes_by_tensor(self) -> dict[tuple[str, str], int]:
        """{(tensor, direction): bytes} over the whole run."""
        out: dict[tuple[str, str], int] = {}
        for e in self.events:
            out[(e.tensor, e.direction)] = out.get((e.tensor, e.direction), 0) + e.nbytes
        return out

    def cumulative_bytes(self) -> tuple[list[int], list[int]]:
        """(read, write) bytes moved up to and including each step, one entry per step."""
        reads, writes = [0] * len(self.steps), [0] * len(self.steps)
        for e in self.events:
            (reads if e.direction == READ else writes)[e.step] += e.nbytes
        for k in range(1, len(self.steps)):
            reads[k] += reads[k - 1]
            writes[k] += writes[k - 1]
        return reads, writes
