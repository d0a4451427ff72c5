"""naive_attention and naive_attention_backward against PyTorch (float64) on fresh random inputs."""
import numpy as np
import pytest
from hypothesis import given

from flashlab.reference import naive_attention, naive_attention_backward
from strategies import CORE, attention_shapes, edge_cases, random_do, random_qkv, seeds

torch = pytest.importorskip("torch")


def torch_attention(q, k, v, causal, scale):
    """float64 SDPA (math path on CPU); top-left causal, as the course's convention."""
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    o = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal, scale=scale)
    return tq, tk, tv, o


@CORE
@given(shape=attention_shapes(), seed=seeds)
@edge_cases()
def test_naive_forward_matches_torch_sdpa(shape, seed):
    q, k, v = random_qkv(shape, seed)
    o, lse = naive_attention(q, k, v, causal=shape["causal"], return_lse=True)
    _, _, _, expected = torch_attention(q, k, v, shape["causal"], None)
    np.testing.assert_allclose(o, expected.detach().numpy(), rtol=0, atol=1e-12)
    s = torch.tensor(q) @ torch.tensor(k).transpose(-1, -2) / np.sqrt(shape["d"])
    if shape["causal"]:
        s = s.masked_fill(torch.ones(shape["nq"], shape["nk"], dtype=torch.bool).triu(1), float("-inf"))
    np.testing.assert_allclose(lse, torch.logsumexp(s, dim=-1).numpy(), rtol=0, atol=1e-12)


@CORE
@given(shape=attention_shapes(), seed=seeds)
@edge_cases()
def test_naive_backward_matches_torch_autograd(shape, seed):
    q, k, v = random_qkv(shape, seed)
    do = random_do(shape, seed)
    scale = 0.3
    grads = naive_attention_backward(q, k, v, do, causal=shape["causal"], scale=scale)
    tq, tk, tv, o = torch_attention(q, k, v, shape["causal"], scale)
    o.backward(torch.tensor(do))
    for name, got, t in zip(("dq", "dk", "dv"), grads, (tq, tk, tv)):
        np.testing.assert_allclose(got, t.grad.numpy(), rtol=0, atol=1e-11, err_msg=name)


def test_causal_query_rows_see_only_earlier_keys():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((6, 4)), rng.standard_normal((9, 4)), rng.standard_normal((9, 3))
    o = naive_attention(q, k, v, causal=True)
    for i in range(6):  # row i must equal non-causal attention over keys 0..i only
        np.testing.assert_allclose(o[i], naive_attention(q[i:i + 1], k[:i + 1], v[:i + 1])[0], atol=1e-14)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_output_dtype_is_input_dtype(dtype):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 5, 4)).astype(dtype) for _ in range(3))
    o, lse = naive_attention(q, k, v, return_lse=True)
    assert o.dtype == dtype, f"output dtype {o.dtype} != input dtype {np.dtype(dtype)}"
    expected = naive_attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64))
    tol = {np.float16: 2e-3, np.float32: 1e-6, np.float64: 1e-14}[dtype]
    np.testing.assert_allclose(o.astype(np.float64), expected, atol=tol)
    assert np.all(np.isfinite(lse))


def test_large_scores_do_not_overflow():
    rng = np.random.default_rng(2)
    q, k, v = 300 * rng.standard_normal((7, 3)), 300 * rng.standard_normal((7, 3)), rng.standard_normal((7, 2))
    o = naive_attention(q, k, v)
    assert np.all(np.isfinite(o)), "naive attention overflowed on scores of order 1e5"
