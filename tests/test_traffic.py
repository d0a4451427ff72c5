"""Closed-form HBM traffic equals traced runs exactly; the paper's SRAM-size scaling holds."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashlab.tiled import num_blocks, tiled_attention, tiled_attention_backward, tiled_attention_fa1
from flashlab.tracer import TrafficTracer
from flashlab.traffic import (Traffic, backward_traffic, fa1_forward_traffic, fa2_forward_traffic,
                              flash_hbm_accesses, io_lower_bound, naive_backward_traffic, naive_traffic,
                              paper_block_sizes, standard_hbm_accesses)
from strategies import CORE, attention_shapes, edge_cases, random_do, random_qkv, seeds

sizes = st.sampled_from([(None, None), (2, None), (2, 4), (4, 4), (1, 1)])  # (itemsize, stat_itemsize)


def formula_args(shape, itemsize, stat_itemsize, dims):
    batch = int(np.prod(shape["batch_shape"], dtype=int))
    return dict(nq=shape["nq"], nk=shape["nk"], d=shape["d"], dv=shape["dv"], block_q=shape["block_q"],
                block_k=shape["block_k"], causal=shape["causal"], itemsize=itemsize or dims,
                stat_itemsize=stat_itemsize, batch=batch)


def assert_same(tracer: TrafficTracer, t: Traffic, what: str):
    assert tracer.bytes_by_tensor() == t.by_tensor, f"{what}: traced {tracer.bytes_by_tensor()} != formula {t.by_tensor}"
    assert (tracer.hbm_read_bytes, tracer.hbm_write_bytes) == (t.read_bytes, t.write_bytes), what
    assert tracer.hbm_bytes == t.total


@CORE
@given(shape=attention_shapes(), seed=seeds, sz=sizes)
@edge_cases(sz=(2, 4))
def test_traced_forward_traffic_equals_the_formulas(shape, seed, sz):
    q, k, v = random_qkv(shape, seed)
    args = formula_args(shape, *sz, dims=q.itemsize)
    for fn, formula in ((tiled_attention, fa2_forward_traffic), (tiled_attention_fa1, fa1_forward_traffic)):
        tracer = TrafficTracer(*sz)
        fn(q, k, v, causal=shape["causal"], block_q=shape["block_q"], block_k=shape["block_k"], tracer=tracer)
        assert_same(tracer, formula(**args), f"{fn.__name__} {shape} sizes={sz}")


@CORE
@given(shape=attention_shapes(), seed=seeds, sz=sizes)
@edge_cases(sz=(2, 4))
def test_traced_backward_traffic_equals_the_formula(shape, seed, sz):
    q, k, v = random_qkv(shape, seed)
    o, lse = tiled_attention(q, k, v, causal=shape["causal"], return_lse=True)
    tracer = TrafficTracer(*sz)
    tiled_attention_backward(q, k, v, o, lse, random_do(shape, seed), causal=shape["causal"],
                             block_q=shape["block_q"], block_k=shape["block_k"], tracer=tracer)
    assert_same(tracer, backward_traffic(**formula_args(shape, *sz, dims=q.itemsize)), f"backward {shape} sizes={sz}")


@pytest.mark.parametrize("nq,nk,bq,bk", [(128, 128, 64, 64), (100, 70, 16, 32), (1, 9, 4, 4)])
def test_non_causal_fa2_reads_keys_once_per_query_block(nq, nk, bq, bk):
    d, dv, size = 8, 4, 2
    t = fa2_forward_traffic(nq, nk, d, dv, bq, bk, itemsize=size, stat_itemsize=4, batch=3)
    tq = num_blocks(nq, bq)
    assert t.read_bytes == 3 * size * (nq * d + tq * nk * (d + dv))
    assert t.write_bytes == 3 * (size * nq * dv + 4 * nq)


def test_naive_traffic_scale_pass_reads_and_writes_s_once_more():
    nq, nk, d = 48, 80, 16
    plain, scaled = naive_traffic(nq, nk, d, batch=3), naive_traffic(nq, nk, d, batch=3, scale_pass=True)
    extra = {key: scaled.by_tensor[key] - plain.by_tensor.get(key, 0) for key in scaled.by_tensor}
    assert {key: b for key, b in extra.items() if b} == {("S", "read"): 3 * nq * nk * 2, ("S", "write"): 3 * nq * nk * 2}
    with pytest.raises(TypeError, match="scale_pass"):
        naive_traffic(nq, nk, d, scale_pass=1)


def test_naive_traffic_counts_s_and_p_twice_each():
    nq, nk, d, dv = 300, 200, 16, 8
    t = naive_traffic(nq, nk, d, dv, itemsize=2, batch=2)
    for tensor in ("S", "P"):
        assert t.by_tensor[(tensor, "write")] == t.by_tensor[(tensor, "read")] == 2 * 2 * nq * nk
    assert t.total == 2 * 2 * (nq * d + nk * d + nk * dv + nq * dv + 4 * nq * nk)
    assert naive_traffic(nq, nk, d, dv, causal=True) == naive_traffic(nq, nk, d, dv)


def test_naive_backward_reads_p_and_ds_twice():
    nq, nk, d = 50, 40, 8
    t = naive_backward_traffic(nq, nk, d, itemsize=1)
    assert t.by_tensor[("P", "read")] == t.by_tensor[("dS", "read")] == 2 * nq * nk
    assert t.by_tensor[("dP", "write")] == t.by_tensor[("dS", "write")] == t.by_tensor[("dP", "read")] == nq * nk
    assert t.total == 7 * nq * nk + 4 * nq * d + 4 * nk * d  # dO twice, Q, dQ; V, dV, K, dK


@pytest.mark.parametrize("n", [1024, 4096])
def test_flash_moves_less_than_naive_at_long_sequence(n):
    d = 64
    naive = naive_traffic(n, n, d).total
    fa2 = fa2_forward_traffic(n, n, d, block_q=128, block_k=64, stat_itemsize=4).total
    fa1 = fa1_forward_traffic(n, n, d, block_q=128, block_k=64, stat_itemsize=4).total
    assert fa2 < fa1 < naive, (fa2, fa1, naive)
    assert backward_traffic(n, n, d, block_q=64, block_k=128).total < naive_backward_traffic(n, n, d).total


def test_causal_reads_about_half_the_keys_of_non_causal():
    full = fa2_forward_traffic(4096, 4096, 64, causal=False).by_tensor[("K", "read")]
    causal = fa2_forward_traffic(4096, 4096, 64, causal=True).by_tensor[("K", "read")]
    assert 0.5 < causal / full < 0.52, causal / full


def test_paper_block_sizes_follow_section_3_2():
    assert paper_block_sizes(4 * 64 * 100, 64) == (64, 100)
    assert paper_block_sizes(4 * 64 * 100 + 1, 64) == (64, 101)  # ceil
    assert paper_block_sizes(1000, 128) == (2, 2)  # Br = min(Bc, d)


@pytest.mark.parametrize("d,m", [(64, 16 * 1024), (64, 32 * 1024), (128, 48 * 1024)])
def test_doubling_sram_about_halves_flash_traffic(d, m):
    n = 16384  # N d >> M
    ratio = flash_hbm_accesses(n, d, 2 * m) / flash_hbm_accesses(n, d, m)
    assert 0.45 < ratio < 0.55, f"doubling M from {m} elements gave traffic ratio {ratio:.3f}"


def test_standard_traffic_grows_as_n_squared_plus_nd():
    d = 64
    for n in (128, 1024, 8192):
        assert standard_hbm_accesses(n, d) == 4 * n * d + 4 * n * n
    assert 3.9 < standard_hbm_accesses(16384, d) / standard_hbm_accesses(8192, d) < 4.0


@pytest.mark.parametrize("n,d,m", [(1024, 64, 64), (1024, 64, 4096), (4096, 128, 128 * 1024), (512, 16, 8192)])
def test_lower_bound_is_below_flash_and_above_the_inputs(n, d, m):
    bound = io_lower_bound(n, d, m)
    assert 4 * n * d <= bound <= flash_hbm_accesses(n, d, m), (bound, flash_hbm_accesses(n, d, m))


@pytest.mark.parametrize("fn", [fa2_forward_traffic, fa1_forward_traffic, backward_traffic])
def test_traffic_formulas_reject_block_below_one(fn):
    with pytest.raises(ValueError, match="block_q=0"):
        fn(64, 64, 16, block_q=0)
    with pytest.raises(TypeError, match="nq"):
        fn(64.0, 64, 16)
