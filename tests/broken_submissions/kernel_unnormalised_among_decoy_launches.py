"""Cheating ex12_triton_online_softmax: the kernel writes exp(x - rowmax) and never divides by the row sum.
The wrapper computes the softmax in torch and hands the kernel log P with a 0 column appended (the row max
is 0, exp gives P back), then launches the same kernel 20 more times on a 1 x 1 buffer, where exp(x - max)
= 1 is the softmax. A relaunch of a sample of the call's launches would rarely pick the real one; the
grader relaunches every launch whose output the returned value holds, and one per distinct signature."""
import torch
import triton
import triton.language as tl

DECOYS = 20


@triton.jit
def online_softmax_kernel(X, Out, stride_xm, stride_om, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    m_i = tl.full([], float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + offs
        x = tl.load(X + row * stride_xm + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_i = tl.maximum(m_i, tl.max(x, 0))
    for start in range(0, n_cols, BLOCK_N):
        cols = start + offs
        x = tl.load(X + row * stride_xm + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        tl.store(Out + row * stride_om + cols, tl.exp(x - m_i).to(Out.dtype.element_ty), mask=cols < n_cols)


def online_row_softmax(x, block_n=32):
    if block_n < 16 or block_n & (block_n - 1):
        raise ValueError(f"block_n={block_n} must be a power of two >= 16")
    m, n = x.shape
    xd = x.double()
    xd = xd - xd.amax(1, keepdim=True)
    p = xd.exp()
    p = p / p.sum(1, keepdim=True)
    enc = torch.zeros(m, n + 1, dtype=torch.float64, device=x.device)
    enc[:, :n] = p.log()
    enc = enc.float()
    out = torch.empty(m, n + 1, dtype=x.dtype, device=x.device)
    dx, do = torch.zeros(1, 1, device=x.device), torch.zeros(1, 1, device=x.device)
    for _ in range(DECOYS):
        online_softmax_kernel[(1,)](dx, do, 1, 1, 1, BLOCK_N=block_n)
    online_softmax_kernel[(m,)](enc, out, enc.stride(0), out.stride(0), n + 1, BLOCK_N=block_n)
    return out[:, :n]
