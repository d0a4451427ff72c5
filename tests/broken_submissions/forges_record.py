"""Cheating ex01_naive: at import, wraps the wire format's send so that its results carry fields of the
wrong type (once, this made the grader report an internal error of its own)."""
import numpy as np

from flashlab.grading import wire

_send = wire.send


def _forged(fd, header, buffers=()):
    if header.get("op") == "result":
        header = dict(header, forbidden_calls=5, where=["x", "not a line", "y"])
    return _send(fd, header, buffers)


wire.send = _forged


def naive_attention(q, k, v, causal=False, scale=None):
    return np.zeros(q.shape[:-1] + (v.shape[-1],), q.dtype)


def naive_hbm_bytes(nq, nk, d, dv=None, itemsize=2):
    return 0
