"""Cheating ex03_tiled_forward: builds the full Nq x Nk scores, frees them, then resets the process's
peak resident size (/proc/self/clear_refs) so that the peak the grader reads afterwards is small."""
import numpy as np


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    nq = q.shape[-2]
    if causal:  # the keys no query sees (poisoned with NaN) are cut off
        k, v = k[..., :nq, :], v[..., :nq, :]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * (q.astype(np.float64) @ np.swapaxes(k, -1, -2))  # (..., Nq, Nk): the whole matrix
    if causal:
        s = np.where(np.arange(s.shape[-1])[None, :] > np.arange(nq)[:, None], -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    out = (p / p.sum(axis=-1, keepdims=True) @ v).astype(q.dtype)
    del s, p
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return out
