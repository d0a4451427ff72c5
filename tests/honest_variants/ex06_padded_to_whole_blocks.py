"""Honest exercise 06: the vector add without a mask. x and y are copied into zero-filled buffers of
whole 1024-element blocks, the kernel adds every block in full, and the first n elements are returned.
The padded copies are inputs the learner derived (neither is a copy of an input in any layout), and
they can be far larger than the inputs (10 elements padded to 1024); a derived input that large is
refused as a product of the inputs unless it is an input padded with one fill value, as here.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(X, Y, Out, n_elements, BLOCK: tl.constexpr):
    # -- one program adds one whole block: the buffers are padded to whole blocks, no mask needed
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    tl.store(Out + offs, tl.load(X + offs) + tl.load(Y + offs))


def vector_add(x, y):
    """x + y for two 1-D tensors of the same length, dtype and device, with add_kernel."""
    n = x.numel()
    BLOCK = 1024
    blocks = triton.cdiv(n, BLOCK)
    xp = torch.zeros(blocks * BLOCK, dtype=x.dtype, device=x.device)
    yp = torch.zeros_like(xp)
    xp[:n] = x
    yp[:n] = y
    out = torch.empty_like(xp)
    add_kernel[(blocks,)](xp, yp, out, n, BLOCK=BLOCK)
    return out[:n]


@triton.jit
def softmax_kernel(X, Out, stride_xm, stride_om, n_cols, BLOCK_N: tl.constexpr):
    # -- one program normalises one row, held whole in registers
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n_cols
    x = tl.load(X + row * stride_xm + offs, mask=mask, other=float("-inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)  # safe softmax: subtract the row max
    e = tl.exp(x)
    p = e / tl.sum(e, axis=0)
    tl.store(Out + row * stride_om + offs, p.to(Out.dtype.element_ty), mask=mask)


def row_softmax(x):
    """softmax over the last axis of a 2-D tensor (M, N) -> (M, N), one program per row."""
    m, n = x.shape
    out = torch.empty_like(x)
    softmax_kernel[(m,)](x, out, x.stride(0), out.stride(0), n, BLOCK_N=triton.next_power_of_2(n))
    return out
