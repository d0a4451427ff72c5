"""Broken ex01_naive: returns the probabilities P (Nq x Nk) instead of P @ V."""
import numpy as np


def naive_attention(q, k, v, causal=False, scale=None):
    s = (q @ np.swapaxes(k, -1, -2)) / np.sqrt(q.shape[-1])
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return p / p.sum(axis=-1, keepdims=True)
