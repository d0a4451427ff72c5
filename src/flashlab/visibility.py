"""The tile-visibility model: which (block_q x block_k) tiles of the score matrix are computed.

Given an :class:`flashlab.attnspec.AttnSpec` and the sizes (Nq, Nk, block_q, block_k), tile (i, j)
(query rows ``i*block_q ..``, key columns ``j*block_k ..``; the last ones ragged) is

* ``FULL``: every existing query row of the tile sees every existing key of it (no mask needed),
* ``PARTIAL``: some see, some do not (computed with the mask applied inside),
* ``SKIPPED``: no query of the tile sees any key of it (never loaded, never computed).

Every consumer reads the geometry from here: the NumPy loops of :mod:`flashlab.tiled` (FA2, FA1,
backward), :mod:`flashlab.traffic`, :mod:`flashlab.flops`, the tile picture
(:mod:`flashlab.viz.tiles`), and, through the Triton twins in :mod:`flashlab.kernels.visible`,
every kernel. :func:`kv_stages` and :func:`q_stages` are the loop bounds the kernels compute
(as offsets, in three stages: masked, unmasked, masked); the tests check that the Triton helpers
return exactly these numbers and that the block ranges here agree with them.

With only causal / window (a band around the diagonal) every query row sees one interval of keys
whose ends never move left as the row grows, so a tile's state depends on its corners and the
ranges have closed forms. With a ``mask_mod`` the state of each tile is found by evaluating the
rule on the tile (FlexAttention derives its block mask the same way); ``generic=True`` forces
that path for band rules too, which is how the tests check the closed forms. The forward kernels
then walk :meth:`TileVisibility.kernel_lists`: per query block, its partial tiles (masked) and
its full tiles (no mask), so a tile the mask_mod empties is never loaded even inside the span.
Per-sequence lengths (``AttnSpec.seqlens_q`` / ``seqlens_k``) are one grid per sequence, built
from the sequence's own (Nq_b, Nk_b) with ``spec.base``.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .attnspec import AttnSpec

SKIPPED, PARTIAL, FULL = 0, 1, 2
STATE_NAMES = {SKIPPED: "skipped", PARTIAL: "partial", FULL: "full"}


def num_blocks(n: int, block: int) -> int:
    """Number of blocks of `block` rows covering n rows (the last one may be ragged)."""
    return -(-n // block)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class TileVisibility:
    """The tile grid of one attention problem; see the module docstring."""

    spec: AttnSpec
    nq: int
    nk: int
    block_q: int
    block_k: int
    generic: bool = False  # evaluate the rule per tile even when closed forms exist

    def __post_init__(self):
        if self.spec.base is not self.spec:
            raise ValueError("a tile grid is one sequence's: with seqlens_q/seqlens_k build one per sequence "
                             "from spec.base and that sequence's (Nq_b, Nk_b)")

    @property
    def n_q_blocks(self) -> int:
        return num_blocks(self.nq, self.block_q)

    @property
    def n_kv_blocks(self) -> int:
        return num_blocks(self.nk, self.block_k)

    def rows(self, i: int) -> tuple[int, int]:
        """(r0, r1): the query rows of block i, r1 exclusive."""
        return i * self.block_q, min((i + 1) * self.block_q, self.nq)

    def cols(self, j: int) -> tuple[int, int]:
        """(c0, c1): the key columns of block j, c1 exclusive."""
        return j * self.block_k, min((j + 1) * self.block_k, self.nk)

    def tile_mask(self, i: int, j: int) -> np.ndarray:
        """(rq, ck) bool: True where query r0 + a sees key c0 + b."""
        (r0, r1), (c0, c1) = self.rows(i), self.cols(j)
        return self.spec.mask(np.arange(r0, r1)[:, None], np.arange(c0, c1)[None, :], self.nq, self.nk)

    def state(self, i: int, j: int) -> int:
        """FULL, PARTIAL or SKIPPED for tile (i, j)."""
        return int(self.states[i, j])

    @functools.cached_property
    def states(self) -> np.ndarray:
        """(n_q_blocks, n_kv_blocks) int8 array of tile states (vectorised for band rules)."""
        if self.spec.banded and not self.generic:
            return self._band_states()
        out = np.empty((self.n_q_blocks, self.n_kv_blocks), dtype=np.int8)
        for i in range(self.n_q_blocks):
            for j in range(self.n_kv_blocks):
                out[i, j] = self._eval_state(i, j)
        return out

    @property
    def visited_tiles(self) -> np.ndarray:
        """(n_q_blocks, n_kv_blocks) bool: True where the tile is computed."""
        return self.states != SKIPPED

    @property
    def row_counts(self) -> np.ndarray:
        """(n_q_blocks,) query rows of each block (the last may be ragged)."""
        r0 = np.arange(self.n_q_blocks) * self.block_q
        return np.minimum(r0 + self.block_q, self.nq) - r0

    @property
    def col_counts(self) -> np.ndarray:
        """(n_kv_blocks,) keys of each block (the last may be ragged)."""
        c0 = np.arange(self.n_kv_blocks) * self.block_k
        return np.minimum(c0 + self.block_k, self.nk) - c0

    def _band_states(self) -> np.ndarray:
        # a query row sees one interval of keys [first, end), both ends non-decreasing in the row:
        # a tile is decided by its first and last rows' intervals against its columns [c0, c1)
        r0 = np.arange(self.n_q_blocks)[:, None] * self.block_q  # (nqb, 1)
        r_last = np.minimum(r0 + self.block_q, self.nq) - 1  # (nqb, 1)
        c0 = np.arange(self.n_kv_blocks)[None, :] * self.block_k  # (1, nkb)
        c1 = np.minimum(c0 + self.block_k, self.nk)  # (1, nkb)
        first0, end0 = self.spec.key_interval(r0, self.nq, self.nk)
        first1, end1 = self.spec.key_interval(r_last, self.nq, self.nk)
        skipped = (end1 <= c0) | (first0 >= c1)  # (nqb, nkb)
        full = (first1 <= c0) & (end0 >= c1)  # (nqb, nkb)
        return np.where(skipped, SKIPPED, np.where(full, FULL, PARTIAL)).astype(np.int8)

    def _eval_state(self, i: int, j: int) -> int:
        seen = self.tile_mask(i, j)
        return FULL if seen.all() else PARTIAL if seen.any() else SKIPPED

    def visited(self, i: int, j: int) -> bool:
        return self.state(i, j) != SKIPPED

    def kv_range(self, i: int) -> tuple[int, int]:
        """[lo, hi): key blocks from the first to the last one query block i computes (lo == hi:
        none). With a mask_mod, skipped tiles may lie inside; the loops test :meth:`visited`."""
        return _span_of(self.states[i] != SKIPPED)

    def q_range(self, j: int) -> tuple[int, int]:
        """[lo, hi): query blocks from the first to the last one that computes key block j."""
        return _span_of(self.states[:, j] != SKIPPED)

    def kv_blocks(self, i: int) -> np.ndarray:
        """The key blocks query block i computes, in order (its partial and full tiles)."""
        return np.nonzero(self.states[i] != SKIPPED)[0]

    def q_blocks(self, j: int) -> np.ndarray:
        """The query blocks that compute key block j, in order."""
        return np.nonzero(self.states[:, j] != SKIPPED)[0]

    def kernel_lists(self) -> np.ndarray:
        """(n_q_blocks, 2 + n_kv_blocks) int32, the forward kernels' block lists (FlexAttention's
        BlockMask, without batch and head): row i is [n_masked, n_full, the key blocks of its
        PARTIAL tiles..., of its FULL tiles..., then -1]. A FULL tile of a ragged last key block
        goes to the masked list: an unmasked load would read past Nk."""
        states = self.states.copy()
        if self.nk % self.block_k:
            states[:, -1] = np.where(states[:, -1] == FULL, PARTIAL, states[:, -1])
        order = np.argsort(np.where(states == SKIPPED, 2, states - 1), axis=1, kind="stable")  # partial, full, skipped
        counts = np.stack([(states == PARTIAL).sum(axis=1), (states == FULL).sum(axis=1)], axis=1)
        blocks = np.where(np.take_along_axis(states, order, axis=1) == SKIPPED, -1, order)
        return np.concatenate([counts, blocks], axis=1).astype(np.int32)

    def computed_area(self) -> int:
        """Score entries inside computed tiles (masked entries of partial tiles included)."""
        return int(self.row_counts @ self.visited_tiles @ self.col_counts)

    def kv_stages(self, i: int) -> tuple[int, int, int, int]:
        """Key offsets (lo, full_lo, full_hi, hi) of query block i as the kernels loop: masked
        [lo, full_lo), unmasked [full_lo, full_hi), masked [full_hi, hi) (band rules only)."""
        d = self.spec.kernel_args(self.nq, self.nk)
        return kv_stages(i, self.block_q, self.block_k, self.nq, self.nk, d["DIAG"], d["WINDOW"],
                         self.spec.causal, self.spec.window is not None)

    def q_stages(self, j: int) -> tuple[int, int, int, int]:
        """Query offsets (lo, full_lo, full_hi, hi) of key block j, as the dK/dV kernel loops."""
        d = self.spec.kernel_args(self.nq, self.nk)
        return q_stages(j, self.block_q, self.block_k, self.nq, self.nk, d["DIAG"], d["WINDOW"],
                        self.spec.causal, self.spec.window is not None)


def _span_of(flags: np.ndarray) -> tuple[int, int]:
    idx = np.nonzero(flags)[0]
    return (int(idx[0]), int(idx[-1]) + 1) if idx.size else (0, 0)


def tiles(spec: AttnSpec, nq: int, nk: int, block_q: int, block_k: int) -> TileVisibility:
    """The tile grid for these sizes (cached per arguments: the loops ask often)."""
    return _tiles(spec, nq, nk, block_q, block_k)


@functools.lru_cache(maxsize=256)
def _tiles(spec, nq, nk, block_q, block_k):
    return TileVisibility(spec, nq, nk, block_q, block_k)


# -- the kernels' loop bounds, in Python (twins of flashlab.kernels.visible) --------------------
def kv_stages(start_m: int, block_m: int, block_n: int, n_q: int, n_k: int, diag: int, window: int,
              causal: bool, has_window: bool) -> tuple[int, int, int, int]:
    """Key offsets (lo, full_lo, full_hi, hi) for query block ``start_m``: stage 1 [lo, full_lo)
    masked (the window's lower edge), stage 2 [full_lo, full_hi) unmasked, stage 3 [full_hi, hi)
    masked (the diagonal and the ragged tail). lo, full_lo, full_hi are multiples of block_n."""
    r0 = start_m * block_m
    r1 = min(r0 + block_m, n_q) - 1  # last query row that exists
    lo, full_lo, full_hi, hi = 0, 0, (n_k // block_n) * block_n, n_k
    if causal:
        hi = max(min(n_k, r1 + diag + 1), 0)  # past the last row's diagonal: never loaded
        full_hi = min(full_hi, max(r0 + diag + 1, 0) // block_n * block_n)  # first row sees all of these
    if has_window:
        lo = max(r0 + diag - window + 1, 0) // block_n * block_n  # the first row's first key
        full_lo = _cdiv(max(r1 + diag - window + 1, 0), block_n) * block_n  # the last row sees all past it
    hi_up = _cdiv(hi, block_n) * block_n
    full_lo = min(max(full_lo, lo), hi_up)
    full_hi = min(max(full_hi, full_lo), hi_up)
    return lo, full_lo, full_hi, hi


def q_stages(start_n: int, block_m: int, block_n: int, n_q: int, n_k: int, diag: int, window: int,
             causal: bool, has_window: bool) -> tuple[int, int, int, int]:
    """Query offsets (lo, full_lo, full_hi, hi) for key block ``start_n``: stage 1 [lo, full_lo)
    masked (the diagonal), stage 2 unmasked, stage 3 [full_hi, hi) masked (the window's edge).
    lo == hi when no query sees the block (then K_j, V_j are never loaded)."""
    c0 = start_n * block_n
    c1 = min(c0 + block_n, n_k) - 1  # last key that exists
    lo, full_lo, full_hi, hi = 0, 0, n_q, n_q
    if causal:
        lo = min(max(c0 - diag, 0), n_q) // block_m * block_m  # first row that sees key c0
        full_lo = _cdiv(max(c1 - diag, 0), block_m) * block_m  # rows from here see every key of the block
        if c0 - diag > n_q - 1:
            hi = 0
    if has_window:
        hi = max(min(hi, c1 + window - diag), 0)  # past the last row that sees key c1
        full_hi = max(c0 + window - diag, 0) // block_m * block_m  # rows before see every key
    hi_up = _cdiv(hi, block_m) * block_m
    lo = min(lo, hi_up)
    full_lo = min(max(full_lo, lo), hi_up)
    full_hi = min(max(full_hi, full_lo), hi_up)
    return lo, full_lo, full_hi, hi
