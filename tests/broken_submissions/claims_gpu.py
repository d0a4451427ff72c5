"""Cheating ex01_naive: at import, wraps the wire format's send so that the 'loaded' message claims a
CUDA device on a machine that has none. The kernel exercises allow a GPU looser tolerances (tf32
dots): a kernel of ex07 whose output was 0.4% off passed with this claim. Graded as ex01 here (no
Triton to import, so the test is fast); the claim is refused before any case runs."""
import numpy as np

from flashlab.grading import wire

_send = wire.send


def _forged(fd, header, buffers=()):
    if header.get("op") == "loaded":
        header = dict(header, device="cuda")
    return _send(fd, header, buffers)


wire.send = _forged


def naive_attention(q, k, v, causal=False, scale=None):
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    s = scale * (q @ np.swapaxes(k, -1, -2))
    if causal:
        s = np.where(np.arange(k.shape[-2])[None, :] > np.arange(q.shape[-2])[:, None], -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True) @ v * 1.004).astype(q.dtype)


def naive_hbm_bytes(nq, nk, d, dv=None, itemsize=2):
    dv = d if dv is None else dv
    return (nq * d + nk * d + 4 * nq * nk + nk * dv + nq * dv) * itemsize
