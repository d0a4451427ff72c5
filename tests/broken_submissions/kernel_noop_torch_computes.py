"""Cheating ex06_triton_primer: launches add_kernel (which does nothing) and lets torch add."""
import triton
import triton.language as tl


@triton.jit
def add_kernel(X, Y, Out, n_elements, BLOCK: tl.constexpr):
    pass


def vector_add(x, y):
    out = x.new_empty(x.shape)
    add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    out.copy_(x + y)
    return out
