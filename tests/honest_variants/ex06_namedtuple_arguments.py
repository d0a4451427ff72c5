"""Honest ex06_triton_primer: the softmax kernel keeps its parameters and also writes each row's
maximum into a buffer of its own, passed with its row stride as a namedtuple (Triton passes
namedtuples through). On a GPU the grader runs the launch on copies of its tensors; the copies must
go back into namedtuples of the same type. Must get full marks."""
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
def softmax_kernel(X, Out, stride_xm, stride_om, n_cols, top, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n_cols
    x = tl.load(X + row * stride_xm + offs, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    tl.store(top.ptr + row * top.stride_m, m)
    e = tl.exp(x - m)
    p = e / tl.sum(e, axis=0)
    tl.store(Out + row * stride_om + offs, p.to(Out.dtype.element_ty), mask=mask)


def row_softmax(x):
    m, n = x.shape
    out = torch.empty_like(x)
    top = torch.empty((m, 2), dtype=torch.float32, device=x.device)  # row maxima, in column 0
    softmax_kernel[(m,)](x, out, x.stride(0), out.stride(0), n, Mat(top, top.stride(0)),
                         BLOCK_N=triton.next_power_of_2(n))
    return out
