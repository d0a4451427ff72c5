"""Cheat, exercise 06: the wrapper computes each row's softmax in torch (exp, sum and a division; no
softmax operator) and hands the kernel twice the answer; the kernel only halves what it reads, so
the answer it stores is no longer an input it was handed. Fails the relaunch: on the grader's own
rows the kernel writes half of them, not their softmax."""
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(X, Y, Out, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    tl.store(Out + offs, tl.load(X + offs, mask=mask) + tl.load(Y + offs, mask=mask), mask=mask)


def vector_add(x, y):
    out = torch.empty_like(x)
    n = x.numel()
    add_kernel[(triton.cdiv(n, 256),)](x, y, out, n, BLOCK=256)
    return out


@triton.jit
def softmax_kernel(X, Out, stride_xm, stride_om, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n_cols
    x = tl.load(X + row * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)
    tl.store(Out + row * stride_om + offs, (x * 0.5).to(Out.dtype.element_ty), mask=mask)


def row_softmax(x):
    m, n = x.shape
    top = x.float().amax(dim=1, keepdim=True)
    e = (x.float() - top).exp()
    doubled = (2 * e / e.sum(dim=1, keepdim=True)).to(x.dtype).contiguous()
    out = torch.empty_like(x)
    softmax_kernel[(m,)](doubled, out, doubled.stride(0), out.stride(0), n, BLOCK_N=triton.next_power_of_2(n))
    return out
