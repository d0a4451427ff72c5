"""The tile-visibility model inside the kernels: ONE helper for loop bounds, ONE for the mask.

Twins of :mod:`flashlab.visibility` (``kv_stages``, ``q_stages``, ``AttnSpec.mask``), written in
Triton so every rung (v0-v3, the Hopper rung, the backward) computes its loops the same way; the
tests run them in the interpreter and check they return exactly the NumPy model's numbers.

Every kernel takes the rule as ``DIAG, WINDOW`` (runtime ints: the diagonal offset, 0 top-left or
Nk - Nq bottom-right, and the window, 0 when none) and ``CAUSAL, HAS_WINDOW`` (constexprs), all
from :meth:`flashlab.attnspec.AttnSpec.kernel_args`; with a ``mask_mod`` also ``MASK_MOD`` (the
function, called on broadcast (row, col) index tensors inside :func:`visible`), ``HAS_MASK_MOD``
and ``RANGES``: per block, the [lo, hi) offsets :mod:`flashlab.visibility` derives from the
mask_mod for the launch's block sizes (:func:`block_ranges`), so block skipping follows from the
one function. Tiles a mask_mod skips inside that range are still loaded (masked): only the two
ends are skipped, which is exact for band-shaped masks such as a sliding window.

Loop bounds come in three stages: masked [lo, full_lo) (the window's lower edge), unmasked
[full_lo, full_hi) (tiles every row sees in full: no mask, and for the forward no ragged tail),
masked [full_hi, hi) (the diagonal band and the ragged tail). Everything outside [lo, hi) is
never loaded.
"""
from __future__ import annotations

from ..attnspec import AttnSpec
from . import _mode

triton = _mode.triton()
import triton.language as tl  # noqa: E402


@triton.jit
def kv_bounds(start_m, N_Q, N_K, DIAG, WINDOW, RANGES, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_MASK_MOD: tl.constexpr):
    # key offsets (lo, full_lo, full_hi, hi) that query block start_m visits (visibility.kv_stages)
    r0 = start_m * BLOCK_M
    r1 = tl.minimum(r0 + BLOCK_M, N_Q) - 1  # the block's last query row that exists
    lo = r0 * 0
    full_lo = r0 * 0
    full_hi = (N_K // BLOCK_N) * BLOCK_N  # the ragged tail is masked
    hi = N_K + r0 * 0
    if CAUSAL:
        hi = tl.maximum(tl.minimum(N_K, r1 + DIAG + 1), 0)  # past the last row's diagonal: never loaded
        full_hi = tl.minimum(full_hi, tl.maximum(r0 + DIAG + 1, 0) // BLOCK_N * BLOCK_N)
    if HAS_WINDOW:
        lo = tl.maximum(r0 + DIAG - WINDOW + 1, 0) // BLOCK_N * BLOCK_N  # before the first row's window
        full_lo = tl.cdiv(tl.maximum(r1 + DIAG - WINDOW + 1, 0), BLOCK_N) * BLOCK_N
    if HAS_MASK_MOD:  # the range the model derived from mask_mod, every tile masked
        lo = tl.load(RANGES + 2 * start_m)
        hi = tl.load(RANGES + 2 * start_m + 1)
        full_lo = lo
        full_hi = lo
    hi_up = tl.cdiv(hi, BLOCK_N) * BLOCK_N
    full_lo = tl.minimum(tl.maximum(full_lo, lo), hi_up)
    full_hi = tl.minimum(tl.maximum(full_hi, full_lo), hi_up)
    return lo, full_lo, full_hi, hi


@triton.jit
def q_bounds(start_n, N_Q, N_K, DIAG, WINDOW, RANGES, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, HAS_MASK_MOD: tl.constexpr):
    # query offsets (lo, full_lo, full_hi, hi) that see key block start_n (visibility.q_stages);
    # lo == hi when no query sees it
    c0 = start_n * BLOCK_N
    c1 = tl.minimum(c0 + BLOCK_N, N_K) - 1  # the block's last key that exists
    lo = c0 * 0
    full_lo = c0 * 0
    full_hi = N_Q + c0 * 0
    hi = N_Q + c0 * 0
    if CAUSAL:
        lo = tl.minimum(tl.maximum(c0 - DIAG, 0), N_Q) // BLOCK_M * BLOCK_M  # the first row seeing key c0
        full_lo = tl.cdiv(tl.maximum(c1 - DIAG, 0), BLOCK_M) * BLOCK_M
        hi = tl.where(c0 - DIAG > N_Q - 1, 0, N_Q)
    if HAS_WINDOW:
        hi = tl.maximum(tl.minimum(hi, c1 + WINDOW - DIAG), 0)  # past the last row seeing key c1
        full_hi = tl.maximum(c0 + WINDOW - DIAG, 0) // BLOCK_M * BLOCK_M
    if HAS_MASK_MOD:
        lo = tl.load(RANGES + 2 * start_n)
        hi = tl.load(RANGES + 2 * start_n + 1)
        full_lo = hi
        full_hi = hi
    hi_up = tl.cdiv(hi, BLOCK_M) * BLOCK_M
    lo = tl.minimum(lo, hi_up)
    full_lo = tl.minimum(tl.maximum(full_lo, lo), hi_up)
    full_hi = tl.minimum(tl.maximum(full_hi, full_lo), hi_up)
    return lo, full_lo, full_hi, hi


@triton.jit
def visible(rows, cols, N_K, DIAG, WINDOW, CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr,
            MASK_MOD: tl.constexpr, HAS_MASK_MOD: tl.constexpr):
    # True where query `rows` sees key `cols` (broadcastable index tensors): AttnSpec.mask
    keep = cols < N_K
    if CAUSAL:
        keep = keep & (cols <= rows + DIAG)
    if HAS_WINDOW:
        keep = keep & (cols > rows + DIAG - WINDOW)
    if HAS_MASK_MOD:
        keep = keep & MASK_MOD(rows, cols)
    return keep


@triton.jit
def finite_max(m_ij, HAS_WINDOW: tl.constexpr, HAS_MASK_MOD: tl.constexpr):
    # a window or mask_mod can hide a whole tile row from a row that has seen no key yet (m = -inf):
    # use 0 as its max, so exp(s - m) = 0 instead of NaN (softmax._finite_max in NumPy)
    m_use = m_ij
    if HAS_WINDOW:
        m_use = tl.where(m_ij == float("-inf"), 0.0, m_ij)
    if HAS_MASK_MOD:
        m_use = tl.where(m_ij == float("-inf"), 0.0, m_ij)
    return m_use


@triton.jit
def stage_range(STAGE: tl.constexpr, lo, full_lo, full_hi, hi):
    # the bounds of loop stage 0 (masked), 1 (unmasked) or 2 (masked) from kv_bounds / q_bounds
    start = lo
    end = full_lo
    if STAGE == 1:
        start = full_lo
        end = full_hi
    if STAGE == 2:
        start = full_hi
        end = hi
    return start, end


def block_ranges(spec: AttnSpec, nq: int, nk: int, block_m: int, block_n: int, per: str, device):
    """``RANGES`` for a kernel launch: an int32 tensor (blocks, 2) of [lo, hi) offsets, per query
    block (``per="q"``: key offsets) or per key block (``per="k"``: query offsets), from
    :mod:`flashlab.visibility`; None without a mask_mod (the kernels then compute the bounds)."""
    import torch

    from ..visibility import tiles

    if spec.mask_mod is None:
        return None
    grid = tiles(spec, nq, nk, block_m, block_n)
    if per == "q":
        spans = [tuple(b * block_n for b in grid.kv_range(i)) for i in range(grid.n_q_blocks)]
    else:
        spans = [tuple(b * block_m for b in grid.q_range(j)) for j in range(grid.n_kv_blocks)]
    return torch.tensor(spans, dtype=torch.int32, device=device).reshape(-1, 2)  # (blocks, 2)


def as_spec(causal, scale=None) -> AttnSpec:
    """The AttnSpec of a rung call: ``causal`` is a bool (the old signature) or an AttnSpec."""
    if isinstance(causal, AttnSpec):
        return causal if scale is None or causal.scale == scale else causal.replace(scale=scale)
    return AttnSpec(causal=bool(causal), scale=scale)
