"""Broken ex01_naive: allocates (and touches) 3 GiB."""
import numpy as np


def naive_attention(q, k, v, causal=False, scale=None):
    big = np.ones((3 << 30) // 8)
    return big[: q.size].reshape(q.shape)
