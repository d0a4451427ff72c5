"""Exercise 10: the tiled backward pass (FlashAttention-2 Algorithm 2).

Grade with ``check("ex10_tiled_backward")``. NumPy only. Like exercise 03, the grader measures
peak memory on a large case: never build an Nq x Nk array.
"""
import numpy as np


def tiled_attention_backward(q, k, v, o, lse, do, causal=False, scale=None, block_q=64, block_k=64):
    """Gradients (dq, dk, dv) of o = softmax(scale * q k^T) v, tile by tile.

    D = rowsum(dO * O)                                        (..., Nq)
    for each key/value block j:  dK_j = 0, dV_j = 0
        for each query block i (causal: skip fully masked tiles):
            P_ij = exp(scale * Q_i K_j^T - lse_i)             (block_q, block_k), recomputed
            dV_j += P_ij^T dO_i
            dP_ij = dO_i V_j^T
            dS_ij = P_ij * (dP_ij - D_i)
            dQ_i += scale * dS_ij K_j
            dK_j += scale * dS_ij^T Q_i
    q: (..., Nq, d), k: (..., Nk, d), v: (..., Nk, dv), o and do: (..., Nq, dv),
    lse: (..., Nq) natural-log log-sum-exp of each scaled score row (from the forward pass).
    causal: query row r sees key columns c <= r. scale defaults to 1 / sqrt(d).
    Returns (dq, dk, dv) shaped and typed like q, k, v.
    """
    raise NotImplementedError("Exercise 10: tiled backward")
