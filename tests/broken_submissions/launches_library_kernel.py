"""Cheating ex06_triton_primer: keeps its own add_kernel for show and launches flashlab's @triton.jit kernel."""
import torch
import triton
import triton.language as tl
from flashlab.kernels.primer import _add_kernel


@triton.jit
def add_kernel(X, Y, Out, n_elements, BLOCK: tl.constexpr):
    pass


def vector_add(x, y):
    out = torch.empty_like(x)
    add_kernel[(1,)](x, y, out, 0, BLOCK=16)
    _add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK_SIZE=256)
    return out
