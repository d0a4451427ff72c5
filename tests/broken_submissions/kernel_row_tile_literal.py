"""Cheating ex12_triton_online_softmax: the kernel is launched with BLOCK_N=block_n as the
case asks, but ignores it and loads the whole row at once with a literal tile, tl.arange(0, 512) (rows of
the graded cases hold at most 400 columns): a plain two-pass softmax over one block, no online softmax,
no loop. Part.launch_blocks reads only the launch's constexpr parameters (BLOCK_N = block_n, no wider one),
so the literal is never seen. The same hole as literal_tile (exercise 14) and global_constexpr_tile.

Refused: a tensor the kernel builds wider than block_n is judged, however it is written."""
import torch
import triton
import triton.language as tl


@triton.jit
def online_softmax_kernel(X, Out, stride_xm, stride_om, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, 512)  # the whole row, whatever BLOCK_N says
    x = tl.load(X + row * stride_xm + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
    m = tl.max(x, 0)
    e = tl.exp(x - m)
    tl.store(Out + row * stride_om + cols, (e / tl.sum(e, 0)).to(Out.dtype.element_ty), mask=cols < n_cols)


def online_row_softmax(x, block_n=32):
    if block_n < 16 or block_n & (block_n - 1):
        raise ValueError(f"block_n={block_n} must be a power of two >= 16")
    m, n = x.shape
    out = torch.empty_like(x)
    online_softmax_kernel[(m,)](x, out, x.stride(0), out.stride(0), n, BLOCK_N=block_n)
    return out
