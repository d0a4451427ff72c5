"""Exercise 07: the FlashAttention-2 forward kernel, from its signature.

Grade with ``check("ex07_kernel_inner_loop")`` (hints: ``hint=1``, ``2``, ``3``). The grader runs
flash_forward (in Triton's CPU interpreter when there is no GPU) on small tensors and compares it
with naive attention in float64. You write everything: the program ids, the pointers, the masks,
the loop, the store, and in flash_forward the output, the grid and the launch. After a check
passes, the grader launches flash_fwd_kernel once more itself, with your grid, tiles and scalars, on
random Q, K, V of its own: keep the signature's parameters (you may add more); the kernel alone
computes the result.

The algorithm is FlashAttention-2's Algorithm 1 (Dao, 2023): one program per (query block i,
batch element) (line 3) loads Q_i once (line 4), loops over the key/value blocks (lines 6-10)
keeping m_i, l_i, acc on chip in float32, and writes O_i = acc / l_i once (lines 12 and 14).
Contract: tl.dot shapes must be >= 16 on a GPU, so keep BLOCK_M, BLOCK_N >= 16 and powers of two.
Precision: with float32 inputs a GPU's tl.dot uses tf32 (10-bit mantissa); on CUDA the grader
allows 1e-2 (absolute and relative), in the interpreter 1e-4 + 1e-3 |expected| (float16:
5e-3 + 5e-3 |expected| in the interpreter).
"""
import torch
import triton
import triton.language as tl

BLOCK_M = 16  # query rows per program
BLOCK_N = 16  # key rows per inner-loop step


@triton.jit
def flash_fwd_kernel(Q, K, V, Out,
                     stride_qz, stride_qm, stride_qk,
                     stride_kz, stride_kn, stride_kk,
                     stride_vz, stride_vn, stride_vk,
                     stride_oz, stride_om, stride_ok,
                     N_Q, N_K, qk_scale,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    """O_i = softmax(qk_scale Q_i K^T) V for one block of BLOCK_M query rows of one batch element.

    Q + z * stride_qz + m * stride_qm + c * stride_qk is q[z, m, c] (likewise K, V, Out).
    Query rows >= N_Q and key rows >= N_K do not exist: never read them as data, never write them.
    """
    pass  # your code here


def flash_forward(q, k, v, causal=False, scale=None):
    """softmax(scale q k^T) v by flash_fwd_kernel.

    q: (Z, Nq, d), k and v: (Z, Nk, d) torch tensors on one device, float32 or float16, d a power
    of two >= 16; any Nq, Nk >= 1. scale defaults to 1 / sqrt(d). Returns (Z, Nq, d) in q's dtype.
    causal=True is exercise 08 (raise NotImplementedError for it here). Graded: ragged Nq and Nk,
    Nq < BLOCK_M, float16, large logits, an explicit scale.
    """
    raise NotImplementedError("Exercise 07: the forward kernel")
