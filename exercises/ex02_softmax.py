"""Exercise 02: safe softmax, the online softmax, and combining partial softmax states.

Grade with ``check("ex02_softmax")``. NumPy only.
"""
import numpy as np


def safe_softmax(x):
    """softmax over the last axis: p_j = exp(x_j - m) / sum_k exp(x_k - m), m = max_k x_k.

    x: (..., N) -> (..., N), same dtype. Subtracting m changes nothing mathematically but keeps
    exp() from overflowing (exp(1000) = inf). Entries equal to -inf get probability 0.
    """
    raise NotImplementedError("Exercise 02: safe softmax")


def online_softmax(x, chunk):
    """softmax over the last axis, reading x in chunks of ``chunk`` columns (the last may be shorter).

    Keep per row a running max m and a running sum l = sum over columns seen of exp(x_j - m).
    For each chunk c:  m_new = max(m, max_j x_cj);  l = l * exp(m - m_new) + sum_j exp(x_cj - m_new).
    Start from m = -inf, l = 0. Then p = exp(x - m) / l.
    x: (..., N) -> (..., N), same dtype.
    """
    raise NotImplementedError("Exercise 02: online softmax")


def combine_states(m_a, l_a, acc_a, m_b, l_b, acc_b):
    """Merge two partial softmax states over disjoint sets of columns of the same rows.

    A state over columns J of score rows x (and value rows v_j):
        m = max_{j in J} x_j,  l = sum_{j in J} exp(x_j - m),  acc = sum_{j in J} exp(x_j - m) v_j
    m_*: (...), l_*: (...), acc_*: (..., dv). Returns (m, l, acc) of the union of the columns:
        m = max(m_a, m_b);  l = exp(m_a - m) l_a + exp(m_b - m) l_b;  acc likewise.
    A state that has seen nothing (m = -inf, l = 0, acc = 0) must leave the other unchanged,
    without producing NaN.
    """
    raise NotImplementedError("Exercise 02: combine two (m, l, acc) states")
