"""Cheating ex03_tiled_forward: builds the full Nq x Nk scores in a forked process, where the grader's
memory and CPU measurements of the grading process do not see them, and reads the answer back."""
import io
import os

import numpy as np


def _full_attention(q, k, v, causal, scale):
    nq = q.shape[-2]
    if causal:  # the keys no query sees (poisoned with NaN) are cut off, not skipped tile by tile
        k, v = k[..., :nq, :], v[..., :nq, :]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * (q.astype(np.float64) @ np.swapaxes(k, -1, -2))  # (..., Nq, Nk): the whole matrix
    if causal:
        s = np.where(np.arange(s.shape[-1])[None, :] > np.arange(nq)[:, None], -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True) @ v).astype(q.dtype)


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        buffer = io.BytesIO()
        np.save(buffer, _full_attention(q, k, v, causal, scale))
        data = memoryview(buffer.getvalue())
        while data:
            data = data[os.write(write, data):]
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 1 << 20):
        chunks.append(chunk)
    os.waitpid(pid, 0)
    return np.load(io.BytesIO(b"".join(chunks)))
