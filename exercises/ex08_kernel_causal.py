"""Exercise 08: causal masking and causal tile skipping in the forward kernel.

Grade with ``check("ex08_kernel_causal")`` (hints: ``hint=1``, ``2``, ``3``). Start from your exercise 07: copy its
kernel body and flash_forward here, then make ``causal=True`` work. The kernel takes one more
argument, CAUSAL (a tl.constexpr). As in exercise 07, the grader also launches it once more on inputs of
its own.

Causal, top-left aligned: query row r sees key columns c <= r. Two requirements:
1. A key block that starts past the program's last real query row is fully masked: never load it
   (the grader puts NaN in the K and V rows of key blocks that no query row reaches).
2. In the key blocks that remain, scores of keys past the query row count as -inf.
Nq and Nk may differ (rows past Nk see every key). causal=False must keep working.
Precision as in exercise 07 (tf32 on a GPU: 1e-2 there).
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
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                     CAUSAL: tl.constexpr):
    """Exercise 07's kernel; with CAUSAL, key c is visible to query row r only when c <= r."""
    pass  # your code here


def flash_forward(q, k, v, causal=False, scale=None):
    """softmax(scale q k^T + causal mask) v by flash_fwd_kernel; (Z, Nq, d) in q's dtype.

    q: (Z, Nq, d), k and v: (Z, Nk, d), float32 or float16, d a power of two >= 16.
    scale defaults to 1 / sqrt(d). Graded with causal=True: poisoned keys past the last query row,
    Nq > Nk, ragged tiles, float16, large logits, an explicit scale.
    """
    raise NotImplementedError("Exercise 08: causal masking in the kernel")
