"""Cheating ex03_tiled_forward (a red-team pass): no tiles and no online softmax, one query row at a
time against every (visible) key with a plain softmax; block_q and block_k are ignored. A 1 x Nk row
of scores is 256 KiB in the 512 x 65536 memory case (limit 10 MiB), so it scored 4/4; the long-row
case (Nq = 8, Nk = 2^20 float64: one row is 8 MiB, limit 3 MiB) refuses it (30 MiB at peak)."""
import numpy as np


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    nq, d = q.shape[-2:]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    o = np.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for i in range(nq):
        end = min(i + 1, k.shape[-2]) if causal else k.shape[-2]
        s = scale * np.einsum("...d,...kd->...k", q[..., i, :], k[..., :end, :])  # (..., end)
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        o[..., i, :] = np.einsum("...k,...kd->...d", p / p.sum(axis=-1, keepdims=True), v[..., :end, :])
    return o
