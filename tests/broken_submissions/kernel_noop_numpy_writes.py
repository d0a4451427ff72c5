"""Cheating ex06_triton_primer: launches a kernel that does nothing, then writes x + y (from NumPy)
into the launched buffer."""
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(X, Y, Out, n_elements, BLOCK: tl.constexpr):
    pass


def vector_add(x, y):
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    out.copy_(torch.from_numpy(x.cpu().numpy() + y.cpu().numpy()).to(out.device))
    return out
