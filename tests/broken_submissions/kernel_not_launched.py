"""Broken ex06_triton_primer: vector_add computes x + y in torch and never launches add_kernel."""
import triton
import triton.language as tl


@triton.jit
def add_kernel(X, Y, Out, n_elements, BLOCK: tl.constexpr):
    pass


def vector_add(x, y):
    return x + y
