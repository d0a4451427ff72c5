"""Broken ex03_tiled_forward: the Nq x Nk scores live in an anonymous mmap, and tracemalloc is stopped."""
import mmap
import tracemalloc

import numpy as np


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    if tracemalloc.is_tracing():
        tracemalloc.stop()
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    nq, nk = q.shape[-2], k.shape[-2]
    buf = mmap.mmap(-1, int(np.prod(q.shape[:-2], dtype=np.int64)) * nq * nk * 8)
    s = np.frombuffer(buf, dtype=np.float64).reshape(q.shape[:-2] + (nq, nk))
    np.matmul(q, np.swapaxes(k, -1, -2), out=s, casting="unsafe")
    s *= scale
    if causal:
        s[..., np.triu(np.ones((nq, nk), bool), 1)] = -np.inf
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return (s @ v).astype(q.dtype)
