"""Triton primer: the three kernels the course starts from before FlashAttention.

* ``add(x, y)`` — vector add: one program per ``BLOCK_SIZE`` slice, a mask for the ragged end.
* ``softmax(x)`` — row softmax: one program per row, the whole row in SRAM, max-subtracted
  (the "safe softmax" of ``flashlab.softmax``) so large inputs do not overflow.
* ``matmul(a, b)`` — tiled matmul: one program per (BLOCK_M, BLOCK_N) output tile, accumulating
  (BLOCK_M, BLOCK_K) x (BLOCK_K, BLOCK_N) products in fp32 over K. The same tile-and-accumulate
  pattern is the inner loop of FlashAttention.

Each wrapper takes torch tensors (CUDA, or CPU under ``TRITON_INTERPRET=1``; see ``_mode``).
"""
from __future__ import annotations

from . import _mode

triton = _mode.triton()
import torch  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _add_kernel(X, Y, Out, n_elements, BLOCK_SIZE: tl.constexpr):
    # -- this program's slice of the vector; the last one is ragged, so mask it
    pid = tl.program_id(0)
    offs = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offs < n_elements
    x = tl.load(X + offs, mask=mask)
    y = tl.load(Y + offs, mask=mask)
    tl.store(Out + offs, x + y, mask=mask)


@triton.jit
def _softmax_kernel(X, Out, stride_xm, stride_om, n_cols, BLOCK_N: tl.constexpr):
    # -- one row per program; columns past n_cols load as -inf so they get weight 0
    row = tl.program_id(0)
    offs_n = tl.arange(0, BLOCK_N)
    x = tl.load(X + row * stride_xm + offs_n, mask=offs_n < n_cols, other=float("-inf")).to(tl.float32)
    # -- safe softmax: subtract the row max m, then exp and normalise by the row sum l
    m = tl.max(x, axis=0)
    p = tl.exp(x - m)
    l = tl.sum(p, axis=0)
    tl.store(Out + row * stride_om + offs_n, (p / l).to(Out.dtype.element_ty), mask=offs_n < n_cols)


@triton.jit
def _matmul_kernel(
    A, B, C, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    # -- this program's output tile C[rows, cols]
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    # -- walk over K one (BLOCK_M, BLOCK_K) x (BLOCK_K, BLOCK_N) pair of tiles at a time
    for start_k in range(0, K, BLOCK_K):
        ks = start_k + offs_k
        a = tl.load(A + offs_m[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(offs_m[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(B + ks[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=(ks[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        if DOT_F32:  # bf16 dots are wrong in the interpreter: upcast there
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc += tl.dot(a, b, input_precision=DOT_PRECISION)
    tl.store(C + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, acc.to(C.dtype.element_ty),
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _check_block(name: str, value, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or value & (value - 1):
        raise ValueError(f"{name}={value!r} must be a power of two >= {minimum} "
                         "(tl.arange lengths are powers of two; tl.dot tiles are at least 16)")


def _check(name: str, t, ndim: int) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {tuple(t.shape)}")
    if t.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(t.shape)}); expected at least one element")
    _mode.check_device(name, t)


def add(x, y, block_size: int = 1024):
    """x + y for 1-D tensors of one shape, dtype and device: (n,), (n,) -> (n,)."""
    _check("x", x, 1)
    _check("y", y, 1)
    _check_block("block_size", block_size, 1)
    if x.shape != y.shape or x.dtype != y.dtype or x.device != y.device:
        raise ValueError(f"y (shape {tuple(y.shape)}, {y.dtype}, {y.device}) must match x "
                         f"(shape {tuple(x.shape)}, {x.dtype}, {x.device})")
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)  # (n,)
    n = x.numel()
    _add_kernel[(triton.cdiv(n, block_size),)](x, y, out, n, BLOCK_SIZE=block_size)
    return out


def softmax(x):
    """Softmax over the last axis of a 2-D tensor: (rows, cols) -> (rows, cols), x's dtype."""
    _check("x", x, 2)
    if x.stride(-1) != 1:
        x = x.contiguous()
    rows, cols = x.shape
    out = torch.empty((rows, cols), dtype=x.dtype, device=x.device)  # (rows, cols)
    _softmax_kernel[(rows,)](x, out, x.stride(0), out.stride(0), cols, BLOCK_N=triton.next_power_of_2(cols))
    return out


def matmul(a, b, block_m: int = 32, block_n: int = 32, block_k: int = 32):
    """a @ b with a tiled Triton kernel: (M, K), (K, N) -> (M, N) in a's dtype (fp32 accumulation)."""
    _check("a", a, 2)
    _check("b", b, 2)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"a.shape={tuple(a.shape)} and b.shape={tuple(b.shape)}: a's columns must equal b's rows")
    if a.dtype != b.dtype or a.device != b.device:
        raise ValueError(f"b ({b.dtype}, {b.device}) must match a ({a.dtype}, {a.device})")
    for name, value in (("block_m", block_m), ("block_n", block_n), ("block_k", block_k)):
        _check_block(name, value, 16)
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)  # (M, N)
    _matmul_kernel[(triton.cdiv(M, block_m), triton.cdiv(N, block_n))](
        a, b, c, M, N, K, *a.stride(), *b.stride(), *c.stride(),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        DOT_F32=_mode.dot_upcast(a.dtype), DOT_PRECISION="ieee" if a.dtype == torch.float32 else "tf32")
    return c


def to_tf32(t):
    """fp32 cut to tf32's 10-bit mantissa (its low 13 mantissa bits cleared): what a GPU's tensor cores
    keep of an fp32 operand when ``tl.dot`` runs in its default precision, tf32."""
    if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
        raise TypeError(f"t must be a float32 torch.Tensor, got {getattr(t, 'dtype', type(t).__name__)}")
    return (t.contiguous().view(torch.int32) & ~0x1FFF).view(torch.float32)


def tf32_comparison(a, b, c) -> str:
    """Two lines: the max error of ``c`` (a kernel's fp32 ``a @ b``) against the float64 product, and that
    of the product of ``a`` and ``b`` cut to tf32 (:func:`to_tf32`), the inputs a GPU's default fp32
    ``tl.dot`` works from."""
    exact = a.double() @ b.double()
    ours = (c.double() - exact).abs().max().item()
    tf32 = ((to_tf32(a) @ to_tf32(b)).double() - exact).abs().max().item()
    return (f"fp32 matmul max error: {ours:.1e}  (interpreter: {_mode.is_interpreter()})\n"
            f"tf32-cut inputs:       {tf32:.1e}  (what a GPU's default fp32 tl.dot sees)")
