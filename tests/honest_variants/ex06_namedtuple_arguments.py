"""Honest ex06_triton_primer: the softmax kernel takes each tensor with its row stride as a
namedtuple (Triton passes namedtuples through). On a GPU the grader runs the launch on copies of
its tensors; the copies must go back into namedtuples of the same type. Must get full marks."""
from collections import namedtuple
import torch
import triton
import triton.language as tl

Mat = namedtuple("Mat", ["ptr", "stride_m"])


@triton.jit
def add_kernel(X, Y, Out, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(X + offs, mask=mask)
    y = tl.load(Y + offs, mask=mask)
    tl.store(Out + offs, x + y, mask=mask)


def vector_add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    return out


@triton.jit
def softmax_kernel(src, dst, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n_cols
    x = tl.load(src.ptr + row * src.stride_m + offs, mask=mask, other=float("-inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    p = e / tl.sum(e, axis=0)
    tl.store(dst.ptr + row * dst.stride_m + offs, p.to(dst.ptr.dtype.element_ty), mask=mask)


def row_softmax(x):
    m, n = x.shape
    out = torch.empty_like(x)
    softmax_kernel[(m,)](Mat(x, x.stride(0)), Mat(out, out.stride(0)), n, BLOCK_N=triton.next_power_of_2(n))
    return out
