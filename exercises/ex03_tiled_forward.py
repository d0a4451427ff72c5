"""Exercise 03: the tiled forward pass, FlashAttention-2 loop order.

Grade with ``check("ex03_tiled_forward")``. NumPy only. Hints: ``check("ex03_tiled_forward", hint=3)``.
The grader also measures your function's peak memory on large cases: it must never build an
Nq x Nk array, nor a row of Nk scores for one query (8 query rows against 2^20 keys), nor a copy of
K or V: keep (block_q x block_k) tiles.
"""
import numpy as np


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    """softmax(scale * Q K^T) V, computed one (block_q x block_k) tile at a time.

    The algorithm is FlashAttention-2's Algorithm 1 (Dao, 2023), lines 3-16: query blocks in the
    outer loop, key/value blocks in the inner loop, with the online softmax of exercise 02 keeping
    per query row a running max m_i, a running sum l_i and an unnormalised output acc (block_q, dv).
    q: (..., Nq, d), k: (..., Nk, d), v: (..., Nk, dv) -> o: (..., Nq, dv) in q's dtype; leading
    batch dims match exactly.
    Any Nq, Nk >= 1: the last tiles may be ragged; block sizes may exceed the sequence length.
    causal (top-left aligned): query row r sees key columns c <= r. A tile whose first key column is
    past the block's last query row must not be read at all (the grader puts NaN in K and V rows no
    query sees); tiles crossing the diagonal are masked.
    scale: defaults to 1 / sqrt(d). Graded against naive attention, with large logits (about 1e3).
    """
    raise NotImplementedError("Exercise 03: tiled forward")
