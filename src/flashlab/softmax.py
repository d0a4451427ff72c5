"""Softmax building blocks: safe softmax, the running state (m, l) and its associative combine.

This is the single implementation of online-softmax rescaling in flashlab. The tiled
FlashAttention code in :mod:`flashlab.tiled` calls :func:`online_update` for every tile; it never
re-implements the rescaling.

The state of a partial softmax over some columns of a row is
    m   = max_j x_j                      (running row max)
    l   = sum_j exp(x_j - m)             (running row sum, relative to m)
    acc = sum_j exp(x_j - m) * v_j       (UNnormalised weighted sum of value rows; optional)
and softmax(x) @ V = acc / l, logsumexp(x) = m + log(l) once every column has been seen
(Milakov & Gimelshein 2018, "Online normalizer calculation for softmax"; FlashAttention
Algorithm 1 lines 10-12; the inner-loop update of FlashAttention-2 Algorithm 1).

Fully masked rows: a state over only -inf scores has m = -inf, l = 0, acc = 0. Every rescale
factor exp(m_old - m_new) is taken as 0 when m_old = -inf, so combining with such a state leaves
the other state unchanged and never produces NaN. A row that is -inf everywhere has no softmax:
:func:`safe_softmax` returns NaN for it (as torch.softmax does) and :func:`logsumexp` returns -inf.
NaN and +inf inputs propagate as NaN.
"""
from __future__ import annotations

import numpy as np

from ._checks import check_positive_int


def _as_float_array(name: str, x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind in "iub":
        x = x.astype(np.float64)
    elif x.dtype.kind != "f":
        raise TypeError(f"{name}.dtype={x.dtype} is not supported; expected a real (floating or integer) array")
    return x


def _nonempty_axis(x: np.ndarray, axis: int, name: str = "x") -> np.ndarray:
    """Move `axis` last and check it holds at least one element (`name`: the argument, for errors)."""
    if x.ndim == 0:
        raise ValueError(f"{name} must have at least one axis, got a 0-d array")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis={axis} is out of range for {name}.ndim={x.ndim}")
    x = np.moveaxis(x, axis, -1)
    if x.shape[-1] == 0:
        raise ValueError(f"{name} has no elements along axis={axis} (shape {x.shape}); softmax needs >= 1")
    return x


def _check_state(suffix: str, m, l, acc) -> None:
    """m and l: arrays of one shape (...); acc: None or (..., dv). Errors name e.g. `l_a`."""
    m, l = np.asarray(m), np.asarray(l)
    if m.shape != l.shape:
        raise ValueError(f"l{suffix}.shape={l.shape} must equal m{suffix}.shape={m.shape} (one value per row)")
    if acc is not None and np.shape(acc)[:-1] != m.shape:
        raise ValueError(f"acc{suffix}.shape={np.shape(acc)} must be m{suffix}.shape + (dv,) = {m.shape} + (dv,)")


def _finite_max(m: np.ndarray) -> np.ndarray:
    """m with -inf replaced by 0, so that x - m is -inf (not NaN) where x = m = -inf."""
    return np.where(np.isneginf(m), 0.0, m).astype(m.dtype, copy=False)


def rescale(m_old: np.ndarray, m_new: np.ndarray) -> np.ndarray:
    """alpha = exp(m_old - m_new), the factor that moves a state from max m_old to max m_new >= m_old.

    0 where m_old = -inf (a state that has seen nothing contributes nothing), including when
    m_new = -inf too. Shapes: any, broadcast together.
    """
    with np.errstate(invalid="ignore"):  # inf - inf: NaN propagates, without a warning
        return np.exp(m_old - _finite_max(m_new))


def softmax_state(scores) -> tuple[np.ndarray, np.ndarray]:
    """(m, l) of `scores` (..., n) over its last axis: m = rowmax (...), l = sum exp(x - m) (...)."""
    x = _nonempty_axis(_as_float_array("scores", scores), -1, "scores")
    m = x.max(axis=-1)  # (...)
    with np.errstate(invalid="ignore"):
        l = np.exp(x - _finite_max(m)[..., None]).sum(axis=-1)  # (...)
    return m, l


def combine_states(m_a, l_a, acc_a, m_b, l_b, acc_b):
    """Associative combine of two partial softmax states over disjoint sets of columns.

    m_*, l_*: (...) row states; acc_*: (..., dv) unnormalised weighted sums of value rows, or
    None for both (softmax only). Returns (m, l, acc) with m = max(m_a, m_b) and
    l = exp(m_a - m) l_a + exp(m_b - m) l_b, acc likewise (rows scaled by exp(m_old - m)).
    A state with m = -inf (l = 0) leaves the other unchanged.
    """
    if (acc_a is None) != (acc_b is None):
        raise ValueError("acc_a and acc_b must both be arrays or both be None")
    _check_state("_a", m_a, l_a, acc_a)
    _check_state("_b", m_b, l_b, acc_b)
    if np.shape(m_a) != np.shape(m_b) or np.shape(acc_a)[-1:] != np.shape(acc_b)[-1:]:
        raise ValueError(f"the two states must have one shape: m_a.shape={np.shape(m_a)}, m_b.shape={np.shape(m_b)}"
                         + ("" if acc_a is None else f", acc_a.shape={np.shape(acc_a)}, acc_b.shape={np.shape(acc_b)}"))
    m = np.maximum(m_a, m_b)  # (...)
    alpha = rescale(m_a, m)  # (...)
    beta = rescale(m_b, m)  # (...)
    l = alpha * l_a + beta * l_b  # (...)
    if acc_a is None:
        return m, l, None
    acc = alpha[..., None] * acc_a + beta[..., None] * acc_b  # (..., dv)
    return m, l, acc


def online_update(m_i, l_i, acc, s, v=None):
    """One tile of the online softmax, as in the kernels (FlashAttention-2 Algorithm 1, inner loop).

    m_i, l_i: (rows,) running state; acc: (rows, dv) unnormalised output, or None;
    s: (rows, cols) scores of this tile (-inf where masked); v: (cols, dv) value tile, or None.
    Returns (m_new, l_new, acc_new). Equal to
    ``combine_states(m_i, l_i, acc, *softmax_state(s), exp(s - rowmax(s)) @ v)`` but in the order
    a kernel computes it: exp(s - m_new) directly, with one rescale (alpha) of the old state.
    """
    _check_state("_i", m_i, l_i, acc)
    if np.shape(s)[:-1] != np.shape(m_i):
        raise ValueError(f"s.shape={np.shape(s)} must be m_i.shape + (cols,) = {np.shape(m_i)} + (cols,)")
    if (acc is None) != (v is None):
        raise ValueError("acc and v must both be arrays or both be None")
    if v is not None and np.shape(v) != (np.shape(s)[-1], np.shape(acc)[-1]):
        raise ValueError(f"v.shape={np.shape(v)} must be (cols of s, dv of acc) = "
                         f"({np.shape(s)[-1]}, {np.shape(acc)[-1]})")
    with np.errstate(invalid="ignore"):  # NaN/inf scores or values propagate quietly
        m_new = np.maximum(m_i, s.max(axis=-1))  # (rows,)  -- update m_i
        alpha = rescale(m_i, m_new)  # (rows,)  factor for the old state
        p = np.exp(s - _finite_max(m_new)[..., None])  # (rows, cols)  P~ = exp(S - m_new)
        l_new = alpha * l_i + p.sum(axis=-1)  # (rows,)  -- update l_i
        if acc is None:
            return m_new, l_new, None
        acc_new = alpha[..., None] * acc + p @ v  # (rows, dv)  -- update acc
    return m_new, l_new, acc_new


def safe_softmax(x, axis: int = -1) -> np.ndarray:
    """softmax(x) along `axis`, computed as exp(x - max) / sum exp(x - max) (no overflow).

    Same shape and dtype as x (integer input is computed in float64). Rows that are all -inf
    give NaN, as torch.softmax does.
    """
    x = _as_float_array("x", x)
    xm = _nonempty_axis(x, axis)  # (..., n)
    m, l = softmax_state(xm)  # (...), (...)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.exp(xm - _finite_max(m)[..., None]) / l[..., None]  # (..., n)
    return np.moveaxis(p, -1, axis)


def logsumexp(x, axis: int = -1) -> np.ndarray:
    """log(sum(exp(x))) along `axis`, computed as m + log(sum exp(x - m)); -inf for all -inf rows."""
    xm = _nonempty_axis(_as_float_array("x", x), axis)
    m, l = softmax_state(xm)
    with np.errstate(divide="ignore", invalid="ignore"):
        return _finite_max(m) + np.log(l)


def online_softmax(x, chunk: int, axis: int = -1) -> np.ndarray:
    """softmax(x) along `axis`, reading x `chunk` columns at a time.

    Pass 1 folds each chunk's state into the running (m, l) with :func:`online_update`; pass 2
    normalises each chunk with the final state: softmax = exp(x - m) / l. Same result as
    :func:`safe_softmax` up to rounding.
    """
    chunk = check_positive_int("chunk", chunk)
    x = _as_float_array("x", x)
    xm = _nonempty_axis(x, axis)  # (..., n)
    n = xm.shape[-1]
    m = np.full(xm.shape[:-1], -np.inf, dtype=xm.dtype)  # (...)
    l = np.zeros(xm.shape[:-1], dtype=xm.dtype)  # (...)
    for start in range(0, n, chunk):
        m, l, _ = online_update(m, l, None, xm[..., start:start + chunk])
    out = np.empty_like(xm)
    with np.errstate(invalid="ignore", divide="ignore"):
        for start in range(0, n, chunk):
            out[..., start:start + chunk] = (np.exp(xm[..., start:start + chunk] - _finite_max(m)[..., None])
                                             / l[..., None])
    return np.moveaxis(out, -1, axis)
