"""Cheat, exercise 12: the softmax is computed in torch (exp, sum) and handed doubled to a halving
kernel of another name; online_softmax_kernel runs only on a one-column decoy, where it writes 1.0.
Fails: no launch of online_softmax_kernel had the problem's n_cols."""
import torch
import triton
import triton.language as tl


@triton.jit
def online_softmax_kernel(X, Out, stride_xm, stride_om, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    tl.store(Out + row * stride_om + offs, tl.full([BLOCK_N], 1.0, tl.float32).to(Out.dtype.element_ty),
             mask=offs < n_cols)


@triton.jit
def halve_kernel(E, Out, n, BLOCK_N: tl.constexpr):
    offs = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = offs < n
    tl.store(Out + offs, (tl.load(E + offs, mask=m) * 0.5).to(Out.dtype.element_ty), mask=m)


def online_row_softmax(x, block_n=32):
    if block_n < 16 or block_n & (block_n - 1):
        raise ValueError(f'block_n={block_n}: a power of two >= 16')
    m, n = x.shape
    xf = x.float()
    e = torch.exp(xf - xf.max(dim=1, keepdim=True).values) if n else xf
    enc = ((e / e.sum(dim=1, keepdim=True)) * 2.0).contiguous() if n else xf
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if out.numel():
        halve_kernel[(triton.cdiv(m * n, block_n),)](enc, out, m * n, BLOCK_N=block_n)
    dx = torch.zeros((1, 1), dtype=x.dtype, device=x.device)
    dout = torch.empty((1, 1), dtype=x.dtype, device=x.device)
    online_softmax_kernel[(1,)](dx, dout, 1, 1, 1, BLOCK_N=block_n)
    return out
