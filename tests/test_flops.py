"""FLOP counts: traced tile FLOPs equal the formulas; tiling leaves the math unchanged."""
import numpy as np
import pytest
from hypothesis import given

from flashlab.flops import attention_flops, computed_area, softmax_flops
from flashlab.tiled import (causal_tile_skipped, num_blocks, tiled_attention, tiled_attention_backward,
                            tiled_attention_fa1)
from flashlab.tracer import TrafficTracer
from strategies import CORE, attention_shapes, edge_cases, random_do, random_qkv, seeds


def _args(shape):
    batch = int(np.prod(shape["batch_shape"], dtype=int))
    return dict(nq=shape["nq"], nk=shape["nk"], d=shape["d"], dv=shape["dv"], causal=shape["causal"],
                block_q=shape["block_q"], block_k=shape["block_k"], batch=batch)


@CORE
@given(shape=attention_shapes(), seed=seeds)
@edge_cases()
def test_traced_flops_equal_the_formula_forward_and_backward(shape, seed):
    q, k, v = random_qkv(shape, seed)
    kw = dict(causal=shape["causal"], block_q=shape["block_q"], block_k=shape["block_k"])
    expected_fwd = attention_flops(**_args(shape), pass_="forward")
    for fn in (tiled_attention, tiled_attention_fa1):
        tracer = TrafficTracer()
        fn(q, k, v, tracer=tracer, **kw)
        assert tracer.flops == expected_fwd, f"{fn.__name__}: traced {tracer.flops} != {expected_fwd}"
    o, lse = tiled_attention(q, k, v, causal=shape["causal"], return_lse=True)
    tracer = TrafficTracer()
    tiled_attention_backward(q, k, v, o, lse, random_do(shape, seed), tracer=tracer, **kw)
    assert tracer.flops == attention_flops(**_args(shape), pass_="backward")


@CORE
@given(shape=attention_shapes(max_n=40, batch=False))
def test_computed_area_counts_entries_of_unskipped_tiles(shape):
    nq, nk, bq, bk = shape["nq"], shape["nk"], shape["block_q"], shape["block_k"]
    brute = sum((min((i + 1) * bq, nq) - i * bq) * (min((j + 1) * bk, nk) - j * bk)
                for i in range(num_blocks(nq, bq)) for j in range(num_blocks(nk, bk))
                if not causal_tile_skipped(i, j, bq, bk, nq))
    assert computed_area(nq, nk, bq, bk, causal=True) == brute
    assert computed_area(nq, nk, bq, bk, causal=False) == nq * nk
    visible = sum(min(i + 1, nk) for i in range(nq))  # entries a causal query row actually sees
    assert visible <= brute <= nq * nk


def test_non_causal_tiled_flops_equal_naive_flops():
    for nq, nk, d, dv in [(1024, 1024, 64, 64), (100, 37, 16, 8)]:
        naive = attention_flops(nq, nk, d, dv)
        assert naive == 2 * nq * nk * (d + dv)
        assert attention_flops(nq, nk, d, dv, block_q=64, block_k=32) == naive


def test_causal_tiled_forward_does_a_bit_over_half_the_naive_flops():
    naive = attention_flops(4096, 4096, 64, causal=True)
    tiled = attention_flops(4096, 4096, 64, causal=True, block_q=128, block_k=64)
    assert naive == attention_flops(4096, 4096, 64), "naive causal still computes the full matrix"
    assert 0.5 < tiled / naive < 0.52, tiled / naive


def test_backward_flops_count_four_naive_and_five_tiled_matmuls():
    n, d = 512, 64
    fwd = attention_flops(n, n, d)
    assert attention_flops(n, n, d, pass_="backward") == 2 * fwd  # 4 matmuls vs 2
    assert attention_flops(n, n, d, pass_="backward", block_q=64, block_k=64) == 5 * fwd // 2  # recompute S


def test_softmax_flops_are_five_per_computed_score():
    assert softmax_flops(100, 80, batch=2) == 5 * 100 * 80 * 2
    assert softmax_flops(100, 80, causal=True, block_q=10, block_k=10) == 5 * computed_area(100, 80, 10, 10, True)


@pytest.mark.parametrize("kwargs,match", [(dict(pass_="sideways"), "pass_"), (dict(block_q=64), "block_q"),
                                          (dict(block_k=0, block_q=4), "block_k=0"), (dict(dv=0), "dv=0")])
def test_flop_counts_reject_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        attention_flops(64, 64, 16, **kwargs)
