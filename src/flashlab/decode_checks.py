"""The checks of :func:`flashlab.decode.flash_decode`: its arguments' shapes, dtypes, devices and
options (once per kind of call), and the values inside ``cache_seqlens`` and ``block_table`` (on the
host, one sync per call, unless ``check_lengths=False``). Every error names the argument."""
from __future__ import annotations

import math
import numbers

from .split_rule import MAX_SPLITS

MAX_NQ = 16  # new queries per sequence that flash_decode takes


def _check_decode_inputs(q, k_cache, v_cache, cache_seqlens, scale, num_splits_arg, return_lse,
                         block_table=None) -> float:
    import torch

    from .kernels import _mode
    from .kernels.attention import MAX_GRID_Y, MAX_HEAD_DIM, MAX_INT32, MIN_HEAD_DIM, SUPPORTED_DTYPES

    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have rank 4, (B, H, Nq, d) for q and (B, Hkv, N_max, d) for the caches; "
                             f"got shape {tuple(t.shape)}")
        if str(t.dtype).removeprefix("torch.") not in SUPPORTED_DTYPES:
            raise TypeError(f"{name}.dtype={t.dtype} is not supported; expected one of {SUPPORTED_DTYPES}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; put every tensor on one device")
    if q.device.type != "cuda":
        _mode.check_device("q", q)  # CPU tensors only in the interpreter
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name}.dtype={t.dtype} must equal q.dtype={q.dtype}")
    if k_cache.shape != v_cache.shape:
        raise ValueError(f"v_cache.shape={tuple(v_cache.shape)} must equal k_cache.shape={tuple(k_cache.shape)}")
    B, H, Nq, d = q.shape
    Bk, Hkv, n_max, dk = k_cache.shape
    if block_table is not None:
        n_max = _check_block_table(block_table, q, k_cache)
    elif Bk != B:
        raise ValueError(f"k_cache has batch size {Bk} but q has {B}; they must match")
    if dk != d:
        raise ValueError(f"k_cache has head dim d={dk} but q has d={d}; they must match")
    if not MIN_HEAD_DIM <= d <= MAX_HEAD_DIM:
        raise ValueError(f"head dim d={d} (q.shape[-1]) is outside the supported {MIN_HEAD_DIM}..{MAX_HEAD_DIM}")
    if B < 1 or H < 1 or Hkv < 1 or n_max < 1:
        raise ValueError(f"empty input: q.shape={tuple(q.shape)}, k_cache.shape={tuple(k_cache.shape)}")
    if H % Hkv != 0:
        raise ValueError(f"q has H={H} heads and k_cache has Hkv={Hkv}: H must be a multiple of Hkv")
    if not 1 <= Nq <= MAX_NQ:
        raise ValueError(f"q has Nq={Nq} new queries per sequence (q.shape[2]); flash_decode takes 1..{MAX_NQ} "
                         "(use flash_attention(causal=True, causal_align='bottom_right') for longer chunks)")
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        span = sum((size - 1) * abs(stride) for size, stride in zip(t.shape[2:], t.stride()[2:]))
        if span > MAX_INT32:
            raise ValueError(f"{name} (shape {tuple(t.shape)}, strides {t.stride()}) spans {span} elements within "
                             f"one (batch, head) slice; the kernel indexes a slice in int32 (at most {MAX_INT32})")
    if B * Hkv > MAX_GRID_Y and not _mode.is_interpreter():
        raise ValueError(f"B*Hkv = {B * Hkv} exceeds CUDA's grid limit of {MAX_GRID_Y}; split the batch")
    if cache_seqlens is None:
        if Nq > n_max:
            raise ValueError(f"q has Nq={Nq} new queries but the cache holds N_max={n_max} keys; Nq must be <= N_max")
    else:
        if not isinstance(cache_seqlens, torch.Tensor):
            raise TypeError(f"cache_seqlens must be a torch.Tensor of dtype int32 or None, got {type(cache_seqlens).__name__}")
        if cache_seqlens.dtype != torch.int32:
            raise TypeError(f"cache_seqlens.dtype={cache_seqlens.dtype} must be torch.int32")
        if tuple(cache_seqlens.shape) != (B,):
            raise ValueError(f"cache_seqlens.shape={tuple(cache_seqlens.shape)} must be (B,) = ({B},): one length per sequence")
        if cache_seqlens.device != q.device:
            raise ValueError(f"cache_seqlens is on {cache_seqlens.device} but q is on {q.device}")
        if not cache_seqlens.is_contiguous():
            raise ValueError(f"cache_seqlens (stride {cache_seqlens.stride()}) must be contiguous")
        # the lengths' values: check_lengths (a sync, by default) and the kernel (NaN outputs)
    if num_splits_arg is not None and not (type(num_splits_arg) is int and 1 <= num_splits_arg <= MAX_SPLITS):
        raise ValueError(f"num_splits={num_splits_arg!r} must be None (the split rule) or an int in 1..{MAX_SPLITS}")
    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be True or False, got {return_lse!r}")
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale={scale!r} must be a finite positive number (default 1/sqrt(d))")
    return float(scale)


def _check_block_table(block_table, q, k_cache) -> int:
    """A paged cache: block_table (B, max_blocks) int32, k_cache (num_blocks, Hkv, page_size, d)
    with page_size a power of two >= 16. Returns N_max = max_blocks * page_size."""
    import torch

    if not isinstance(block_table, torch.Tensor):
        raise TypeError(f"block_table must be a torch.Tensor of dtype int32 or None, got {type(block_table).__name__}")
    if block_table.dtype != torch.int32:
        raise TypeError(f"block_table.dtype={block_table.dtype} must be torch.int32")
    if block_table.dim() != 2 or block_table.shape[0] != q.shape[0] or block_table.shape[1] < 1:
        raise ValueError(f"block_table.shape={tuple(block_table.shape)} must be (B, max_blocks) = ({q.shape[0]}, >= 1)")
    if block_table.device != q.device:
        raise ValueError(f"block_table is on {block_table.device} but q is on {q.device}")
    page = k_cache.shape[2]
    if page < 16 or page & (page - 1):
        raise ValueError(f"the page size k_cache.shape[2]={page} must be a power of two >= 16 with a block_table")
    return block_table.shape[1] * page


def check_lengths(q, k_cache, cache_seqlens=None, block_table=None) -> None:
    """Raise a ValueError naming the first bad value of ``cache_seqlens`` or ``block_table``, as
    :func:`flash_decode` would see them: every length in Nq..N_max, and every block a sequence
    uses (its first ceil(L_b / page) table entries) a block of ``k_cache``. Reads both tensors to
    the host in one copy: one device synchronisation. :func:`flash_decode` calls it by default
    (``check_lengths=True``). Shapes are assumed to have passed :func:`flash_decode`'s checks."""
    import torch

    if cache_seqlens is None and block_table is None:
        return
    parts = [t.reshape(-1) for t in (cache_seqlens, block_table) if t is not None]
    host = (torch.cat(parts) if len(parts) > 1 else parts[0]).cpu()  # the one device sync
    lengths = host[: q.shape[0]] if cache_seqlens is not None else None  # (B,)
    table = host[-block_table.numel():].view(block_table.shape) if block_table is not None else None
    _check_host_values(q.shape[2], k_cache.shape[2], k_cache.shape[0], lengths, table)


def _check_host_values(n_q: int, rows: int, num_blocks: int, lengths, table) -> None:
    """The checks of :func:`check_lengths` on host (CPU) copies: ``lengths`` (B,) or None,
    ``table`` (B, max_blocks) or None; ``rows`` = k_cache.shape[2] (the page size with a table)."""
    import torch

    if table is not None:
        n_max, where = table.shape[1] * rows, "(block_table.shape[1] * page size)"
    else:
        n_max, where = rows, "(k_cache.shape[2])"
    if lengths is not None:
        values = lengths.tolist()  # a few to a few hundred ints: Python is quicker than torch ops here
        lo, hi = min(values), max(values)
        if lo < 1 or hi > n_max:
            bad = next(b for b, x in enumerate(values) if not 1 <= x <= n_max)
            raise ValueError(f"cache_seqlens holds lengths from {lo} to {hi} (cache_seqlens[{bad}] = "
                             f"{values[bad]}); each must be in 1..N_max = {n_max} {where}")
        if lo < n_q:
            raise ValueError(f"q has Nq={n_q} new queries but cache_seqlens holds a length of {lo}; each length counts "
                             "the new queries' own keys, so it must be >= Nq")
    if table is not None:
        if lengths is None:
            used = torch.ones_like(table, dtype=torch.bool)  # (B, max_blocks)
        else:
            pages = (lengths + rows - 1) // rows  # (B,)
            used = torch.arange(table.shape[1])[None, :] < pages[:, None]  # (B, max_blocks)
        bad = used & ((table < 0) | (table >= num_blocks))
        if bool(bad.any()):
            b, j = (int(x) for x in bad.nonzero()[0])
            raise ValueError(f"block_table[{b}, {j}] = {int(table[b, j])} names no block of k_cache "
                             f"(0..{num_blocks - 1}), and sequence {b} uses that page")


def _check_values(q, k_cache, cache_seqlens, block_table) -> None:
    """flash_decode's value check: :func:`check_lengths`, except while a CUDA graph is being
    captured (a synchronisation is not allowed then; the kernel's NaN poisoning still applies)."""
    if cache_seqlens is None and block_table is None:
        return
    if q.is_cuda:
        import torch

        if torch.cuda.is_current_stream_capturing():
            return
    check_lengths(q, k_cache, cache_seqlens, block_table)
