"""Exercise 13: the attention backward in Triton: dK and dV per key block, then dQ per query block.

Grade with ``check("ex13_triton_backward")`` (hints: ``hint=1``, ``2``, ``3``). You write both
kernels and the wrappers: grids, pointers, masks, the loops, the stores.

The maths (exercise 09), with S = scale Q K^T, P = softmax(S), D = rowsum(dO * O):
    dV = P^T dO,   dP = dO V^T,   dS = P * (dP - D),   dK = scale dS^T Q,   dQ = scale dS K
Part 1 is FlashAttention-2's Algorithm 2 (Dao, 2023), lines 5-19 for one key/value block j
without line 15: K_j and V_j are loaded once, dK_j and dV_j accumulate on chip in float32 over the
query blocks, and P is never stored: each tile is recomputed from the forward's lse (line 11).
Part 2 computes dQ (line 15) in a second kernel, one program per query block, so that no two
programs add into the same rows of dQ. D (line 4) may be computed in the wrappers with torch.
Contract: tl.dot shapes >= 16 (BLOCK_M, BLOCK_N, HEAD_DIM); tiles of at most 128 (every tl.constexpr of
your launches that is a power of two): the grader's cases have more rows, so the loops walk blocks.
Precision: float32 inputs; in the interpreter the grader allows 1e-4 + 1e-3 |expected|; on CUDA
(tf32 dots) 1e-2 + 1e-2 |expected|.
After a check passes, the grader launches each kernel once more itself, with your grid, tiles and
other scalars, on tensors of its own (random Q, K, V and dO, the lse and D of that attention, its own
sm_scale), at the sizes your launches gave it: keep their parameters, and launch them on the problem.
"""
import torch
import triton
import triton.language as tl

BLOCK_M = 16  # query rows per inner-loop step
BLOCK_N = 16  # key rows per program


@triton.jit
def flash_bwd_dkdv_kernel(Q, K, V, dO, LSE, Delta, dK, dV,
                          stride_qz, stride_qm, stride_kz, stride_kn, stride_lz,
                          N_Q, N_K, sm_scale,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                          CAUSAL: tl.constexpr):
    """dK_j, dV_j for one block of BLOCK_N key rows of one batch element.

    Q, dO: (Z, N_Q, HEAD_DIM) with strides (stride_qz, stride_qm, 1); K, V, dK, dV: (Z, N_K, HEAD_DIM)
    with strides (stride_kz, stride_kn, 1); LSE, Delta: (Z, N_Q) float32 with strides (stride_lz, 1).
    CAUSAL: key c receives gradient only from query rows r >= c.
    """
    pass  # your code here


def flash_backward_dkdv(q, k, v, o, lse, do, causal=False, scale=None):
    """(dk, dv) of o = softmax(scale q k^T) v (causal: key c visible to query row r when c <= r).

    q, o, do: (Z, Nq, d); k, v: (Z, Nk, d); lse: (Z, Nq), the natural-log log-sum-exp of each scaled
    score row; all float32, d a power of two >= 16, any Nq, Nk >= 1. scale defaults to 1 / sqrt(d).
    Returns dk, dv shaped and typed like k, v, computed by flash_bwd_dkdv_kernel.
    Graded: ragged blocks, Nq != Nk both ways with causal (keys no query sees get 0), an explicit scale.
    """
    raise NotImplementedError("Exercise 13: dK and dV kernel")


@triton.jit
def flash_bwd_dq_kernel(Q, K, V, dO, LSE, Delta, dQ,
                        stride_qz, stride_qm, stride_kz, stride_kn, stride_lz,
                        N_Q, N_K, sm_scale,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                        CAUSAL: tl.constexpr):
    """dQ_i for one block of BLOCK_M query rows of one batch element; arguments as flash_bwd_dkdv_kernel's."""
    pass  # your code here


def flash_backward_dq(q, k, v, o, lse, do, causal=False, scale=None):
    """dq of o = softmax(scale q k^T) v, shaped and typed like q, computed by flash_bwd_dq_kernel.

    Arguments as flash_backward_dkdv's. Graded on the same kinds of cases.
    """
    raise NotImplementedError("Exercise 13: dQ kernel")
