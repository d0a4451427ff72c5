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


# ---------------------------------------------------------------- the Triton backward kernels
# On CPU these run in Triton's interpreter (tests/conftest.py); on a CUDA machine, compiled.

def _device():
    return "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("rung,dtype,d", [("bwd_two_pass", "float16", 80), ("bwd_two_pass", "bfloat16", 80),
                                           ("bwd_two_pass", "float16", 128), ("bwd_two_pass", "bfloat16", 128),
                                           ("bwd_fused", "float16", 128), ("bwd_fused", "bfloat16", 64)])
def test_gradients_cancel_exactly_where_a_query_sees_one_key(rung, dtype, d):
    # Nq = 1, causal: the query sees key 0 only, so P = 1 there and dS = P * (dP - D) = 0 exactly:
    # dK and dQ are exactly 0 in float64 (and in PyTorch). D = rowsum(dO * O) and dP = dO . v_0
    # must then be summed alike, or their rounding (about 1e-5 on an H200's tensor cores) is left.
    # In the interpreter both are the same NumPy product, so the result must be exactly 0 there.
    from flashlab.attnspec import AttnSpec
    from flashlab.kernels import _mode, ladder
    from flashlab.kernels.attention import best_forward

    dt, dev, spec = getattr(torch, dtype), _device(), AttnSpec(causal=True)
    g = torch.Generator().manual_seed(d + len(dtype))
    q, do = (torch.randn(1, 2, 1, d, generator=g).to(dev, dt) for _ in range(2))  # (B, H, 1, d)
    k, v = (torch.randn(1, 2, 239, d, generator=g).to(dev, dt) for _ in range(2))  # (B, H, 239, d)
    assert ladder.resolve_backward(rung, q, k, spec) == rung
    o, lse = best_forward(q, k, v, spec)
    dq, dk, dv = ladder.run_backward(rung, q, k, v, o, lse, do, spec)
    bound = 0.0 if _mode.is_interpreter() else 1e-5
    for name, grad in (("dk", dk), ("dq", dq)):
        worst = grad.double().abs().max().item()
        assert worst <= bound, f"{rung}: {name} should cancel to 0 (one visible key), max |{name}| = {worst:.3g} > {bound}"
    assert dv[:, :, 0].double().abs().max() > 0, "dV of the visible key is dO, not 0"


@pytest.mark.parametrize("h,hkv,causal", [(4, 1, False), (4, 2, True)])
def test_grouped_query_backward_sums_dk_dv_over_the_group(h, hkv, causal):
    # the dK/dV program of kv head j loops over the query heads h // group == j; compare with
    # float64 autograd through an expanded k, v (fresh seeded inputs, ragged lengths)
    from flashlab.kernels.attention import allowed_error, attention_reference, flash_attention, max_error

    dev, seed = _device(), 31 * h + 7 * hkv + int(causal)
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, h, 37, 64, generator=g).to(dev, torch.float16)  # (B, H, Nq, d)
    k, v = (torch.randn(2, hkv, 29, 64, generator=g).to(dev, torch.float16) for _ in range(2))  # (B, Hkv, Nk, d)
    do = torch.randn(2, h, 37, 64, generator=g).to(dev, torch.float16)  # (B, H, Nq, d)
    mine = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    same = [t.clone().requires_grad_() for t in (q, k, v)]
    flash_attention(*mine, causal=causal).backward(do)
    attention_reference(*ref, causal=causal).backward(do.double())
    attention_reference(*same, causal=causal, upcast=False).backward(do)
    for name, a, r, p in zip("qkv", mine, ref, same):
        assert a.grad.shape == r.grad.shape, f"d{name} shape {tuple(a.grad.shape)}"
        err, allowed = max_error(a.grad, r.grad), allowed_error(r.grad, p.grad, ref[2].grad if name == "k" else None)
        assert err <= allowed, f"d{name} error {err:.3g} > allowed {allowed:.3g} (H={h}, Hkv={hkv}, causal={causal})"


@pytest.mark.parametrize("b,h,hkv,nq,nk,d,options", [
    (1, 2, 2, 37, 45, 64, dict(causal=False)),
    (2, 4, 2, 33, 20, 64, dict(causal=True)),
    (1, 2, 1, 40, 70, 128, dict(causal=True, causal_align="bottom_right", window=9)),
])
def test_one_pass_backward_matches_float64(b, h, hkv, nq, nk, d, options, monkeypatch):
    # bwd_fused (flash_bwd_hopper): dK/dV per key block, dQ added by atomics; fp16 (the interpreter's
    # bf16 dot is wrong for the Hopper forward that makes o and lse here); poisoned dk, dv buffers
    from flashlab.attnspec import AttnSpec
    from flashlab.kernels import flash_bwd_hopper, flash_fwd_hopper
    from flashlab.kernels.attention import allowed_error, attention_reference, max_error

    monkeypatch.setenv("FLASHLAB_POISON", "1")
    spec, dev = AttnSpec(**options), _device()
    g = torch.Generator().manual_seed(1000 * nq + nk)
    q, do = (torch.randn(b, h, nq, d, generator=g).to(dev, torch.float16) for _ in range(2))  # (B, H, Nq, d)
    k, v = (torch.randn(b, hkv, nk, d, generator=g).to(dev, torch.float16) for _ in range(2))  # (B, Hkv, Nk, d)
    assert flash_bwd_hopper.supports(q, k, spec)
    o, lse = flash_fwd_hopper.forward(q, k, v, spec)
    grads = flash_bwd_hopper.backward(q, k, v, o, lse, do, spec)
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    same = [t.clone().requires_grad_() for t in (q, k, v)]
    attention_reference(*ref, spec=spec).backward(do.double())
    attention_reference(*same, spec=spec, upcast=False).backward(do)
    for name, got, r, p in zip("qkv", grads, ref, same):
        assert got.shape == r.grad.shape and got.dtype == torch.float16, f"d{name} {tuple(got.shape)} {got.dtype}"
        err, allowed = max_error(got, r.grad), allowed_error(r.grad, p.grad, ref[2].grad if name == "k" else None)
        assert err <= allowed, f"d{name} error {err:.3g} > allowed {allowed:.3g} ({options}, H={h}, Hkv={hkv})"


def test_backward_rungs_resolve_and_refuse_by_name():
    from flashlab.attnspec import AttnSpec
    from flashlab.kernels import ladder

    q = torch.zeros(1, 2, 8, 64, dtype=torch.float16, device=_device())  # (B, H, N, d)
    assert ladder.resolve_backward("bwd_fused", q, q, AttnSpec(causal=True)) == "bwd_fused"
    assert ladder.resolve_backward("bwd_fused", q.float(), q.float(), AttnSpec()) == "bwd_two_pass"  # fp32
    assert ladder.resolve_backward("bwd_fused", q[..., :32], q[..., :32], AttnSpec()) == "bwd_two_pass"  # d=32
    with pytest.raises(ValueError, match="bwd_three_pass"):
        ladder.resolve_backward("bwd_three_pass", q, q, AttnSpec())


@pytest.mark.gpu
def test_concurrent_dq_stream_gives_the_same_gradients_as_one_stream():
    # BwdConfig(concurrent=True) runs the dQ kernel on a second CUDA stream beside dK/dV: the same
    # kernels, so the same bits, if the streams are joined correctly (a missing wait shows as NaN
    # from the poisoned buffers or as a difference)
    from dataclasses import replace

    from flashlab.kernels import flash_bwd, flash_fwd_hopper

    g = torch.Generator(device="cuda").manual_seed(5)
    q, do = (torch.randn(2, 8, 1000, 128, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(2, 2, 1000, 128, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(2))
    o, lse = flash_fwd_hopper.forward(q, k, v, True)
    cfg = flash_bwd.default_bwd_config(128, torch.bfloat16)
    one = flash_bwd.backward(q, k, v, o, lse, do, True, config=cfg)
    two = flash_bwd.backward(q, k, v, o, lse, do, True, config=replace(cfg, concurrent=True))
    for name, a, b in zip(("dq", "dk", "dv"), one, two):
        assert torch.equal(a, b), f"{name} differs with the dQ kernel on a second stream"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="the copy engine's tile reduction needs a CUDA GPU")
@pytest.mark.parametrize("reduce", ["atomics", "tma"])
@pytest.mark.parametrize("nq, nk, causal", [(1000, 1000, True), (333, 517, False), (130, 64, True)])
@pytest.mark.parametrize("d", [64, 128])
def test_one_pass_backward_dq_reductions_match_float64_on_gpu(reduce, nq, nk, causal, d):
    # the two ways bwd_fused adds dQ's per-key-block shares (relaxed atomics, the copy engine's
    # tile reduce) on GQA inputs, ragged Nq and Nk included
    from flashlab.kernels import flash_bwd_hopper, flash_fwd_hopper
    from flashlab.kernels.attention import allowed_error, attention_reference, max_error

    cfg = flash_bwd_hopper.FusedBwdConfig(64, 128, 8, 2, tma_reduce=reduce != "atomics")
    g = torch.Generator(device="cuda").manual_seed(nq + nk + d)
    q, do = (torch.randn(2, 4, nq, d, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(2, 2, nk, d, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(2))
    o, lse = flash_fwd_hopper.forward(q, k, v, causal)
    grads = flash_bwd_hopper.backward(q, k, v, o, lse, do, causal, config=cfg)
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    same = [t.clone().requires_grad_() for t in (q, k, v)]
    attention_reference(*ref, causal=causal).backward(do.double())
    attention_reference(*same, causal=causal, upcast=False).backward(do)
    for name, got, r, p in zip("qkv", grads, ref, same):
        err, allowed = max_error(got, r.grad), allowed_error(r.grad, p.grad, ref[2].grad if name == "k" else None)
        assert err <= allowed, f"d{name} error {err:.3g} > allowed {allowed:.3g} ({reduce}, Nq={nq}, Nk={nk})"
