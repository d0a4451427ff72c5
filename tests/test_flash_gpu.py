"""FlashAttention compiled on a CUDA GPU: what the CPU interpreter cannot show.

The interpreter accepts what a GPU rejects (dot tiles under 16, too much shared memory), computes
fp32 dots exactly where a GPU uses tf32 unless told otherwise, and runs programs one at a time so
races never show. These tests run the compiled kernels, with outputs poisoned with NaN first
(``FLASHLAB_POISON=1``), against the float64 reference under the flash-attention rule. They are
skipped where there is no CUDA GPU (tests/conftest.py); benchmarks/gpu_sweep.py is the full sweep.
"""
import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = pytest.mark.gpu

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}


def _run(B, H, Hkv, Nq, Nk, d, dtype, causal, forward=None):
    from flashlab.kernels.attention import allowed_error, attention_reference, flash_attention, max_error

    seed = random.randrange(2**31)
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, H, Nq, d, device="cuda", generator=g).to(dtype)  # (B, H, Nq, d)
    k = torch.randn(B, Hkv, Nk, d, device="cuda", generator=g).to(dtype)  # (B, Hkv, Nk, d)
    v = torch.randn(B, Hkv, Nk, d, device="cuda", generator=g).to(dtype)  # (B, Hkv, Nk, d)
    where = f"(seed={seed}, q {tuple(q.shape)}, k {tuple(k.shape)}, {dtype}, causal={causal})"
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    pt_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = attention_reference(*ref_leaves, causal=causal)
    pt = attention_reference(*pt_leaves, causal=causal, upcast=False)
    if forward is not None:  # a forward rung only
        o, lse = forward(q, k, v, causal, None)
        torch.cuda.synchronize()
        assert max_error(o, ref) <= allowed_error(ref, pt), f"output error {max_error(o, ref):.3g} {where}"
        return
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = flash_attention(*leaves, causal=causal)
    do = torch.randn(out.shape, device="cuda", generator=g).to(dtype)
    out.backward(do)
    ref.backward(do.double())
    pt.backward(do)
    torch.cuda.synchronize()
    err, allowed = max_error(out, ref), allowed_error(ref, pt)
    assert err <= allowed, f"forward error {err:.3g} > allowed {allowed:.3g} {where}"
    for name, mine, r, p in zip("qkv", leaves, ref_leaves, pt_leaves):
        magnitude = ref_leaves[2].grad if name == "k" else None  # dK cancels to 0 when Nk = 1
        err, allowed = max_error(mine.grad, r.grad), allowed_error(r.grad, p.grad, magnitude)
        assert err <= allowed, f"d{name} error {err:.3g} > allowed {allowed:.3g} {where}"


@pytest.fixture(autouse=True)
def _poison(monkeypatch):
    from flashlab.kernels import _mode

    if _mode.is_interpreter():  # a CUDA machine with TRITON_INTERPRET=1 set: nothing here would be compiled
        pytest.skip("TRITON_INTERPRET=1: these tests check compiled GPU code, which the interpreter does not run")
    monkeypatch.setenv("FLASHLAB_POISON", "1")
    monkeypatch.setenv("FLASHLAB_AUTOTUNE", "0")  # default configs: autotuning every shape is slow


@pytest.mark.parametrize("dtype", list(DTYPES), ids=list(DTYPES))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [40, 64, 128, 256])
@pytest.mark.parametrize("Nq, Nk", [(128, 128), (1000, 1000), (17, 1000), (1000, 17)])
def test_compiled_flash_attention_matches_reference(dtype, causal, d, Nq, Nk):
    _run(2, 4, 2, Nq, Nk, d, DTYPES[dtype], causal)


@pytest.mark.parametrize("rung", ["v0_grid_bh", "v1_minimal", "v2_exp2_causal", "v3_autotuned", "v4_hopper",
                                  "v5_gluon_ws"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_every_compiled_rung_matches_reference(rung, causal, monkeypatch):
    from flashlab.kernels import ladder

    monkeypatch.setenv("FLASHLAB_AUTOTUNE", "1")  # v3 (and flash_attention) really autotune here
    _run(1, 8, 2, 1000, 1000, 128, torch.bfloat16, causal, forward=ladder.RUNGS[rung])


def test_compiled_kernels_reject_cpu_tensors_only_when_not_interpreting():
    from flashlab.kernels import _mode
    from flashlab.kernels.attention import flash_attention

    if _mode.is_interpreter():
        pytest.skip("TRITON_INTERPRET=1: CPU tensors are the point")
    q = torch.randn(1, 2, 16, 16)
    with pytest.raises(ValueError, match="q is on device cpu"):
        flash_attention(q, q, q)


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_autotuned_flash_attention_matches_reference_forward_and_backward(dtype, monkeypatch):
    monkeypatch.setenv("FLASHLAB_AUTOTUNE", "1")
    _run(2, 8, 8, 2048, 2048, 128, DTYPES[dtype], True)


def test_flash_attention_launches_on_the_tensors_gpu_not_the_current_one():
    # Triton launches on the current CUDA device; flash_attention makes q's device current first
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    from flashlab.kernels.attention import attention_reference, flash_attention, max_error

    q, k, v = (torch.randn(1, 2, 100, 64, device="cuda:1", dtype=torch.float16, requires_grad=True)
               for _ in range(3))
    with torch.cuda.device(0):
        o = flash_attention(q, k, v, causal=True)
        o.sum().backward()
    torch.cuda.synchronize(1)
    ref = attention_reference(q.detach(), k.detach(), v.detach(), causal=True)
    assert max_error(o, ref) < 1e-2, "output computed on the wrong GPU"
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v)), "gradients computed on the wrong GPU"
