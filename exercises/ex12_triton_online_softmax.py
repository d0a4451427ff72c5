"""Exercise 12: softmax of rows longer than one block, in Triton (the online softmax in a kernel).

Grade with ``check("ex12_triton_online_softmax")`` (hints: ``hint=1``, ``2``, ``3``).
Exercise 06's row softmax held a whole row in one block. Here a row has N columns and a block only
block_n of them, N up to a few hundred: the kernel must walk the row block by block. This is the
online softmax of exercise 02 (m, l over chunks) written as a Triton kernel, and the softmax half
of the FlashAttention forward kernel (FlashAttention-2 Algorithm 1, lines 9-10, for one row).
After a check passes, the grader launches online_softmax_kernel once more itself, with your grid
and BLOCK_N on rows of its own: keep its parameters.
"""
import torch
import triton
import triton.language as tl


@triton.jit
def online_softmax_kernel(X, Out, stride_xm, stride_om, n_cols, BLOCK_N: tl.constexpr):
    """Out[r, :] = softmax(X[r, :]) for the row r of this program; n_cols may exceed BLOCK_N.

        p_j = exp(x_j - m) / l,   m = max_j x_j,   l = sum_j exp(x_j - m)

    Row r starts at X + r * stride_xm (Out + r * stride_om); columns are contiguous. Registers hold
    one block of BLOCK_N values at a time, never the row: every tensor the kernel builds is at most
    BLOCK_N long in each dimension (several rows per program too). Compute in float32; store in
    Out's dtype.
    """
    pass  # your code here


def online_row_softmax(x, block_n=32):
    """softmax over the last axis of x: (M, N) -> (M, N), same dtype, by online_softmax_kernel.

    x: a 2-D float32 or float16 tensor whose columns are contiguous; its rows may lie further apart
    than N (x.stride(0) > N: pass x.stride(0), and out.stride(0) for out). block_n: the kernel's
    BLOCK_N, a power of two >= 16 (otherwise a ValueError naming block_n), whatever N is. Entries may
    be -inf (probability 0), and a row's first block may be all -inf; every row holds at least one
    finite entry. Graded: N not a multiple of block_n, N < block_n, float16, scores near 300 (exp
    overflows float32 past 88.7), leading -inf columns, a first block far above the rest, strided
    rows, a bad block_n.
    """
    raise NotImplementedError("Exercise 12: online softmax kernel")
