"""Known mistakes, computed in the grading parent, so that a failing report can name the mistake.

Each detector takes a case's keyword arguments (the clean inputs) and the constexprs of the
learner's last kernel launch, and returns the output a solution with that one mistake gives (or
None when the mistake does not apply to the case). When the learner's output equals it, the
report says "looks like: ..." before the numbers. NumPy only; float64 inside, the input dtype out.
"""
from __future__ import annotations

import numpy as np

NO_RESCALE = ("l_i and acc are not rescaled by alpha = exp(m_i_old - m_i_new) when a later key block "
              "raises the row max")
ACC_NOT_RESCALED = "acc is not rescaled by alpha = exp(m_i_old - m_i_new) when a later key block raises the row max"
DIAGONAL_HIDDEN = ("the causal mask hides the diagonal (it masks j >= i): row 0 then sees no key at all and "
                   "0/0 gives NaN there; mask only keys j > i")
NO_SCALE = "the scores are not multiplied by scale = 1/sqrt(d)"
SCALE_IGNORED = "the scale argument is ignored: 1/sqrt(d) is used even when scale is given"


def _attention(q, k, v, causal=False, scale=None, hide_diagonal=False, block_k=None, rescale=("l", "acc")):
    """Attention with optional mistakes; rows are independent, so one 'query block' is all rows."""
    q64, k64, v64 = (np.asarray(x, np.float64) for x in (q, k, v))
    nq, nk = q64.shape[-2], k64.shape[-2]
    s = scale * (q64 @ np.swapaxes(k64, -1, -2))  # (..., Nq, Nk)
    if causal or hide_diagonal:
        cols, rows = np.arange(nk)[None, :], np.arange(nq)[:, None]
        s = np.where(cols >= rows if hide_diagonal else cols > rows, -np.inf, s)
    block_k = nk if block_k is None else block_k
    m = np.full(s.shape[:-1], -np.inf)
    l, acc = np.zeros(s.shape[:-1]), np.zeros(s.shape[:-1] + (v64.shape[-1],))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for k0 in range(0, nk, block_k):
            s_j = s[..., k0:k0 + block_k]
            m_new = np.maximum(m, s_j.max(axis=-1))
            alpha = np.exp(m - m_new)
            p = np.exp(s_j - m_new[..., None])
            l = (alpha if "l" in rescale else 1.0) * l + p.sum(axis=-1)
            acc = (alpha[..., None] if "acc" in rescale else 1.0) * acc + p @ v64[..., k0:k0 + block_k, :]
            m = m_new
        return (acc / l[..., None]).astype(q.dtype)


def _scale(kw):
    return kw.get("scale") if kw.get("scale") is not None else 1.0 / np.sqrt(kw["q"].shape[-1])


def no_rescale(kw, blocks):
    block_k = kw.get("block_k") or blocks.get("BLOCK_N") or 16
    if kw["k"].shape[-2] <= block_k:
        return None
    return _attention(kw["q"], kw["k"], kw["v"], kw.get("causal", False), _scale(kw), block_k=block_k, rescale=())


def acc_not_rescaled(kw, blocks):
    block_k = kw.get("block_k") or blocks.get("BLOCK_N") or 16
    if kw["k"].shape[-2] <= block_k:
        return None
    return _attention(kw["q"], kw["k"], kw["v"], kw.get("causal", False), _scale(kw), block_k=block_k,
                      rescale=("l",))


def diagonal_hidden(kw, blocks):
    if not kw.get("causal"):
        return None
    return _attention(kw["q"], kw["k"], kw["v"], False, _scale(kw), hide_diagonal=True)


def no_scale(kw, blocks):
    return _attention(kw["q"], kw["k"], kw["v"], kw.get("causal", False), 1.0)


def scale_ignored(kw, blocks):
    if kw.get("scale") is None:
        return None
    return _attention(kw["q"], kw["k"], kw["v"], kw.get("causal", False), 1.0 / np.sqrt(kw["q"].shape[-1]))


_ATTENTION = ((DIAGONAL_HIDDEN, diagonal_hidden), (NO_SCALE, no_scale), (SCALE_IGNORED, scale_ignored))
_TILED = ((NO_RESCALE, no_rescale), (ACC_NOT_RESCALED, acc_not_rescaled)) + _ATTENTION

# (exercise, part) -> detectors; used when the registry's Part gives none of its own.
MISTAKES = {
    ("ex01_naive", "naive_attention"): _ATTENTION,
    ("ex03_tiled_forward", "tiled_attention"): _TILED,
    ("ex07_kernel_inner_loop", "flash_forward"): _TILED,
    ("ex08_kernel_causal", "flash_forward"): _TILED,
}
