"""Cheating ex03_tiled_forward: writes the full Nq x Nk scores, a few rows at a time, into a memfd (an
in-memory file, not in the process's resident memory) and reads them back for the softmax and P V."""
import os

import numpy as np


def _small(q, k, v, causal, scale):  # every case but the memory one: plain attention
    nq = q.shape[-2]
    if causal:  # the keys no query sees (poisoned with NaN) are cut off
        k, v = k[..., :nq, :], v[..., :nq, :]
    s = scale * (q @ np.swapaxes(k, -1, -2))
    if causal:
        s = np.where(np.arange(s.shape[-1])[None, :] > np.arange(nq)[:, None], -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True) @ v).astype(q.dtype)


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    nq, nk = q.shape[-2], k.shape[-2]
    if causal or q.ndim > 2 or nk < 4096:
        return _small(q, k, v, causal, scale)
    fd, rows, size = os.memfd_create("scores"), 8, q.dtype.itemsize
    m = np.empty(nq, q.dtype)
    for r0 in range(0, nq, rows):  # pass 1: S, rows at a time, into the memfd; the row max
        s = (scale * (q[r0:r0 + rows] @ k.T)).astype(q.dtype)  # (rows, Nk)
        m[r0:r0 + rows] = s.max(axis=-1)
        os.pwrite(fd, s.tobytes(), r0 * nk * size)
    out = np.empty((nq, v.shape[-1]), q.dtype)
    for r0 in range(0, nq, rows):  # pass 2: S read back, softmax, P V
        n = min(rows, nq - r0)
        s = np.frombuffer(os.pread(fd, n * nk * size, r0 * nk * size), q.dtype).reshape(n, nk)
        p = np.exp(s - m[r0:r0 + n, None])
        out[r0:r0 + n] = (p @ v) / p.sum(axis=-1, keepdims=True)
    os.close(fd)
    return out
