"""Broken ex01_naive: always returns float64, whatever the input dtype."""
import numpy as np


def naive_attention(q, k, v, causal=False, scale=None):
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * (q @ np.swapaxes(k, -1, -2))
    if causal:
        s = np.where(np.triu(np.ones(s.shape[-2:], bool), 1), -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v
