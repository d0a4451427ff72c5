"""Input validation shared by every public NumPy function of flashlab.

Bad input is rejected here, at the boundary, with an error that names the argument, what was
given and what was expected; nothing should fail later as an IndexError inside a tile loop.

Dtype policy: q, k, v (and o, do for the backward) must be NumPy arrays of one floating dtype.
float32 and float64 are computed in their own precision. float16 is accepted and computed in
float32 (as GPU kernels accumulate fp16 inputs in fp32); outputs are returned as float16, and the
row statistic ``lse`` stays float32. Integer, bool and complex arrays are rejected with a
TypeError. NaN and inf values are not checked: they propagate to the outputs, quietly (as they do
on a GPU): :func:`quiet_nonfinite` keeps NumPy's "invalid value" warnings (inf - inf, 0 * inf) out
of the learner's way.
"""
from __future__ import annotations

import functools
import math
import numbers
from typing import NamedTuple

import numpy as np

_FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


class AttentionDims(NamedTuple):
    """Sizes read off validated q, k, v arrays."""

    batch_shape: tuple[int, ...]  # the leading `...` dims shared by q, k, v
    batch: int  # number of flat batch elements (product of batch_shape, 1 when there are none)
    nq: int
    nk: int
    d: int
    dv: int
    dtype: np.dtype  # dtype of the inputs (and of the outputs)
    work_dtype: np.dtype  # dtype the computation runs in (float32 for float16 inputs)


def check_array(name: str, x) -> np.ndarray:
    """x must be a floating NumPy array of rank >= 2."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{name}.dtype={x.dtype} is not supported; expected float16, float32 or float64")
    if x.ndim < 2:
        raise ValueError(f"{name}.ndim={x.ndim} (shape {x.shape}) must be >= 2: expected (..., N, d)")
    return x


def check_qkv(q, k, v) -> AttentionDims:
    """Validate q (..., Nq, d), k (..., Nk, d), v (..., Nk, dv) and return their sizes."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_array(name, x)
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"q, k, v must share one dtype; got q.dtype={q.dtype}, k.dtype={k.dtype}, "
                        f"v.dtype={v.dtype}")
    if k.shape[:-2] != q.shape[:-2]:
        raise ValueError(f"k batch dims {k.shape[:-2]} must equal q batch dims {q.shape[:-2]} "
                         f"(q.shape={q.shape}, k.shape={k.shape})")
    if v.shape[:-2] != q.shape[:-2]:
        raise ValueError(f"v batch dims {v.shape[:-2]} must equal q batch dims {q.shape[:-2]} "
                         f"(q.shape={q.shape}, v.shape={v.shape})")
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"k.shape[-1]={k.shape[-1]} must equal q.shape[-1]={q.shape[-1]} (head dim d)")
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(f"v.shape[-2]={v.shape[-2]} must equal k.shape[-2]={k.shape[-2]} "
                         f"(one value row per key)")
    nq, d = q.shape[-2:]
    nk, dv = v.shape[-2:]
    for name, meaning, size in (("q.shape[-2]", "Nq", nq), ("k.shape[-2]", "Nk", nk),
                                ("q.shape[-1]", "d", d), ("v.shape[-1]", "dv", dv)):
        if size < 1:
            raise ValueError(f"{name}={size} ({meaning}) must be >= 1: empty sequences and heads are not supported")
    batch_shape = tuple(q.shape[:-2])
    work = np.dtype(np.float32) if q.dtype == np.float16 else q.dtype
    return AttentionDims(batch_shape, math.prod(batch_shape), nq, nk, d, dv, q.dtype, work)


def check_like(name: str, x, shape: tuple[int, ...], meaning: str) -> np.ndarray:
    """x must be a floating array of exactly `shape` (used for o, do, lse of the backward)."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(x).__name__}")
    if x.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{name}.dtype={x.dtype} is not supported; expected float16, float32 or float64")
    if tuple(x.shape) != tuple(shape):
        raise ValueError(f"{name}.shape={tuple(x.shape)} must be {tuple(shape)} ({meaning})")
    return x


def check_scale(scale, d: int) -> float:
    """scale: None (-> 1/sqrt(d)) or a finite real number > 0."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a real number or None, got {type(scale).__name__} {scale!r}")
    scale = float(scale)
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"scale={scale!r} must be finite and > 0 (default 1/sqrt(d)={1 / math.sqrt(d):.6g})")
    return scale


def check_positive_int(name: str, value) -> int:
    """value must be an int >= 1 (block sizes, sequence lengths, head dims, byte sizes)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int >= 1, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name}={int(value)} must be >= 1")
    return int(value)


def check_bool(name: str, value) -> bool:
    """value must be True or False (a Python or NumPy bool)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def check_tracer(tracer):
    """tracer: None or an object with begin/step/read/write (a flashlab.TrafficTracer)."""
    if tracer is not None:
        missing = [m for m in ("begin", "step", "read", "write") if not callable(getattr(tracer, m, None))]
        if missing:
            raise TypeError(f"tracer must be a flashlab.TrafficTracer or None, got {type(tracer).__name__} "
                            f"(missing {', '.join(missing)})")
    return tracer


def quiet_nonfinite(fn):
    """Run `fn` under ``np.errstate(invalid="ignore")``: NaN/inf inputs propagate without warnings.

    Only the "invalid" flag is silenced (inf - inf, 0 * inf, NaN from inf inputs); a warning for
    an overflow of finite values still shows.
    """
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with np.errstate(invalid="ignore"):
            return fn(*args, **kwargs)
    return wrapper
