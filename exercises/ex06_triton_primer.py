"""Exercise 06: Triton warm-up, a vector add and a row softmax.

Grade with ``check("ex06_triton_primer")`` (hints: ``hint=3``). Without a GPU the grader runs your
kernels in Triton's CPU interpreter (TRITON_INTERPRET=1, set before triton is imported) on CPU
tensors; to try them yourself in a notebook, call ``flashlab.course.setup()`` (or set the variable)
before importing triton. The wrappers must launch your kernels (``add_kernel[grid](...)``): the
grader checks they ran, and launches add_kernel and softmax_kernel once more itself with your grid and
BLOCK (BLOCK_N) on inputs of its own (keep their parameters).
"""
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(X, Y, Out, n_elements, BLOCK: tl.constexpr):
    """Out[i] = X[i] + Y[i] for the BLOCK elements of this program; n_elements need not divide by BLOCK."""
    pass  # your code here


def vector_add(x, y):
    """x + y for two 1-D tensors of equal length, dtype and device, computed by add_kernel.

    Returns a new tensor. Graded with lengths that are not a multiple of BLOCK, length 1, float16.
    """
    raise NotImplementedError("Exercise 06: vector add")


@triton.jit
def softmax_kernel(X, Out, stride_xm, stride_om, n_cols, BLOCK_N: tl.constexpr):
    """softmax of one row of n_cols <= BLOCK_N values (row r starts at X + r * stride_xm); float32 maths."""
    pass  # your code here


def row_softmax(x):
    """softmax over the last axis of a 2-D tensor x: (M, N) -> (M, N), same dtype, by softmax_kernel.

    The whole row fits in one block. Graded with N not a power of two, N = 1, float16, scores near 1e3,
    and rows further apart than N (x.stride(0) > N: step by x.stride(0), and by out.stride(0) for out).
    """
    raise NotImplementedError("Exercise 06: row softmax")
