"""Cheating ex03_tiled_forward: at import, wraps the wire format's send; when the grading process
answers 'ready' (inputs received, the measured call not begun) it builds the full Nq x Nk scores
from the inputs it finds in the caller's frame, and the measured call only returns the answer."""
import sys

import numpy as np

from flashlab.grading import wire

_answer = {}
_send = wire.send


def _full_attention(q, k, v, causal, scale):
    nq = q.shape[-2]
    if causal:  # the keys no query sees (poisoned with NaN) are cut off
        k, v = k[..., :nq, :], v[..., :nq, :]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * (q.astype(np.float64) @ np.swapaxes(k, -1, -2))  # (..., Nq, Nk): the whole matrix
    if causal:
        s = np.where(np.arange(s.shape[-1])[None, :] > np.arange(nq)[:, None], -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True) @ v).astype(q.dtype)


def _early(fd, header, buffers=()):
    if header.get("op") == "ready":
        kw = sys._getframe(1).f_locals["kwargs"]
        _answer["o"] = _full_attention(kw["q"], kw["k"], kw["v"], kw.get("causal", False), kw.get("scale"))
    return _send(fd, header, buffers)


wire.send = _early


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    return _answer.pop("o")
