"""Exercise 10: the tiled backward pass (FlashAttention-2 Algorithm 2).

Grade with ``check("ex10_tiled_backward")``. NumPy only. Hints: ``check("ex10_tiled_backward", hint=3)``.
Like exercise 03, the grader measures peak memory on large cases: never build an Nq x Nk array, nor
a row of Nk scores for one query, nor a copy of K, V, dK or dV: fill dk and dv key block by key block.
"""
import numpy as np


def tiled_attention_backward(q, k, v, o, lse, do, causal=False, scale=None, block_q=64, block_k=64):
    """Gradients (dq, dk, dv) of o = softmax(scale * q k^T) v, tile by tile.

    The maths (exercise 09), with S = scale Q K^T, P = softmax(S), dO = dL/dO, D = rowsum(dO * O):
        dV = P^T dO,   dP = dO V^T,   dS = P * (dP - D),   dQ = scale dS K,   dK = scale dS^T Q
    The algorithm is FlashAttention-2's Algorithm 2, lines 4-19: key/value blocks in the outer loop
    (dK_j, dV_j accumulate there), query blocks inside, and P never stored: each tile of it is
    recomputed from the saved lse (P_ij = exp(S_ij - lse_i), line 11).
    q: (..., Nq, d), k: (..., Nk, d), v: (..., Nk, dv), o and do: (..., Nq, dv),
    lse: (..., Nq) natural-log log-sum-exp of each scaled score row (from the forward pass).
    causal: query row r sees key columns c <= r; fully masked tiles must not be read (NaN there).
    scale defaults to 1 / sqrt(d). Returns (dq, dk, dv) shaped and typed like q, k, v.
    """
    raise NotImplementedError("Exercise 10: tiled backward")
