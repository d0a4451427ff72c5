"""The tile-visibility model inside the kernels: ONE helper for loop bounds, ONE for the mask.

Twins of :mod:`flashlab.visibility` (``kv_stages``, ``q_stages``, ``AttnSpec.mask``), written in
Triton so every rung (v0-v3, the Hopper rung, the backward) computes its loops the same way; the
tests run them in the interpreter and check they return exactly the NumPy model's numbers.

Every kernel takes the rule as ``DIAG, WINDOW`` (runtime ints: the diagonal offset, 0 top-left or
Nk - Nq bottom-right, and the window, 0 when none) and ``CAUSAL, HAS_WINDOW`` (constexprs), all
from :meth:`flashlab.attnspec.AttnSpec.kernel_args`; with a ``mask_mod`` also ``MASK_MOD`` (the
function, called on broadcast (row, col) index tensors inside :func:`visible`), ``HAS_MASK_MOD``
and the tile classification :mod:`flashlab.visibility` derives from the mask_mod for the
launch's block sizes (as FlexAttention's BlockMask: each tile full, partial or empty):

* the forward rungs take ``BLOCKS`` (:func:`block_lists`): per query block, the key blocks of
  its partial tiles and of its full ones, in two lists; :func:`kv_steps` and :func:`kv_offset`
  walk them, so empty tiles are never loaded and full tiles run without a mask;
* the backward takes ``RANGES`` (:func:`block_ranges`): per block, the [lo, hi) span of
  visited blocks; tiles a mask_mod skips inside that span are still loaded (masked).

A padded batch with per-sequence lengths (``AttnSpec.seqlens_q`` / ``seqlens_k``) gives the
forward rungs ``SEQLENS`` (:func:`seqlens_table`, one (Nq_b, Nk_b, DIAG_b) row per sequence) and
``HAS_SEQLENS``; :func:`seq_lengths` reads a program's row, and everything above is then
computed with the sequence's own lengths, so keys past Nk_b are never loaded; :func:`seq_rows`
writes o = 0 and lse = -inf in the padding rows.

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
def kv_steps(start_m, N_Q, N_K, DIAG, WINDOW, BLOCKS, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
             CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, LISTED: tl.constexpr):
    # the forward's key loop counted in steps of one key block, (s0, s1, s2, s3): masked [s0, s1),
    # unmasked [s1, s2), masked [s2, s3); kv_offset gives step t's first key. A band rule: the
    # blocks of kv_bounds. LISTED (a mask_mod): this query block's lists in BLOCKS, its partial
    # tiles, then its full ones (block_lists). A block with no query row (a padding block of a
    # shorter sequence) takes no step.
    if LISTED:
        row = BLOCKS + start_m * (2 + tl.cdiv(N_K, BLOCK_N))
        n_masked = tl.load(row)
        s0 = n_masked * 0
        s1 = n_masked
        s2 = n_masked + tl.load(row + 1)
        s3 = s2
    else:
        lo, full_lo, full_hi, hi = kv_bounds(start_m, N_Q, N_K, DIAG, WINDOW, None, BLOCK_M, BLOCK_N,
                                             CAUSAL, HAS_WINDOW, False)
        s0 = lo // BLOCK_N
        s1 = full_lo // BLOCK_N
        s2 = full_hi // BLOCK_N
        s3 = tl.cdiv(hi, BLOCK_N)
    has_rows = (start_m * BLOCK_M < N_Q).to(tl.int32)
    return s0 * has_rows, s1 * has_rows, s2 * has_rows, s3 * has_rows


@triton.jit
def kv_offset(t, start_m, N_K, BLOCKS, BLOCK_N: tl.constexpr, LISTED: tl.constexpr):
    # the first key of loop step t (kv_steps): t * BLOCK_N, or the t-th listed key block
    start_n = t * BLOCK_N
    if LISTED:
        start_n = tl.load(BLOCKS + start_m * (2 + tl.cdiv(N_K, BLOCK_N)) + 2 + t) * BLOCK_N
    return start_n


@triton.jit
def seq_lengths(SEQLENS, off_z, N_Q, N_K, DIAG, HAS_SEQLENS: tl.constexpr):
    # (Nq, Nk, DIAG) of sequence off_z: its row of SEQLENS in a padded batch, else the launch's
    n_q = N_Q
    n_k = N_K
    diag = DIAG
    if HAS_SEQLENS:
        n_q = tl.load(SEQLENS + 3 * off_z)
        n_k = tl.load(SEQLENS + 3 * off_z + 1)
        diag = tl.load(SEQLENS + 3 * off_z + 2)
    return n_q, n_k, diag


@triton.jit
def seq_rows(acc, lse, offs_m, n_q, HAS_SEQLENS: tl.constexpr):
    # padding rows of a shorter sequence (offs_m >= n_q): o = 0, lse = -inf (no key seen)
    if HAS_SEQLENS:
        acc = tl.where(offs_m[:, None] < n_q, acc, 0.0)
        lse = tl.where(offs_m < n_q, lse, float("-inf"))
    return acc, lse


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


def block_lists(spec: AttnSpec, nq: int, nk: int, block_m: int, block_n: int, device):
    """``BLOCKS`` for a forward launch with a mask_mod: an int32 tensor (query blocks, 2 + key
    blocks); row i is [n_masked, n_full, the masked key blocks..., the full ones..., padding], from
    :meth:`flashlab.visibility.TileVisibility.kernel_lists`. None without a mask_mod."""
    import torch

    from ..visibility import tiles

    if spec.mask_mod is None:
        return None
    lists = tiles(spec, nq, nk, block_m, block_n).kernel_lists()  # (n_q_blocks, 2 + n_kv_blocks)
    return torch.from_numpy(lists).to(device)


def seqlens_table(spec: AttnSpec, batch: int, nq: int, nk: int, device):
    """``SEQLENS``: an int32 tensor (B, 3) of (Nq_b, Nk_b, DIAG_b) per sequence, DIAG_b being the
    diagonal offset of sequence b's own lengths; None without per-sequence lengths."""
    import torch

    if spec.seqlens_q is None and spec.seqlens_k is None:
        return None
    rows = [(nq_b, nk_b, spec.diagonal(nq_b, nk_b)) for _, nq_b, nk_b in spec.sequences(nq, nk, batch)]
    return torch.tensor(rows, dtype=torch.int32).to(device)  # (B, 3)


def as_spec(causal, scale=None) -> AttnSpec:
    """The AttnSpec of a rung call: ``causal`` is a bool (the old signature) or an AttnSpec."""
    if isinstance(causal, AttnSpec):
        return causal if scale is None or causal.scale == scale else causal.replace(scale=scale)
    return AttnSpec(causal=bool(causal), scale=scale)
