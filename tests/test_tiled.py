"""Tiled FlashAttention forward (FA2 and FA1 loop orders) against naive attention."""
import tracemalloc

import numpy as np
import pytest
from hypothesis import given

from flashlab.reference import naive_attention
from flashlab.tiled import (causal_tile_skipped, first_q_block, kv_blocks_visited, num_blocks,
                            tiled_attention, tiled_attention_fa1)
from flashlab.tracer import TrafficTracer
from strategies import CORE, attention_shapes, edge_cases, random_qkv, seeds

FORWARDS = [tiled_attention, tiled_attention_fa1]


def _run(fn, q, k, v, shape, **kw):
    return fn(q, k, v, causal=shape["causal"], block_q=shape["block_q"], block_k=shape["block_k"], **kw)


@CORE
@given(shape=attention_shapes(), seed=seeds)
@edge_cases()
def test_tiled_forwards_match_naive_to_rounding_in_float64(shape, seed):
    q, k, v = random_qkv(shape, seed, scale=2.0)
    o_ref, lse_ref = naive_attention(q, k, v, causal=shape["causal"], return_lse=True)
    for fn in FORWARDS:
        o, lse = _run(fn, q, k, v, shape, return_lse=True)
        assert o.shape == o_ref.shape and lse.shape == lse_ref.shape
        err = max(np.abs(o - o_ref).max(), np.abs(lse - lse_ref).max())
        assert err <= 1e-10, f"{fn.__name__}: max abs error {err:.3g} > 1e-10 for {shape}"


@pytest.mark.parametrize("fn", FORWARDS)
@pytest.mark.parametrize("causal", [False, True])
def test_tiled_matches_naive_in_float32_with_ragged_tiles(fn, causal):
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((2, n, 8)).astype(np.float32) for n in (37, 53, 53))
    o = fn(q, k, v, causal=causal, block_q=16, block_k=12)
    assert o.dtype == np.float32
    np.testing.assert_allclose(o, naive_attention(q, k, v, causal=causal), rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("fn", FORWARDS)
def test_float16_inputs_give_float16_outputs_close_to_float64(fn):
    rng = np.random.default_rng(6)
    q, k, v = (rng.standard_normal((9, 4)) for _ in range(3))
    o = fn(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16), block_q=4, block_k=4)
    assert o.dtype == np.float16
    np.testing.assert_allclose(o.astype(np.float64), naive_attention(q, k, v), atol=3e-3)


@pytest.mark.parametrize("fn", FORWARDS)
def test_tiled_never_allocates_an_nq_by_nk_array(fn):
    rng = np.random.default_rng(7)
    n, d, block = 768, 8, 32
    q, k, v = (rng.standard_normal((n, d)) for _ in range(3))
    tracemalloc.start()
    try:
        fn(q, k, v, causal=True, block_q=block, block_k=block)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    full_matrix = n * n * 8  # bytes of one float64 Nq x Nk array
    assert peak < full_matrix / 10, f"peak {peak} B is not far below one Nq x Nk array ({full_matrix} B)"


def test_loop_bounds_agree_with_the_causal_skip_rule():
    for nq in range(1, 14):
        for nk in range(1, 14):
            for bq in range(1, 6):
                for bk in range(1, 6):
                    kept = {(i, j) for i in range(num_blocks(nq, bq)) for j in range(num_blocks(nk, bk))
                            if not causal_tile_skipped(i, j, bq, bk, nq)}
                    by_rows = {(i, j) for i in range(num_blocks(nq, bq))
                               for j in range(kv_blocks_visited(i, nq, nk, bq, bk, True))}
                    by_cols = {(i, j) for j in range(num_blocks(nk, bk))
                               for i in range(first_q_block(j, nq, bq, bk, True), num_blocks(nq, bq))}
                    assert kept == by_rows == by_cols, f"nq={nq} nk={nk} block_q={bq} block_k={bk}"


def test_skipped_tiles_hold_only_masked_scores_and_kept_tiles_some_visible_one():
    nq, nk = 11, 17
    for bq in range(1, 7):
        for bk in range(1, 7):
            for i in range(num_blocks(nq, bq)):
                for j in range(num_blocks(nk, bk)):
                    rows = range(i * bq, min((i + 1) * bq, nq))
                    cols = range(j * bk, min((j + 1) * bk, nk))
                    visible = any(c <= r for r in rows for c in cols)
                    assert visible != causal_tile_skipped(i, j, bq, bk, nq), f"tile ({i}, {j}) bq={bq} bk={bk}"


@pytest.mark.parametrize("fn,algorithm", [(tiled_attention, "fa2_forward"), (tiled_attention_fa1, "fa1_forward")])
def test_traced_tile_steps_are_exactly_the_unskipped_tiles(fn, algorithm):
    rng = np.random.default_rng(8)
    nq, nk, bq, bk = 19, 23, 5, 4
    q, k, v = rng.standard_normal((2, nq, 3)), rng.standard_normal((2, nk, 3)), rng.standard_normal((2, nk, 2))
    tracer = TrafficTracer()
    fn(q, k, v, causal=True, block_q=bq, block_k=bk, tracer=tracer)
    assert tracer.meta["algorithm"] == algorithm and tracer.meta["batch"] == 2
    tiles = [(s.batch, s.q_block, s.k_block) for s in tracer.steps if s.q_block is not None and s.k_block is not None]
    expected = [(b, i, j) for b in range(2) for i in range(num_blocks(nq, bq)) for j in range(num_blocks(nk, bk))
                if not causal_tile_skipped(i, j, bq, bk, nq)]
    assert sorted(tiles) == sorted(expected) and len(tiles) == len(set(tiles))
    for step in tracer.steps:  # every resident range lies inside its tensor
        for r in step.resident:
            assert 0 <= r.rows[0] < r.rows[1] and 0 <= r.cols[0] < r.cols[1], (step.label, r)
    for e in tracer.events:
        limit = {"Q": nq, "O": nq, "lse": nq, "m": nq, "l": nq, "K": nk, "V": nk}[e.tensor]
        assert 0 <= e.rows[0] < e.rows[1] <= limit, e
        assert 0 <= e.batch < 2


def test_fa2_reads_each_query_block_once_and_writes_each_output_block_once():
    rng = np.random.default_rng(9)
    q, k, v = (rng.standard_normal((13, 4)) for _ in range(3))
    tracer = TrafficTracer()
    tiled_attention(q, k, v, block_q=4, block_k=3, tracer=tracer)
    q_reads = [e.rows for e in tracer.events if e.tensor == "Q"]
    o_writes = [e.rows for e in tracer.events if e.tensor == "O"]
    assert q_reads == o_writes == [(0, 4), (4, 8), (8, 12), (12, 13)]


@pytest.mark.parametrize("fn", FORWARDS)
def test_blocks_larger_than_the_sequence_give_one_tile(fn):
    rng = np.random.default_rng(10)
    q, k, v = rng.standard_normal((3, 2)), rng.standard_normal((5, 2)), rng.standard_normal((5, 1))
    tracer = TrafficTracer()
    o = fn(q, k, v, block_q=64, block_k=128, tracer=tracer)
    np.testing.assert_allclose(o, naive_attention(q, k, v), atol=1e-14)
    assert [(s.q_block, s.k_block) for s in tracer.steps if s.k_block is not None and s.q_block is not None] == [(0, 0)]


@pytest.mark.parametrize("causal", [False, True])
def test_default_blocks_match_naive_on_a_multi_head_batch(causal):
    rng = np.random.default_rng(14)
    q, k, v = rng.standard_normal((2, 3, 200, 32)), rng.standard_normal((2, 3, 150, 32)), rng.standard_normal((2, 3, 150, 16))
    o_ref, lse_ref = naive_attention(q, k, v, causal=causal, return_lse=True)
    for fn in FORWARDS:  # default block_q = block_k = 64: ragged in both directions
        o, lse = fn(q, k, v, causal=causal, return_lse=True)
        assert np.abs(o - o_ref).max() <= 1e-10 and np.abs(lse - lse_ref).max() <= 1e-10, fn.__name__
