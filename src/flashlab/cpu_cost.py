"""Naive attention measured on this CPU: peak extra memory and time per call (notebook 01).

The memory is what NumPy allocates during one call, recorded by ``tracemalloc``: S and P, the
N x N arrays of standard attention (FlashAttention paper, Algorithm 0), and their temporaries.

The time is the fastest of at least ``repeats`` timed calls, more until a quarter of a second
has passed, after one untimed warm-up call. Timed alone, the first call of a size also pays for
work that is not attention (BLAS starting its threads, the first touch of fresh pages): on 2
shared cores that made N = 256 print 5.4 ms against 2.5 ms at N = 512. The fastest call rather
than the median, because other processes only ever add time (the advice of Python's ``timeit``
documentation). No method rescues a machine whose cores are busy for the whole run: with 4
runnable processes on 2 cores, every call at N = 256 took 25-40 ms against 0.4-0.6 ms on an idle
machine. Times are this machine's, indicative only; the GPU numbers are in ``benchmarks/results/``.
"""
from __future__ import annotations

import time
import tracemalloc
from dataclasses import dataclass
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class NaiveCost:
    n: int  # sequence length (Nq = Nk)
    d: int  # head dimension
    peak_bytes: int  # peak extra memory of one call (tracemalloc)
    ms: float  # wall time of the fastest timed call, milliseconds
    repeats: int  # timed calls at least (after one untimed warm-up); more within a quarter of a second


def _check_positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r} must be a positive int")


def peak_extra_bytes(fn: Callable, *args, **kwargs) -> int:
    """Peak bytes allocated through Python's allocators (NumPy's included) during ``fn(*args, **kwargs)``."""
    already = tracemalloc.is_tracing()
    if not already:
        tracemalloc.start()
    tracemalloc.reset_peak()
    before = tracemalloc.get_traced_memory()[0]
    try:
        fn(*args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        if not already:
            tracemalloc.stop()
    return peak - before


def best_ms(fn: Callable, *args, repeats: int = 5, min_time_s: float = 0.25, max_calls: int = 1000,
            **kwargs) -> float:
    """Wall time of the fastest call of ``fn(*args, **kwargs)``, in ms, after one untimed warm-up call.

    At least ``repeats`` calls are timed, and more until ``min_time_s`` seconds have passed (at
    most ``max_calls``), as ``timeit``'s autorange does: a fast call is timed many times, so one
    of them runs while no other process holds the cores.
    """
    _check_positive_int("repeats", repeats)
    _check_positive_int("max_calls", max_calls)
    if not isinstance(min_time_s, (int, float)) or isinstance(min_time_s, bool) or min_time_s < 0:
        raise ValueError(f"min_time_s={min_time_s!r} must be a number of seconds >= 0")
    fn(*args, **kwargs)  # warm-up: not timed
    times = []
    began = time.perf_counter()
    while len(times) < max(repeats, 1) or (time.perf_counter() - began < min_time_s and len(times) < max_calls):
        start = time.perf_counter()
        fn(*args, **kwargs)
        times.append((time.perf_counter() - start) * 1e3)
    return min(times)


def naive_cost(sizes, d: int = 64, repeats: int = 5, seed: int = 0) -> list[NaiveCost]:
    """Peak extra memory and time (fastest call) of ``flashlab.naive_attention(x, x, x)``, x of shape (n, d) float32, per n."""
    from .reference import naive_attention

    _check_positive_int("d", d)
    _check_positive_int("repeats", repeats)
    sizes = list(sizes)
    for n in sizes:
        _check_positive_int("each of sizes", n)
    rng = np.random.default_rng(seed)
    out = []
    for n in sizes:
        x = rng.standard_normal((n, d), dtype=np.float32)  # (n, d): Q = K = V
        peak = peak_extra_bytes(naive_attention, x, x, x)
        out.append(NaiveCost(n, d, peak, best_ms(naive_attention, x, x, x, repeats=repeats), repeats))
    return out


def naive_cost_table(sizes, d: int = 64, repeats: int = 5, seed: int = 0) -> str:
    """:func:`naive_cost` as text: peak memory, as a multiple of one N x N float32 matrix, and time."""
    from .viz.style import format_bytes

    rows = naive_cost(sizes, d=d, repeats=repeats, seed=seed)
    lines = [f"naive attention on this CPU, one head, d = {d}, float32; time: the fastest of at least "
             f"{repeats} calls (more within 0.25 s) after an untimed warm-up"]
    for r in rows:
        lines.append(f"N = {r.n:>5}: peak extra memory {format_bytes(r.peak_bytes):>10} "
                     f"({r.peak_bytes / (r.n * r.n * 4):.1f} x one N x N float32 matrix), {r.ms:7.1f} ms")
    return "\n".join(lines)
