"""FlashAttention-2 backward against float64 torch autograd and the naive backward."""
import tracemalloc

import numpy as np
import pytest
from hypothesis import given

from flashlab.reference import naive_attention, naive_attention_backward
from flashlab.tiled import tiled_attention, tiled_attention_backward
from strategies import CORE, attention_shapes, edge_cases, random_do, random_qkv, seeds

torch = pytest.importorskip("torch")


def tiled_grads(q, k, v, do, causal, scale, block_q, block_k):
    o, lse = tiled_attention(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k, return_lse=True)
    return tiled_attention_backward(q, k, v, o, lse, do, causal=causal, scale=scale, block_q=block_q, block_k=block_k)


@CORE
@given(shape=attention_shapes(), seed=seeds)
@edge_cases()
def test_tiled_backward_matches_float64_autograd(shape, seed):
    q, k, v = random_qkv(shape, seed, scale=1.5)
    do = random_do(shape, seed)
    scale = 1.0 / np.sqrt(shape["d"]) if seed % 2 else 0.7
    grads = tiled_grads(q, k, v, do, shape["causal"], scale, shape["block_q"], shape["block_k"])
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    o = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=shape["causal"], scale=scale)
    o.backward(torch.tensor(do))
    for name, got, t in zip(("dq", "dk", "dv"), grads, (tq, tk, tv)):
        assert got.shape == tuple(t.shape), name
        err = np.abs(got - t.grad.numpy()).max()
        assert err <= 1e-10, f"{name}: max abs error {err:.3g} vs torch autograd for {shape}"


@pytest.mark.parametrize("causal", [False, True])
def test_tiled_backward_matches_naive_backward_in_float32(causal):
    rng = np.random.default_rng(11)
    q, k, v, do = (rng.standard_normal((2, n, 8)).astype(np.float32) for n in (29, 41, 41, 29))
    got = tiled_grads(q, k, v, do, causal, None, 8, 16)
    want = naive_attention_backward(q, k, v, do, causal=causal)
    for name, a, b in zip(("dq", "dk", "dv"), got, want):
        assert a.dtype == np.float32, name
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=name)


def test_keys_no_query_sees_get_zero_gradients():
    rng = np.random.default_rng(12)
    q, k, v, do = rng.standard_normal((3, 4)), rng.standard_normal((9, 4)), rng.standard_normal((9, 2)), \
        rng.standard_normal((3, 2))
    dq, dk, dv = tiled_grads(q, k, v, do, True, None, 2, 2)
    assert np.all(dk[3:] == 0) and np.all(dv[3:] == 0), "keys 3.. are after every query: zero gradient"
    np.testing.assert_allclose(dk, naive_attention_backward(q, k, v, do, causal=True)[1], atol=1e-13)


def test_backward_never_allocates_an_nq_by_nk_array():
    rng = np.random.default_rng(13)
    n, d = 512, 8
    q, k, v, do = (rng.standard_normal((n, d)) for _ in range(4))
    o, lse = naive_attention(q, k, v, return_lse=True)
    tracemalloc.start()
    try:
        tiled_attention_backward(q, k, v, o, lse, do, block_q=32, block_k=32)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < n * n * 8 / 4, f"peak {peak} B is not far below one float64 Nq x Nk array ({n * n * 8} B)"
