"""``flash_attention``: the public, differentiable FlashAttention built from the Triton kernels.

The problem is one :class:`flashlab.attnspec.AttnSpec` (causal and its alignment, sliding
window, scale, head grouping), built once by :func:`attn_spec` and passed unchanged to the
forward rung, the autograd Function and the backward kernels.

Forward: the rung :func:`flashlab.kernels.ladder.choose` picks, the one place the choice is made
(``v5_gluon_ws`` on an sm90 GPU where ``flash_fwd_gluon.preferred`` says it is faster, else
``v4_hopper`` where ``flashlab.kernels.flash_fwd_hopper.supports`` accepts them, else
``v3_autotuned``; a rung that lacks an AttnSpec option in use is never chosen). It
saves ``o`` and ``lse`` (float32, natural log, one per query row). Backward: the rung
:func:`flashlab.kernels.ladder.choose_backward` picks, the three kernels of
:mod:`flashlab.kernels.flash_bwd` (preprocess ``D = rowsum(dO * O)``, then dK/dV, then dQ) or the
one-pass :mod:`flashlab.kernels.flash_bwd_hopper` (dQ by atomics); both recompute ``P`` from
``lse`` instead of storing it (FlashAttention-2, Algorithm 2).

Also here, beside the kernel: ``check_inputs`` (every error names the argument) and
``attention_reference``, the plain PyTorch attention the tests and the GPU sweep compare against.
"""
from __future__ import annotations

import contextlib
import functools
import math
import numbers

from . import _mode, plans

SUPPORTED_DTYPES = ("float16", "bfloat16", "float32")
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 256
MAX_GRID_Y = 65535  # CUDA's limit on gridDim.y; the kernels put batch x heads there
MAX_INT32 = 2**31 - 1  # the kernels index within one (batch, head) slice in int32


def check_inputs(q, k, v, causal=False, scale=None) -> float:
    """Validate q (B, H, Nq, d), k and v (B, Hkv, Nk, d); return the softmax scale to use.

    Raises TypeError or ValueError that names the argument, what it got and what it expects.
    """
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must have rank 4 (B, H, N, d), got shape {tuple(t.shape)}")
        if str(t.dtype).removeprefix("torch.") not in SUPPORTED_DTYPES:
            raise TypeError(f"{name}.dtype={t.dtype} is not supported; expected one of {SUPPORTED_DTYPES}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name}.dtype={t.dtype} must equal q.dtype={q.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}; put q, k, v on one device")
    B, H, Nq, d = q.shape
    if k.shape != v.shape:
        raise ValueError(f"k.shape={tuple(k.shape)} must equal v.shape={tuple(v.shape)}")
    Bk, Hkv, Nk, dk = k.shape
    if Bk != B:
        raise ValueError(f"k has batch size {Bk} but q has {B}; they must match")
    if dk != d:
        raise ValueError(f"k has head dim {dk} but q has {d}; they must match")
    if not MIN_HEAD_DIM <= d <= MAX_HEAD_DIM:
        raise ValueError(f"head dim d={d} (q.shape[-1]) is outside the supported {MIN_HEAD_DIM}..{MAX_HEAD_DIM}")
    if Hkv < 1 or H % Hkv != 0:
        raise ValueError(f"q has H={H} heads, k and v have Hkv={Hkv}: H must be a multiple of Hkv")
    if Nq < 1 or Nk < 1 or B < 1:
        raise ValueError(f"empty input: q.shape={tuple(q.shape)}, k.shape={tuple(k.shape)}; B, Nq, Nk must be >= 1")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {causal!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        span = sum((size - 1) * abs(stride) for size, stride in zip(t.shape[2:], t.stride()[2:]))
        if span > MAX_INT32:
            raise ValueError(f"{name} (shape {tuple(t.shape)}, strides {t.stride()}) spans {span} elements within "
                             f"one (batch, head) slice; the kernels index a slice in int32 (at most {MAX_INT32}): "
                             "make it contiguous or split the sequence")
    if B * H * Nq > MAX_INT32:
        raise ValueError(f"q.shape={tuple(q.shape)}: B*H*Nq = {B * H * Nq} log-sum-exp rows exceed int32 indexing "
                         f"({MAX_INT32}); split the batch")
    if B * H > MAX_GRID_Y and not _mode.is_interpreter():
        raise ValueError(f"q.shape={tuple(q.shape)}: B*H = {B * H} programs exceed CUDA's grid limit of {MAX_GRID_Y} "
                         "along the batch x heads axis; split the batch")
    for name, t in (("q", q), ("k", k), ("v", v)):
        _mode.check_device(name, t)
    from .. import targets  # bf16 needs sm80+: the error names the GPU and suggests fp16
    targets.check_dtype(q)
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real) or not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale={scale!r} must be a finite positive number (default 1/sqrt(d))")
    return float(scale)



# notebook 06's malformed calls, (q shape, k and v shape): heads not a multiple, d below 16, rank 3
REFUSED_SHAPES = (((1, 3, 8, 32), (1, 2, 8, 32)), ((1, 2, 8, 8), (1, 2, 8, 8)), ((2, 8, 32), (2, 8, 32)))


def refusal_messages(cases=REFUSED_SHAPES, device="cpu", dtype=None) -> str:
    """What ``flash_attention`` says to malformed inputs, as text: for each (q shape, k and v shape) in
    ``cases``, the error :func:`check_inputs` raises at the boundary, one "TypeError: ..." or
    "ValueError: ..." line per case (no kernel runs). Inputs are random, ``dtype`` defaults to float32;
    a case that ``flash_attention`` accepts raises ValueError naming ``cases``."""
    import torch

    dtype = torch.float32 if dtype is None else dtype
    lines = []
    for i, (q_shape, kv_shape) in enumerate(cases):
        q = torch.randn(q_shape, device=device, dtype=dtype)
        k, v = (torch.randn(kv_shape, device=device, dtype=dtype) for _ in range(2))
        try:
            check_inputs(q, k, v)
        except (TypeError, ValueError) as error:
            lines.append(f"{type(error).__name__}: {error}")
        else:
            raise ValueError(f"cases[{i}]=({q_shape}, {kv_shape}) is accepted by flash_attention; "
                             "expected shapes it refuses")
    return "\n".join(lines)

@functools.lru_cache(maxsize=64)
def _plain_spec(causal: bool, scale: float, group: int):
    from ..attnspec import AttnSpec

    return AttnSpec(causal=causal, scale=scale, group=group)


# input signature -> the AttnSpec of a plain call (no options) whose inputs passed check_inputs
_CHECKED: dict = {}
MAX_CHECKED = 256  # signatures kept; emptied when full


def _checked_key(q, k, v, causal: bool, scale):
    """The signature :func:`check_inputs` depends on (shapes, strides, dtypes, devices, causal,
    the scale with its type, the Triton mode), or None where it cannot be cached (not plain
    tensors, a scale that is not a float or an int)."""
    import torch

    if not (type(q) is torch.Tensor and type(k) is torch.Tensor and type(v) is torch.Tensor):
        return None
    if scale is not None and type(scale) is not float and type(scale) is not int:
        return None
    return (q.shape, q.stride(), q.dtype, q.device, k.shape, k.stride(), k.dtype, k.device,
            v.shape, v.stride(), v.dtype, v.device, causal, type(scale), scale, _mode.is_interpreter())


def attn_spec(q, k, v, causal=False, scale=None, **options):
    """The checked :class:`flashlab.attnspec.AttnSpec` of a call: :func:`check_inputs`, then the
    options (``spec=`` or AttnSpec fields such as ``window=``, ``causal_align=``) with the scale
    resolved and the group set from the head counts; errors name the option.

    A plain call (no options) is checked once per input signature (:func:`_checked_key`: every
    check depends only on it; with ``plans.ENABLED``); inputs that fail are never remembered, so
    they fail every time."""
    from ..attnspec import AttnSpec, make_spec

    if not options and isinstance(causal, bool):  # the common call, once per step: a cached spec
        key = _checked_key(q, k, v, causal, scale) if plans.ENABLED else None
        spec = _CHECKED.get(key) if key is not None else None
        if spec is None:
            spec = _plain_spec(causal, check_inputs(q, k, v, causal, scale), q.shape[1] // k.shape[1])
            if key is not None:
                if len(_CHECKED) >= MAX_CHECKED:
                    _CHECKED.clear()
                _CHECKED[key] = spec
        return spec
    if isinstance(causal, AttnSpec):
        options["spec"], causal = causal, False
    scale = check_inputs(q, k, v, causal, scale if scale is not None else getattr(options.get("spec"), "scale", None))
    spec = make_spec(options.pop("spec", None), causal=causal, **options)
    spec = spec.replace(scale=scale, group=q.shape[1] // k.shape[1])
    spec.check_lengths(q.shape[2], k.shape[2], q.shape[0])  # (per-sequence lengths: one per batch entry)
    return spec


def attention_reference(q, k, v, causal: bool = False, scale: float | None = None, upcast: bool = True,
                        **options):
    """Plain PyTorch attention (materialises S and P), the trusted twin of the kernels.

    q (B, H, Nq, d), k and v (B, Hkv, Nk, d) -> (B, H, Nq, d) in q's dtype. With ``upcast`` it
    computes in float64 (the reference); without it, in the inputs' dtype (the error of "PyTorch in
    the same dtype" that the flash-attention test rule allows twice of). Causal is top-left aligned;
    ``options`` (``spec=``, ``window=``, ``causal_align=``, ``mask_mod=``, ``seqlens_q/k=``) as
    :class:`flashlab.attnspec.AttnSpec`, whose ``mask`` gives the visible (query, key) pairs.
    """
    import numpy as np
    import torch

    from ..attnspec import AttnSpec, make_spec

    if isinstance(causal, AttnSpec):
        options["spec"], causal = causal, False
    spec = make_spec(options.pop("spec", None), causal=bool(causal), **options)
    scale = spec.scale if scale is None else scale
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    if spec.base is not spec:  # per-sequence lengths: each sequence alone, padding rows 0
        from .. import ragged

        def one(q, k, v, spec):  # (H, N_b, d) slices
            return attention_reference(q[None], k[None], v[None], spec=spec, scale=scale, upcast=upcast)[0]

        return ragged.per_sequence(one, (q, k, v), "qkk", spec, q.shape[2], k.shape[2], "q", (0.0,))
    dtype = q.dtype
    if upcast:
        q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)  # (B, H, Nk, d)
    v = v.repeat_interleave(group, dim=1)  # (B, H, Nk, d)
    s = torch.matmul(q, k.transpose(-2, -1)) * scale  # (B, H, Nq, Nk)
    if not spec.is_dense:
        n_q, n_k = q.shape[2], k.shape[2]
        visible = spec.mask(np.arange(n_q)[:, None], np.arange(n_k)[None, :], n_q, n_k)  # (Nq, Nk)
        s = s.masked_fill(~torch.from_numpy(visible).to(q.device), float("-inf"))
    p = torch.softmax(s, dim=-1)  # (B, H, Nq, Nk)
    return torch.matmul(p, v).to(dtype)  # (B, H, Nq, d)


# The floor is one rounding step of the dtype at the reference's largest value (as the
# flash-attention tests' atol, which adds 0.3 and subtracts it again in the dtype); for fp32 2e-5,
# since a GPU's fp32 sums, taken in another order, differ from PyTorch's by about that.
ERROR_FLOOR = {"float32": 2e-5, "float16": 2.0**-10, "bfloat16": 2.0**-7}


def allowed_error(ref, same_dtype, magnitude=None) -> float:
    """The flash-attention test rule: twice the max error of PyTorch in the same dtype, plus a floor.

    ``ref`` is the float64 reference, ``same_dtype`` PyTorch's result computed in the inputs'
    dtype. The floor is ``ERROR_FLOOR[dtype] * max(1, max|ref|, max|magnitude|)``. ``magnitude``
    is for a result that cancels: dK = sum_i dS_ij q_i with dS_ij = P_ij (dP_ij - D_i) is exactly
    0 when Nk = 1 (PyTorch then gets exactly 0 too), while a kernel that computes D_i and dP_ij by
    two different fp32 sums keeps their rounding, about 2^-24 |dP| per row, summed over the rows.
    Pass dV's reference there: it is the same kind of row sum without the cancellation.
    """
    size = max(1.0, ref.abs().max().item())
    if magnitude is not None:
        size = max(size, magnitude.abs().max().item())
    floor = ERROR_FLOOR[str(same_dtype.dtype).removeprefix("torch.")] * size
    return 2.0 * (same_dtype.double() - ref.double()).abs().max().item() + floor


def max_error(out, ref) -> float:
    """max |out - ref| in float64; NaN (an unwritten or poisoned element) gives inf."""
    err = (out.double() - ref.double()).abs()
    return float("inf") if err.isnan().any() else err.max().item()


def on_device(tensor):
    """A context that makes ``tensor``'s CUDA device current while kernels launch.

    Triton launches on the current CUDA device, not on the tensors' one: q, k, v on ``cuda:1``
    while ``cuda:0`` is current would be read from the wrong GPU (an illegal memory access).
    Where the device is already current (the usual case), or on CPU, it does nothing.
    """
    import torch

    if tensor.device.type == "cuda" and tensor.device.index != torch.cuda.current_device():
        return torch.cuda.device(tensor.device)
    return contextlib.nullcontext()


def best_forward(q, k, v, causal, scale: float | None = None):
    """(o, lse) from the rung :func:`flashlab.kernels.ladder.choose` picks, for inputs that passed
    :func:`check_inputs`; ``causal`` is a bool or an AttnSpec.

    The rungs are called without their own input checks: validating once matters at small N,
    where the host's time per call is comparable to the kernel's (benchmarks/NOTES.md, call 4).
    The choice and the launch come from the launch plan of the inputs' signature
    (:mod:`flashlab.kernels.plans`; ``plans.ENABLED = False``: chosen and launched anew each call).
    """
    from . import ladder
    from .visible import as_spec

    spec = as_spec(causal, scale)
    if plans.ENABLED:
        return plans.forward(q, k, v, spec)
    return ladder.run(ladder.choose(q, k, v, spec), q, k, v, spec)


def hopper_forward(q, k, v, causal, scale: float | None = None):
    """(o, lse) from v4_hopper where it applies, else v3_autotuned (inputs already checked)."""
    from . import ladder
    from .visible import as_spec

    spec = as_spec(causal, scale)
    name = "v4_hopper" if ladder.hopper_applies(q, k, v, spec, checked=True) else "v3_autotuned"
    return ladder.run(name, q, k, v, spec)


def _autograd_function():
    import torch

    class FlashAttentionFunction(torch.autograd.Function):
        """Triton forward (saves o, lse) and Triton backward (recomputes P from lse); one AttnSpec."""

        @staticmethod
        def forward(ctx, q, k, v, spec):
            with on_device(q):
                o, lse = best_forward(q, k, v, spec)  # (B, H, Nq, d), (B, H, Nq)
            ctx.save_for_backward(q, k, v, o, lse)
            ctx.spec = spec
            return o

        @staticmethod
        def backward(ctx, do):
            from . import ladder

            q, k, v, o, lse = ctx.saved_tensors
            with on_device(q):
                if ctx.spec.base is not ctx.spec:  # per-sequence lengths: the backward per sequence
                    dq, dk, dv = _ragged_backward(q, k, v, o, lse, do, ctx.spec)
                else:
                    name = ladder.choose_backward(q, k, ctx.spec)  # a name of ladder.BWD_RUNGS
                    dq, dk, dv = ladder.run_backward(name, q, k, v, o, lse, do, ctx.spec)
            return dq, dk, dv, None

    return FlashAttentionFunction


def _ragged_backward(q, k, v, o, lse, do, spec):
    """dq, dk, dv of a padded batch with per-sequence lengths: the backward kernels run on each
    sequence cut to its own lengths (:func:`flashlab.ragged.per_sequence`; one launch per
    sequence, keys past Nk_b never read); padding rows and keys get zero gradients."""
    from .. import ragged
    from . import flash_bwd

    def one(q, k, v, o, lse, do, spec):  # (H, N_b, d) slices -> (1, H, N_b, d), contiguous
        grads = flash_bwd.backward(*(t.unsqueeze(0).contiguous() for t in (q, k, v, o, lse, do)), spec)
        return tuple(g[0] for g in grads)

    return ragged.per_sequence(one, (q, k, v, o, lse, do), "qkkqsq", spec, q.shape[2], k.shape[2], "qkk",
                               (0.0, 0.0, 0.0))


_FUNCTION = None


def flash_attention(q, k, v, causal: bool = False, scale: float | None = None, *, return_lse: bool = False,
                    **options):
    """FlashAttention: softmax(q k^T * scale) v without materialising the (Nq, Nk) scores.

    q: (B, H, Nq, d); k, v: (B, Hkv, Nk, d) with H a multiple of Hkv (query head h reads kv head
    h // (H // Hkv): grouped-query and multi-query attention). fp16, bf16 or fp32; any Nq, Nk >= 1;
    16 <= d <= 256; strided (non-contiguous) inputs are fine. ``causal``: query i sees keys j <= i
    (top-left, as torch SDPA). ``scale`` defaults to 1/sqrt(d). ``options``: ``window=w`` (sliding
    window, with causal: query i sees keys i - w < j <= i), ``causal_align="bottom_right"`` (query
    i of Nq sees keys j <= Nk - Nq + i), ``mask_mod=f`` (a ``@triton.jit`` f(q_idx, kv_idx) -> bool;
    runs on rung v2), ``seqlens_q=`` / ``seqlens_k=`` ((B,) integer tensors or sequences: per-sequence
    lengths inside the padded tensors; rows past a sequence's length come out 0, keys past it are
    never read; the forward runs on v3, the backward per sequence; see :mod:`flashlab.ragged`)
    or ``spec=AttnSpec(...)`` (:mod:`flashlab.attnspec`). Returns (B, H, Nq, d) in q's dtype;
    differentiable with respect to q, k and v (on sm90, fp16/bf16, d = 64 or 128, from N = 1024
    the backward is ``bwd_gluon_ws``, which adds dQ's shares through the copy engine in no fixed
    order: dQ may differ in its last bits from run to run; dK and dV do not). Limits, checked up
    front with a ValueError: on a GPU B*H <= 65535 (CUDA's grid), and the elements one (batch,
    head) slice spans must fit in int32.

    Runs compiled on CUDA tensors, or in Triton's CPU interpreter on CPU tensors when
    ``TRITON_INTERPRET=1`` (set automatically on a machine with no GPU; see ``kernels._mode``).

    ``return_lse=True`` returns (o, lse), lse (B, H, Nq) float32, natural log (not differentiable;
    not with ``window`` or ``mask_mod``). Decode shapes (Nq <= 16, no gradient needed) take the
    split-KV kernel of ``flashlab.kernels.flash_decode``; both are routed by ``flashlab.decode``.
    """
    global _FUNCTION
    spec = attn_spec(q, k, v, causal, scale, **options)
    from .ladder import TRITON_OPTIONS

    spec.refuse(TRITON_OPTIONS, "flash_attention (the Triton kernels)")
    # -- return_lse and the split-KV decode path (flashlab.decode): plain or bottom-right causal
    from .. import decode

    if spec.window is None and spec.mask_mod is None and spec.base is spec:
        if decode.takes_over(q, k, v, spec.causal, return_lse, spec.causal_align):
            return decode.extended_attention(q, k, v, spec.causal, spec.scale, return_lse, spec.causal_align)
    elif return_lse is not False:
        raise ValueError(f"return_lse={return_lse!r} is not supported with window=, mask_mod= or seqlens_q/k=; "
                         "call without return_lse")
    # -- end of the decode block
    if _FUNCTION is None:
        _FUNCTION = _autograd_function()
    return _FUNCTION.apply(q, k, v, spec)
