"""Hypothesis strategies and settings shared by the NumPy-core tests.

Shapes are small on purpose (the whole core suite must run in about 90 s on 2 cores) but cover
the edge cases that break tiling: N = 1, N not a multiple of the block, Nq != Nk, d = 1,
blocks larger than N, causal. Inputs are drawn fresh from a seeded NumPy generator; tests/conftest.py
derandomizes Hypothesis, so every run draws the same examples.
"""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, example, settings
from hypothesis import strategies as st

CORE = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def attention_shapes(draw, max_n: int = 24, max_d: int = 6, max_block: int = 32, batch: bool = True):
    """A dict: batch_shape, nq, nk, d, dv, block_q, block_k, causal."""
    batch_shape = tuple(draw(st.lists(st.integers(1, 2), max_size=2))) if batch else ()
    return dict(
        batch_shape=batch_shape,
        nq=draw(st.integers(1, max_n)),
        nk=draw(st.integers(1, max_n)),
        d=draw(st.integers(1, max_d)),
        dv=draw(st.integers(1, max_d)),
        block_q=draw(st.integers(1, max_block)),
        block_k=draw(st.integers(1, max_block)),
        causal=draw(st.booleans()),
    )


seeds = st.integers(0, 2**32 - 1)

# Edge cases (N = 1, d = 1, ragged tiles, blocks larger than N, keys no query sees), run every time
# on top of the random draws.
EDGE_SHAPES = [
    dict(batch_shape=(), nq=1, nk=1, d=1, dv=1, block_q=1, block_k=1, causal=True),  # N = 1, d = 1
    dict(batch_shape=(2,), nq=7, nk=13, d=3, dv=2, block_q=3, block_k=4, causal=True),  # ragged, Nq < Nk
    dict(batch_shape=(), nq=13, nk=5, d=1, dv=3, block_q=4, block_k=2, causal=True),  # ragged, Nq > Nk, d = 1
    dict(batch_shape=(1, 2), nq=5, nk=3, d=2, dv=2, block_q=32, block_k=32, causal=False),  # blocks > N
    dict(batch_shape=(), nq=1, nk=9, d=4, dv=4, block_q=2, block_k=2, causal=True),  # keys no query sees
    dict(batch_shape=(), nq=9, nk=9, d=5, dv=5, block_q=4, block_k=3, causal=False),  # ragged, Nq = Nk
]


def edge_cases(**fixed):
    """Decorator: add every EDGE_SHAPES entry as a hypothesis @example (with seed 7 and `fixed`)."""
    def apply(test):
        for shape in EDGE_SHAPES:
            test = example(shape=shape, seed=7, **fixed)(test)
        return test
    return apply


def random_qkv(shape: dict, seed: int, dtype=np.float64, scale: float = 1.0):
    """Fresh standard-normal q, k, v (times `scale`) for a shape dict from :func:`attention_shapes`."""
    rng = np.random.default_rng(seed)
    b = shape["batch_shape"]
    q = (scale * rng.standard_normal((*b, shape["nq"], shape["d"]))).astype(dtype)
    k = (scale * rng.standard_normal((*b, shape["nk"], shape["d"]))).astype(dtype)
    v = rng.standard_normal((*b, shape["nk"], shape["dv"])).astype(dtype)
    return q, k, v


def random_do(shape: dict, seed: int, dtype=np.float64):
    """A fresh standard-normal upstream gradient dO (..., Nq, dv) for a shape dict."""
    rng = np.random.default_rng(seed + 1)
    return rng.standard_normal((*shape["batch_shape"], shape["nq"], shape["dv"])).astype(dtype)
