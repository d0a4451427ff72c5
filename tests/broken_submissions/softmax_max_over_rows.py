"""Broken ex02_softmax: safe_softmax subtracts each column's max (axis=0, down the rows), not each row's;
online_softmax shares one max among the rows of a chunk (xc.max(), no axis). The rest is the solution.
"""
import numpy as np


def safe_softmax(x):
    """softmax over the last axis, computed as exp(x - max) / sum exp(x - max).

    x: (..., N) -> (..., N), same dtype. Must not overflow for large x.
    """
    m = x.max(axis=0, keepdims=True)  # the mistake: one max per column, not per row
    e = np.exp(x - m)  # (..., N)
    return e / e.sum(axis=-1, keepdims=True)


def online_softmax(x, chunk):
    """softmax over the last axis, reading x one chunk of `chunk` columns at a time.

    Keeps the running state m (row max so far) and l (sum of exp(x - m) so far), rescales l by
    exp(m_old - m_new) whenever the max grows, then normalises in a second pass.
    x: (..., N) -> (..., N), same dtype.
    """
    n = x.shape[-1]
    m = np.full(x.shape[:-1], -np.inf, dtype=x.dtype)  # (...)
    l = np.zeros(x.shape[:-1], dtype=x.dtype)  # (...)
    for start in range(0, n, chunk):
        xc = x[..., start:start + chunk]  # (..., c)
        m_new = np.maximum(m, xc.max())  # the mistake: one max for the whole chunk, every row
        l = l * np.exp(m - m_new) + np.exp(xc - m_new[..., None]).sum(axis=-1)
        m = m_new
    return np.exp(x - m[..., None]) / l[..., None]


def combine_states(m_a, l_a, acc_a, m_b, l_b, acc_b):
    """Merge two partial softmax states over disjoint sets of columns.

    m_*: (...) row max, l_*: (...) sum of exp(x - m_*), acc_*: (..., dv) sum of exp(x - m_*) v.
    Returns (m, l, acc) of the union. A state with m = -inf (nothing seen) changes nothing.
    """
    m = np.maximum(m_a, m_b)  # (...)
    m_safe = np.where(np.isneginf(m), 0.0, m)  # avoid -inf - -inf = NaN
    alpha = np.where(np.isneginf(m_a), 0.0, np.exp(m_a - m_safe))  # (...)
    beta = np.where(np.isneginf(m_b), 0.0, np.exp(m_b - m_safe))  # (...)
    l = alpha * l_a + beta * l_b
    acc = alpha[..., None] * acc_a + beta[..., None] * acc_b  # (..., dv)
    return m, l, acc
