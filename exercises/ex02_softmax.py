"""Exercise 02: safe softmax, the online softmax, and combining partial softmax states.

Grade with ``check("ex02_softmax")``. NumPy only. Hints: ``check("ex02_softmax", hint=3)``.
"""
import numpy as np


def safe_softmax(x):
    """softmax over the last axis: p_j = exp(x_j) / sum_k exp(x_k).

    x: (..., N) -> (..., N), same dtype. Graded on random shapes, float32 and float64, scores near
    1e3 (exp(1000) is inf in both dtypes: the result must still be right) and entries equal to -inf
    (probability 0).
    """
    raise NotImplementedError("Exercise 02: safe softmax")


def online_softmax(x, chunk):
    """softmax over the last axis, reading x only ``chunk`` columns at a time (the last chunk may be shorter).

    The normaliser l = sum_j exp(x_j - m) with m = max_j x_j must be built while reading the chunks
    in order, never holding more than one chunk's exponentials: after the chunks 1..c you know
    m_c = max over columns seen and l_c = sum over columns seen of exp(x_j - m_c) (Milakov &
    Gimelshein 2018; FlashAttention-2 Algorithm 1, lines 9-10, for one row). Then p = exp(x - m) / l.
    x: (..., N) -> (..., N), same dtype. Graded with chunk = 1, ragged chunks, chunk > N, and a row
    whose max arrives in its last chunk.
    """
    raise NotImplementedError("Exercise 02: online softmax")


def combine_states(m_a, l_a, acc_a, m_b, l_b, acc_b):
    """Merge two partial softmax states over disjoint sets of columns of the same rows.

    The state of a set J of columns, for score rows x and value rows v_j:
        m = max_{j in J} x_j,   l = sum_{j in J} exp(x_j - m),   acc = sum_{j in J} exp(x_j - m) v_j
    m_*, l_*: (...), acc_*: (..., dv). Returns (m, l, acc), the state of the union of the columns.
    A state that has seen nothing (m = -inf, l = 0, acc = 0) must leave the other unchanged, and two
    of them combine to one, with no NaN anywhere.
    """
    raise NotImplementedError("Exercise 02: combine two (m, l, acc) states")
