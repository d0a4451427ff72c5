"""Broken ex06_triton_primer: vector_add first launches a helper kernel whose function claims
another module (as a kernel kept in a module of its own does), and that kernel stores past the end
of out without a mask. Launches of kernels from other modules are not tracked, but their accesses
are still checked: the store must fail naming Out."""
import torch
import triton
import triton.language as tl


@triton.jit
def fill_kernel(Out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Out + offs, tl.zeros([BLOCK], dtype=Out.dtype.element_ty))  # no mask: up to BLOCK-1 past the end


fill_kernel.fn.__module__ = "helpers"  # e.g. a kernel kept in a module of its own


@triton.jit
def add_kernel(X, Y, Out, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(X + offs, mask=mask)
    y = tl.load(Y + offs, mask=mask)
    tl.store(Out + offs, x + y, mask=mask)


def vector_add(x, y):
    n = x.numel()
    out = torch.empty_like(x)
    fill_kernel[(triton.cdiv(n, 256),)](out, n, BLOCK=256)
    add_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    return out


@triton.jit
def softmax_kernel(X, Out, stride_xm, stride_om, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n_cols
    x = tl.load(X + row * stride_xm + offs, mask=mask, other=float("-inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    p = e / tl.sum(e, axis=0)
    tl.store(Out + row * stride_om + offs, p.to(Out.dtype.element_ty), mask=mask)


def row_softmax(x):
    m, n = x.shape
    out = torch.empty_like(x)
    softmax_kernel[(m,)](x, out, x.stride(0), out.stride(0), n, BLOCK_N=triton.next_power_of_2(n))
    return out
