"""Exercise 03: the tiled forward pass, FlashAttention-2 loop order.

Grade with ``check("ex03_tiled_forward")``. NumPy only. The grader also measures your function's
peak memory on a large case: it must never build an Nq x Nk array.
"""
import numpy as np


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    """softmax(scale * Q K^T) V computed one (block_q x block_k) tile at a time.

    FlashAttention-2 Algorithm 1: for each query block Q_i (block_q rows):
        m_i = -inf, l_i = 0, acc = 0                        (block_q,), (block_q,), (block_q, dv)
        for each key/value block K_j, V_j (block_k rows):
            S_ij  = scale * Q_i K_j^T                       (block_q, block_k)
            m_new = max(m_i, rowmax(S_ij))
            P~    = exp(S_ij - m_new)
            alpha = exp(m_i - m_new)
            l_i   = alpha * l_i + rowsum(P~)
            acc   = alpha * acc + P~ V_j
            m_i   = m_new
        O_i = acc / l_i
    q: (..., Nq, d), k: (..., Nk, d), v: (..., Nk, dv) -> o: (..., Nq, dv) in q's dtype.
    Any Nq, Nk >= 1: the last tiles may be ragged; block sizes may exceed the sequence length.
    causal: query row r sees key columns c <= r. Skip every tile whose first key column is past
    the block's last query row (never read its K_j, V_j); mask the tiles on the diagonal.
    scale: defaults to 1 / sqrt(d).
    """
    raise NotImplementedError("Exercise 03: tiled forward")
