"""Exercise 06: Triton warm-up, a vector add and a row softmax.

Grade with ``check("ex06_triton_primer")``. Without a GPU the grader runs your kernels in Triton's
CPU interpreter (TRITON_INTERPRET=1, set before triton is imported) on CPU tensors; to try them
yourself in a notebook, call ``flashlab.course.setup()`` (or set the variable) before importing triton.
The wrappers must launch your kernels (``add_kernel[grid](...)``): the grader checks they ran.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(X, Y, Out, n_elements, BLOCK: tl.constexpr):
    # -- one program adds one block of BLOCK elements: offs = pid * BLOCK + arange(BLOCK)
    # -- mask the lanes past n_elements on the loads and the store
    pass  # your code here


def vector_add(x, y):
    """x + y for two 1-D tensors of equal length, dtype and device, computed by add_kernel.

    Grid: one program per BLOCK elements, triton.cdiv(n, BLOCK) programs. Returns a new tensor.
    """
    raise NotImplementedError("Exercise 06: vector add")


@triton.jit
def softmax_kernel(X, Out, stride_xm, stride_om, n_cols, BLOCK_N: tl.constexpr):
    # -- one program per row; the whole row fits in BLOCK_N >= n_cols lanes
    # -- masked lanes load -inf; subtract the row max, exp, divide by the row sum (in fp32)
    pass  # your code here


def row_softmax(x):
    """softmax over the last axis of a 2-D tensor x: (M, N) -> (M, N), same dtype, by softmax_kernel.

    Grid: M programs; BLOCK_N = triton.next_power_of_2(N).
    """
    raise NotImplementedError("Exercise 06: row softmax")
