"""Decode attention: ``flash_decode`` (split-KV over a KV cache) and its split rule.

A decode step brings ``Nq`` new queries per sequence (1 up to 16: one token, or a few draft tokens
of speculative decoding) and attends to the sequence's KV cache. The kernel is
``flashlab.kernels.flash_decode`` (Flash-Decoding: the cache's key range split across programs,
the query heads of a kv group packed into one tile, partial states combined exactly as
``flashlab.softmax.combine_states``). This module holds what is not a kernel:

* the split rule (how many chunks the cache is cut into, the tile config and who merges the
  chunks' partial states) lives in :mod:`flashlab.split_rule`; its names are re-exported here;
* :func:`flash_decode`, the public function, which validates every argument once per kind of
  call (shapes, strides, dtypes, devices, options; the checks are in :mod:`flashlab.decode_checks`)
  and then reuses the checked launch plan;
  the values inside ``cache_seqlens`` and ``block_table`` are checked on the host by default
  (:func:`check_lengths`, one sync per call) and always by the kernel (NaN outputs), so
  ``check_lengths=False`` gives a step that never synchronises with the GPU;
* :func:`decode_reference`, the float64 twin the tests compare against, and :func:`split_kv_decode`,
  the split-KV loop in NumPy (notebook 09);
* :func:`extended_attention`, what ``flashlab.flash_attention`` calls for ``return_lse=True``,
  ``causal_align="bottom_right"`` and for decode shapes (small Nq, long Nk, no gradient).

Causal alignment at decode is bottom-right: the new queries are the LAST ``Nq`` positions of a
sequence of ``L`` valid keys (their own keys included), so query i sees keys ``j <= L - Nq + i``.
"""
from __future__ import annotations

import functools
import math

from .decode_checks import MAX_NQ, _check_decode_inputs, _check_values, check_lengths  # noqa: F401
from .split_rule import (FUSED_MAX_SPLITS, INTERPRETER_SMS, MANY_WAVES,  # noqa: F401
                         MAX_SPLITS, MIN_KEYS_PER_SPLIT, ONE_WAVE_FILL, PARTIAL_WAVE_FILL, SECOND_PER_SM_MAX_SPLITS,
                         SplitChoice, choice_for, config_of, flat_programs, num_splits, sm_count_of, split_rule,
                         splits_for,
                         wave_efficiency)

DECODE_MIN_NK = 1  # flash_attention takes the split-KV path for Nq <= MAX_NQ from this many keys


# --------------------------------------------------------------------------------------------
# flash_decode: validation, then the kernel
# --------------------------------------------------------------------------------------------
def paged_to_contiguous(cache, block_table):
    """The logical cache (B, Hkv, max_blocks * page_size, d) of a paged one: ``cache`` (num_blocks,
    Hkv, page_size, d) gathered through ``block_table`` (B, max_blocks); entries naming no block
    (e.g. -1 past a sequence's end) give block 0's rows there. For references and teaching."""
    pages = cache[block_table.long().clamp(0, cache.shape[0] - 1)]  # (B, max_blocks, Hkv, page, d)
    B, max_blocks, Hkv, page, d = pages.shape
    return pages.permute(0, 2, 1, 3, 4).reshape(B, Hkv, max_blocks * page, d)


_CALLS: dict = {}  # call key -> (plan, scale): calls whose checks have passed
_FAST_PATH = None  # (current CUDA device, current stream of a device), bound by the first checked call


def _bind_fast_path() -> None:
    global _FAST_PATH
    import torch

    from .kernels.decode_plan import current_stream

    current_device = torch._C._cuda_getDevice if hasattr(torch._C, "_cuda_getDevice") else (lambda: -1)
    _FAST_PATH = (current_device, current_stream)


def _call_key(q, k, v, seqlens, scale, splits, return_lse, block_table):
    """Everything flash_decode's checks and its launch depend on, in a hashable tuple; None where
    the fast path does not apply (no checked call yet, q not on the current CUDA device)."""
    if _FAST_PATH is None or (return_lse is not True and return_lse is not False):
        return None
    current_device, current_stream = _FAST_PATH
    device = q.get_device()
    if device >= 0 and device != current_device():
        return None
    return (q.shape, q.stride(), q.dtype, device, k.shape, k.stride(), k.dtype, k.get_device(),
            v.shape, v.stride(), v.dtype, v.get_device(),
            None if seqlens is None else (seqlens.shape, seqlens.stride(), seqlens.dtype, seqlens.get_device()),
            None if block_table is None else (block_table.shape, block_table.stride(), block_table.dtype,
                                              block_table.get_device()),
            type(scale), scale, type(splits), splits, return_lse, current_stream(device))


def flash_decode(q, k_cache, v_cache, cache_seqlens=None, scale: float | None = None,
                 num_splits: int | None = None, return_lse: bool = False, *, block_table=None,
                 check_lengths: bool = True):
    """Attention of a few new queries per sequence over a KV cache, split across the GPU (Flash-Decoding).

    q: (B, H, Nq, d), 1 <= Nq <= 16, the new queries. k_cache, v_cache: (B, Hkv, N_max, d), H a
    multiple of Hkv (query head h reads kv head h // (H // Hkv): GQA, MQA). cache_seqlens: (B,)
    int32 valid lengths L_b in Nq..N_max, counting the new queries' own keys (None: N_max for every
    sequence); cache entries at or past L_b are never read. Query i of Nq sees keys
    ``j <= L_b - Nq + i`` (bottom-right causal). scale: default 1/sqrt(d). num_splits: chunks of
    the key range (None: :func:`split_rule` of the shape and the SM count). fp16, bf16 or fp32.

    Paged cache (as vLLM's PagedAttention): ``block_table`` (B, max_blocks) int32 maps sequence b's
    logical block i to a physical block of k_cache, v_cache (num_blocks, Hkv, page_size, d), with
    page_size a power of two >= 16; key j of sequence b is row j % page_size of block
    ``block_table[b, j // page_size]``, and N_max = max_blocks * page_size. Entries past a
    sequence's last page are never read (any value, e.g. -1).

    Returns o (B, H, Nq, d) in q's dtype, or (o, lse) with ``return_lse``: lse (B, H, Nq) float32,
    natural log. No gradient.

    ``check_lengths`` (default True): a length outside Nq..N_max in ``cache_seqlens``, or a used
    ``block_table`` entry naming no block, raises a ValueError naming the argument and the value.
    That reads them to the host: one device synchronisation per call (skipped automatically
    while a CUDA graph is being captured). ``check_lengths=False``: a sync-free step; the
    kernel still checks the values and gives NaN in that sequence's o and lse instead of
    reading memory it must not. Every other argument is checked on the host, once per distinct
    (shapes, strides, dtypes, devices, options): later calls of the same kind reuse the checked
    launch plan (``kernels.decode_plan.DecodePlan``).
    """
    try:
        key = _call_key(q, k_cache, v_cache, cache_seqlens, scale, num_splits, return_lse, block_table)
    except (AttributeError, TypeError):  # not tensors: the checks below say which
        key = None
    hit = _CALLS.get(key) if key is not None and (check_lengths is False or check_lengths is True) else None
    if hit is not None:
        plan, scale_value = hit
        if check_lengths:
            _check_values(q, k_cache, cache_seqlens, block_table)
        o, lse = plan(q, k_cache, v_cache, cache_seqlens, block_table, scale_value, return_lse)
        return (o, lse) if return_lse else o
    scale_value = _check_decode_inputs(q, k_cache, v_cache, cache_seqlens, scale, num_splits, return_lse, block_table)
    if not isinstance(check_lengths, bool):
        raise TypeError(f"check_lengths must be True or False, got {check_lengths!r}")
    if check_lengths:
        _check_values(q, k_cache, cache_seqlens, block_table)
    from .kernels import decode_plan
    from .kernels.attention import on_device

    # the rule sees the logical length (a paged cache: max_blocks * page size)
    n_max = block_table.shape[1] * k_cache.shape[2] if block_table is not None else None
    choice = choice_for(q, k_cache, num_splits, n_max)
    with on_device(q):
        plan = decode_plan.plan_for(q, k_cache, v_cache, cache_seqlens, block_table, True, choice.splits,
                                config_of(q, choice))
        o, lse = plan(q, k_cache, v_cache, cache_seqlens, block_table, scale_value, return_lse)
        if _FAST_PATH is None:
            _bind_fast_path()
            key = _call_key(q, k_cache, v_cache, cache_seqlens, scale, num_splits, return_lse, block_table)
        if key is not None and plan.cached:
            if len(_CALLS) >= decode_plan.MAX_PLANS:
                _CALLS.clear()
            _CALLS[key] = (plan, scale_value)
    return (o, lse) if return_lse else o


def clear_plans() -> None:
    """Forget every checked call and launch plan (frees their scratch buffers)."""
    from .kernels import decode_plan

    _CALLS.clear()
    decode_plan.clear_plans()


def decode_reference(q, k_cache, v_cache, cache_seqlens=None, scale: float | None = None, upcast: bool = True):
    """The twin of :func:`flash_decode`: (o (B, H, Nq, d), lse (B, H, Nq)), plain PyTorch.

    Each sequence b uses only its first L_b keys, with the bottom-right causal mask. ``upcast``:
    in float64 on the CPU (the reference); otherwise in the inputs' dtype on their device (the
    error of "PyTorch in the same dtype" that the flash-attention test rule allows twice of)."""
    import torch

    B, H, Nq, d = q.shape
    Hkv, n_max = k_cache.shape[1], k_cache.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    lengths = [n_max] * B if cache_seqlens is None else [int(x) for x in cache_seqlens.cpu()]
    dtype, device = (torch.float64, "cpu") if upcast else (q.dtype, q.device)
    o = torch.empty(B, H, Nq, d, dtype=dtype, device=device)
    lse = torch.empty(B, H, Nq, dtype=torch.float64 if upcast else torch.float32, device=device)
    for b, length in enumerate(lengths):
        qb = q[b].to(device, dtype)  # (H, Nq, d)
        kb = k_cache[b, :, :length].to(device, dtype).repeat_interleave(H // Hkv, dim=0)  # (H, L, d)
        vb = v_cache[b, :, :length].to(device, dtype).repeat_interleave(H // Hkv, dim=0)  # (H, L, d)
        s = qb @ kb.transpose(-1, -2) * scale  # (H, Nq, L)
        last_key = length - Nq + torch.arange(Nq, device=device)  # (Nq,)
        s = s.masked_fill(torch.arange(length, device=device)[None, :] > last_key[:, None], float("-inf"))
        lse[b] = torch.logsumexp(s.to(lse.dtype), dim=-1)
        o[b] = torch.softmax(s, dim=-1) @ vb
    return o, lse


# --------------------------------------------------------------------------------------------
# flash_attention's extensions: return_lse, causal_align, and the decode path
# --------------------------------------------------------------------------------------------
CAUSAL_ALIGNS = ("top_left", "bottom_right")


def split_kv_decode(q, k, v, splits: int):
    """Split-KV decoding in NumPy (Flash-Decoding): attention of the query rows over ``splits`` chunks
    of the cache, each chunk's normalised output o_c and log-sum-exp lse_c merged exactly by
    ``combine_states`` as the state (m, l, acc) = (lse_c, 1, o_c).

    q (..., Nq, d), k and v (..., N, d) -> (..., Nq, d); ``splits`` from 1 to N (np.array_split's chunks).
    """
    import numpy as np

    from .reference import naive_attention
    from .softmax import combine_states

    n = np.shape(k)[-2]
    if isinstance(splits, bool) or not isinstance(splits, int) or not 1 <= splits <= n:
        raise ValueError(f"splits={splits!r} must be an int from 1 to the cache length {n}")
    m, l, acc = None, None, None
    for chunk in np.array_split(np.arange(n), splits):
        o_c, lse_c = naive_attention(q, k[..., chunk, :], v[..., chunk, :], return_lse=True)  # (..., Nq, d), (..., Nq)
        state = (lse_c, np.ones_like(lse_c), o_c)  # (..., Nq), (..., Nq), (..., Nq, d)
        m, l, acc = state if m is None else combine_states(m, l, acc, *state)
    return acc / l[..., None]  # (..., Nq, d)

def _needs_grad(*tensors) -> bool:
    import torch

    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def bottom_right_mask(q, k, causal: bool, causal_align: str) -> bool:
    """True when the mask is bottom-right: causal with ``causal_align="bottom_right"``, or causal
    with Nq == Nk (where the two alignments are the same mask)."""
    return causal and (causal_align == "bottom_right" or q.shape[2] == k.shape[2])


def decode_shape(q, k, causal: bool, causal_align: str) -> bool:
    """True where flash_attention takes the split-KV path: Nq <= MAX_NQ, Nk >= DECODE_MIN_NK,
    non-causal or a bottom-right mask (inputs already checked)."""
    return (q.shape[2] <= MAX_NQ and k.shape[2] >= DECODE_MIN_NK
            and (not causal or bottom_right_mask(q, k, causal, causal_align)))


def takes_over(q, k, v, causal: bool, return_lse, causal_align) -> bool:
    """True when :func:`extended_attention` must answer a ``flash_attention`` call: ``return_lse``,
    or a decode shape with no gradient needed. (Bottom-right alignment alone runs on the prefill
    rungs, which compute it through the AttnSpec.)"""
    if return_lse is not False:
        return True
    return decode_shape(q, k, causal, causal_align) and not _needs_grad(q, k, v)


def _with_lse_function():
    import torch

    from .kernels import attention, flash_bwd

    class FlashAttentionWithLse(torch.autograd.Function):
        """flash_attention's forward and backward, returning lse too (not differentiable)."""

        @staticmethod
        def forward(ctx, q, k, v, causal, scale):
            with attention.on_device(q):
                o, lse = attention.best_forward(q, k, v, causal, scale)  # (B, H, Nq, d), (B, H, Nq)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.causal, ctx.scale = causal, scale
            ctx.mark_non_differentiable(lse)
            return o, lse

        @staticmethod
        def backward(ctx, do, _dlse):
            q, k, v, o, lse = ctx.saved_tensors
            with attention.on_device(q):
                dq, dk, dv = flash_bwd.backward(q, k, v, o, lse, do.contiguous(), ctx.causal, ctx.scale)
            return dq, dk, dv, None, None

    return FlashAttentionWithLse


@functools.lru_cache(maxsize=None)
def _function():
    return _with_lse_function()


def _forward_with_lse(q, k, v, causal: bool, scale: float):
    """(o, lse) of the course's kernels (top-left causal), differentiable in o where needed."""
    from .kernels import attention

    if _needs_grad(q, k, v):
        return _function().apply(q, k, v, causal, scale)
    with attention.on_device(q):
        return attention.best_forward(q, k, v, causal, scale)


def combine_two(o_a, lse_a, o_b, lse_b):
    """Exact merge of two attention results over disjoint key sets (``combine_states`` with the
    states (lse, 1, o)): o (B, H, Nq, d), lse (B, H, Nq) float32 each -> (o, lse)."""
    import torch

    lse = torch.logaddexp(lse_a, lse_b)  # (B, H, Nq)
    w_a = torch.exp(lse_a - lse).unsqueeze(-1)  # (B, H, Nq, 1)
    w_b = torch.exp(lse_b - lse).unsqueeze(-1)
    o = (w_a * o_a.float() + w_b * o_b.float()).to(o_a.dtype)  # (B, H, Nq, d)
    return o, lse


def _bottom_right(q, k, v, scale: float):
    """Bottom-right causal attention for Nq < Nk without a gradient, from two runs of the course's
    kernels: the prefix keys [0, Nk - Nq), which every query sees (non-causal), and the last Nq
    keys, a square with the top-left mask; then :func:`combine_two`."""
    n_q, n_k = q.shape[2], k.shape[2]
    o_prefix, lse_prefix = _forward_with_lse(q, k[:, :, : n_k - n_q], v[:, :, : n_k - n_q], False, scale)
    o_square, lse_square = _forward_with_lse(q, k[:, :, n_k - n_q:], v[:, :, n_k - n_q:], True, scale)
    return combine_two(o_prefix, lse_prefix, o_square, lse_square)


def extended_attention(q, k, v, causal: bool, scale: float, return_lse, causal_align):
    """``flash_attention`` with ``return_lse`` / ``causal_align`` / the decode path, for inputs that
    passed ``attention.check_inputs``. Returns o, or (o, lse) with ``return_lse``."""
    import torch

    if not isinstance(return_lse, bool):
        raise TypeError(f"return_lse must be True or False, got {return_lse!r}")
    if causal_align not in CAUSAL_ALIGNS:
        raise ValueError(f"causal_align={causal_align!r} must be one of {CAUSAL_ALIGNS}")
    n_q, n_k = q.shape[2], k.shape[2]
    bottom_right = causal and causal_align == "bottom_right" and n_q != n_k  # equal lengths: top-left is the same
    if bottom_right and n_q > n_k:
        raise ValueError(f"causal_align='bottom_right' with Nq={n_q} > Nk={n_k}: the first {n_q - n_k} queries "
                         "would see no key; give at least as many keys as queries")
    grad = _needs_grad(q, k, v)
    if not grad and decode_shape(q, k, causal, causal_align):
        from .kernels import attention, decode_plan

        choice = choice_for(q, k)
        with attention.on_device(q):
            o, lse = decode_plan.forward(q, k, v, None, scale, bottom_right_mask(q, k, causal, causal_align),
                                         choice.splits, config_of(q, choice))
    elif bottom_right and not grad:
        o, lse = _bottom_right(q, k, v, scale)
    elif bottom_right:
        # with a gradient: n_k - n_q leading zero queries make the top-left mask bottom-right for
        # the real ones (query i, now row n_k - n_q + i, sees j <= n_k - n_q + i); costs their work
        pad = q.new_zeros(q.shape[0], q.shape[1], n_k - n_q, q.shape[3])  # (B, H, Nk - Nq, d)
        o, lse = _forward_with_lse(torch.cat([pad, q], dim=2), k, v, True, scale)
        o, lse = o[:, :, n_k - n_q:], lse[:, :, n_k - n_q:]
    else:
        o, lse = _forward_with_lse(q, k, v, causal, scale)
    return (o, lse) if return_lse else o
