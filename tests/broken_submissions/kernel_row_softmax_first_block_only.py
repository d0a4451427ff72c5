"""Broken ex12_triton_online_softmax, an honest mistake the report names: pass 1 walks the row's first block only."""
import torch
import triton
import triton.language as tl


@triton.jit
def online_softmax_kernel(X, Out, stride_xm, stride_om, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    m_i = tl.full([], float("-inf"), tl.float32)  # running max of the row
    l_i = tl.full([], 0.0, tl.float32)  # running sum of exp(x - m_i)
    for start in range(0, BLOCK_N, BLOCK_N):
        cols = start + offs
        x = tl.load(X + row * stride_xm + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m_i, tl.max(x, 0))
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)  # all -inf so far: exp(-inf - 0) = 0, not NaN
        l_i = l_i * tl.exp(m_i - m_ref) + tl.sum(tl.exp(x - m_ref), 0)
        m_i = m_new
    for start in range(0, n_cols, BLOCK_N):
        cols = start + offs
        x = tl.load(X + row * stride_xm + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        p = tl.exp(x - m_i) / l_i
        tl.store(Out + row * stride_om + cols, p.to(Out.dtype.element_ty), mask=cols < n_cols)


def online_row_softmax(x, block_n=32):
    """softmax over the last axis of x: (M, N) -> (M, N), same dtype, by online_softmax_kernel."""
    if block_n < 16 or block_n & (block_n - 1):
        raise ValueError(f"block_n={block_n} must be a power of two >= 16")
    m, n = x.shape
    out = torch.empty_like(x)
    online_softmax_kernel[(m,)](x, out, x.stride(0), out.stride(0), n, BLOCK_N=block_n)
    return out
