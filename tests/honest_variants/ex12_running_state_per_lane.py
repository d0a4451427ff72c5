"""Exercise 12 with the running max and sum kept per lane (vectors of BLOCK_N), each rescaled when its own max
rises, merged into the row's max and sum after the loop."""
import torch
import triton
import triton.language as tl


@triton.jit
def online_softmax_kernel(X, Out, stride_xm, stride_om, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    x_row = X + row * stride_xm
    o_row = Out + row * stride_om
    offs = tl.arange(0, BLOCK_N)
    m = tl.full([BLOCK_N], float("-inf"), tl.float32)   # per-lane running max
    l = tl.zeros([BLOCK_N], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        l = l * tl.exp(m - m_safe) + tl.exp(x - m_safe)
        m = m_new
    m_row = tl.max(m, axis=0)
    l_row = tl.sum(l * tl.exp(m - m_row), axis=0)
    for start in range(0, n_cols, BLOCK_N):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        p = tl.exp(x - m_row) / l_row
        tl.store(o_row + cols, p.to(Out.dtype.element_ty), mask=cols < n_cols)


def online_row_softmax(x, block_n=32):
    if not isinstance(block_n, int) or block_n < 16 or block_n & (block_n - 1):
        raise ValueError(f"block_n must be a power of two >= 16, got {block_n}")
    M, N = x.shape
    out = torch.empty_like(x)
    online_softmax_kernel[(M,)](x, out, x.stride(0), out.stride(0), N, BLOCK_N=block_n)
    return out
