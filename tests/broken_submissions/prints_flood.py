"""ex01_naive that is correct but prints a flood of debugging output (graded, output truncated)."""
import numpy as np


def naive_attention(q, k, v, causal=False, scale=None):
    for i in range(20000):
        print("debug: row", i, "of", q.shape)
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * (q @ np.swapaxes(k, -1, -2))
    if causal:
        s = np.where(np.triu(np.ones(s.shape[-2:], bool), 1), -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return ((p / p.sum(axis=-1, keepdims=True)) @ v).astype(q.dtype)
