"""Broken ex03_tiled_forward: block_q query rows at a time against every key (no key loop): a
block_q x Nk array per step instead of block_q x block_k tiles."""
import numpy as np


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    nq, nk = q.shape[-2], k.shape[-2]
    o = np.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for q0 in range(0, nq, block_q):
        q1 = min(q0 + block_q, nq)
        s = scale * (q[..., q0:q1, :] @ np.swapaxes(k, -1, -2))  # (..., Bq, Nk)
        if causal:
            s = np.where(np.arange(nk)[None, :] > np.arange(q0, q1)[:, None], -np.inf, s)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        o[..., q0:q1, :] = (p / p.sum(axis=-1, keepdims=True)) @ v
    return o
