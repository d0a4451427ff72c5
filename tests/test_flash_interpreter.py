"""FlashAttention kernels against the float64 PyTorch reference, on fresh random inputs.

Without a GPU these run in Triton's CPU interpreter (tests/conftest.py sets TRITON_INTERPRET=1),
so the shapes are small. Passing here shows the kernels compute the right function; it says
nothing about compiled GPU code (dot shapes, shared memory, tf32, races): tests/test_flash_gpu.py
and benchmarks/gpu_sweep.py cover that on a GPU.
"""
import random

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from flashlab.kernels import attention as attention_module  # noqa: E402
from flashlab.kernels import ladder  # noqa: E402
from flashlab.kernels.attention import (  # noqa: E402
    allowed_error, attention_reference, check_inputs, flash_attention, max_error,
)

pytestmark = pytest.mark.interpreter
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _inputs(B, H, Hkv, Nq, Nk, d, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, Nq, d, generator=g).to(DEVICE, dtype)  # (B, H, Nq, d)
    k = torch.randn(B, Hkv, Nk, d, generator=g).to(DEVICE, dtype)  # (B, Hkv, Nk, d)
    v = torch.randn(B, Hkv, Nk, d, generator=g).to(DEVICE, dtype)  # (B, Hkv, Nk, d)
    return q, k, v


def _check_forward_and_backward(q, k, v, causal, seed):
    """flash_attention's output and gradients within the flash-attention rule of PyTorch's."""
    dtype = q.dtype
    leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    out = flash_attention(*leaves, causal=causal)
    assert out.shape == q.shape and out.dtype == dtype, f"output {out.shape} {out.dtype}, expected {q.shape} {dtype}"
    do = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 1)).to(DEVICE, dtype)
    out.backward(do)
    ref_leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = attention_reference(*ref_leaves, causal=causal)
    ref.backward(do.double())
    pt_leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    pt = attention_reference(*pt_leaves, causal=causal, upcast=False)
    pt.backward(do)
    where = f"(seed={seed}, q {tuple(q.shape)}, k {tuple(k.shape)}, {dtype}, causal={causal})"
    err, allowed = max_error(out, ref), allowed_error(ref, pt)
    assert err <= allowed, f"forward error {err:.3g} > allowed {allowed:.3g} {where}"
    for name, mine, r, p in zip("qkv", leaves, ref_leaves, pt_leaves):
        assert mine.grad.shape == r.grad.shape, f"d{name} shape {mine.grad.shape}, expected {r.grad.shape}"
        magnitude = ref_leaves[2].grad if name == "k" else None  # dK cancels to 0 when Nk = 1
        err, allowed = max_error(mine.grad, r.grad), allowed_error(r.grad, p.grad, magnitude)
        assert err <= allowed, f"d{name} error {err:.3g} > allowed {allowed:.3g} {where}"


CASES = [
    # B, H, Hkv, Nq, Nk, d, dtype, causal: each a situation the kernels must get right
    pytest.param(1, 2, 2, 37, 29, 40, torch.float32, False, id="ragged-Nq>Nk-d40-padded-fp32"),
    pytest.param(2, 4, 2, 45, 20, 32, torch.float16, True, id="causal-Nq>Nk-gqa-fp16"),
    pytest.param(1, 3, 1, 20, 45, 16, torch.bfloat16, True, id="causal-Nq<Nk-mqa-bf16"),
    pytest.param(1, 2, 1, 33, 33, 80, torch.bfloat16, False, id="d80-padded-bf16"),
    pytest.param(1, 1, 1, 1, 1, 16, torch.float32, True, id="single-query-single-key"),
    pytest.param(1, 2, 2, 17, 1, 24, torch.float16, False, id="one-key-many-queries"),
]


@pytest.mark.parametrize("B, H, Hkv, Nq, Nk, d, dtype, causal", CASES)
def test_flash_attention_forward_and_backward_match_float64_reference(B, H, Hkv, Nq, Nk, d, dtype, causal):
    seed = random.randrange(2**31)
    q, k, v = _inputs(B, H, Hkv, Nq, Nk, d, dtype, seed)
    _check_forward_and_backward(q, k, v, causal, seed)


def test_every_output_element_is_written_even_keys_no_query_sees(monkeypatch):
    # outputs start as NaN; causal with Nk > Nq leaves keys past Nq unseen: their dK, dV must be 0
    monkeypatch.setenv("FLASHLAB_POISON", "1")
    seed = random.randrange(2**31)
    q, k, v = _inputs(1, 2, 1, 18, 53, 16, torch.float32, seed)
    _check_forward_and_backward(q, k, v, True, seed)


def test_flash_attention_is_correct_for_strided_non_contiguous_inputs():
    seed = random.randrange(2**31)
    g = torch.Generator().manual_seed(seed)
    B, H, Hkv, Nq, Nk, d = 2, 4, 2, 19, 26, 32
    # (B, N, H, d) storage viewed as (B, H, N, d): the layout of a fused projection
    q = torch.randn(B, Nq, H, d, generator=g).to(DEVICE).transpose(1, 2)  # (B, H, Nq, d), strided
    k = torch.randn(B, Nk, Hkv, d, generator=g).to(DEVICE).transpose(1, 2)  # (B, Hkv, Nk, d), strided
    v = torch.randn(B, Hkv, d, Nk, generator=g).to(DEVICE).transpose(2, 3)  # (B, Hkv, Nk, d), last dim strided
    assert not q.is_contiguous() and not k.is_contiguous() and v.stride(-1) != 1
    _check_forward_and_backward(q, k, v, True, seed)


FORWARDS = {**ladder.RUNGS, "minimal": ladder.minimal}  # the rungs and notebook 06's teaching kernel


@pytest.mark.parametrize("rung", sorted(FORWARDS))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_every_rung_returns_reference_output_and_natural_log_lse(rung, causal):
    seed = random.randrange(2**31)
    q, k, v = _inputs(1, 2, 1, 41, 35, 48, torch.float16, seed)
    o, lse = FORWARDS[rung](q, k, v, causal, None)
    ref = attention_reference(q, k, v, causal=causal)
    pt = attention_reference(q, k, v, causal=causal, upcast=False)
    err, allowed = max_error(o, ref), allowed_error(ref, pt)
    assert err <= allowed, f"{rung}: output error {err:.3g} > allowed {allowed:.3g} (seed={seed})"
    qd, kd = q.double(), k.double().repeat_interleave(2, dim=1)
    s = qd @ kd.transpose(-2, -1) / 48**0.5  # (1, 2, Nq, Nk)
    if causal:
        s = s.masked_fill(~torch.ones(41, 35, dtype=torch.bool, device=q.device).tril(), float("-inf"))
    lse_ref = torch.logsumexp(s, dim=-1)  # (1, 2, Nq)
    assert lse.shape == (1, 2, 41) and lse.dtype == torch.float32, f"{rung}: lse {lse.shape} {lse.dtype}"
    lse_err = max_error(lse, lse_ref)
    assert lse_err < 1e-3, f"{rung}: lse differs from logsumexp(S) by {lse_err:.3g} (seed={seed})"


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("n_q, n_k", [(37, 70), (70, 37), (33, 33)])
def test_minimal_kernel_matches_the_reference_on_strided_ragged_inputs_over_several_blocks(causal, n_q, n_k):
    """Notebook 06's teaching kernel: strided views, GQA, d padded (24 -> 32), Nq above and below
    Nk, several query and key blocks of 16 with ragged last ones, float32 and a given scale."""
    seed = random.randrange(2**31)
    g = torch.Generator().manual_seed(seed)
    B, H, Hkv, d = 2, 4, 2, 24
    q = torch.randn(B, n_q, H, d, generator=g).to(DEVICE).transpose(1, 2)  # (B, H, Nq, d), strided
    k = torch.randn(B, n_k, Hkv, d, generator=g).to(DEVICE).transpose(1, 2)  # (B, Hkv, Nk, d), strided
    v = torch.randn(B, Hkv, d, n_k, generator=g).to(DEVICE).transpose(2, 3)  # (B, Hkv, Nk, d)
    o, lse = ladder.minimal(q, k, v, causal, 0.3)
    ref = attention_reference(q, k, v, causal=causal, scale=0.3)
    pt = attention_reference(q, k, v, causal=causal, scale=0.3, upcast=False)
    err, allowed = max_error(o, ref), allowed_error(ref, pt)
    assert err <= allowed, f"minimal kernel: output error {err:.3g} > allowed {allowed:.3g} (seed={seed})"
    assert lse.shape == (B, H, n_q) and torch.isfinite(lse).all(), f"minimal kernel: lse {lse.shape}, not finite"


@pytest.mark.parametrize("option", [dict(window=8), dict(causal_align="bottom_right"),
                                    dict(mask_mod=lambda i, j: i >= j), dict(seqlens_q=[5], seqlens_k=[5])],
                         ids=["window", "causal_align", "mask_mod", "seqlens"])
def test_minimal_kernel_refuses_the_options_only_the_rungs_compute_by_name(option):
    q = torch.randn(1, 2, 16, 16, device=DEVICE)  # (B, H, N, d)
    with pytest.raises(ValueError, match=next(iter(option)).replace("_q", "")):
        ladder.minimal(q, q, q, True, **option)


def test_head_dim_256_is_supported():
    seed = random.randrange(2**31)
    q, k, v = _inputs(1, 1, 1, 18, 17, 256, torch.float16, seed)
    o, _ = ladder.RUNGS["v3_autotuned"](q, k, v, True, None)
    ref, pt = attention_reference(q, k, v, causal=True), attention_reference(q, k, v, causal=True, upcast=False)
    assert max_error(o, ref) <= allowed_error(ref, pt), f"d=256 forward wrong (seed={seed})"


def _bad(**changes):
    base = dict(q=torch.randn(1, 4, 8, 16), k=torch.randn(1, 2, 8, 16), v=torch.randn(1, 2, 8, 16))
    base.update(changes)
    return base


@pytest.mark.parametrize("args, error, names", [
    (_bad(k=torch.randn(1, 2, 8, 16, dtype=torch.float16)), TypeError, "k.dtype"),
    (_bad(k=torch.randn(1, 3, 8, 16), v=torch.randn(1, 3, 8, 16)), ValueError, "multiple of Hkv"),
    (_bad(q=torch.randn(1, 4, 8, 8), k=torch.randn(1, 2, 8, 8), v=torch.randn(1, 2, 8, 8)), ValueError, "d=8"),
    (_bad(q=torch.randn(1, 4, 8, 320), k=torch.randn(1, 2, 8, 320), v=torch.randn(1, 2, 8, 320)), ValueError, "d=320"),
    (_bad(q=torch.randn(4, 8, 16)), ValueError, "q must have rank 4"),
    (_bad(q=torch.randint(0, 3, (1, 4, 8, 16))), TypeError, "q.dtype"),
    (_bad(v=torch.randn(1, 2, 9, 16)), ValueError, "v.shape"),
    (_bad(q=[[1.0]]), TypeError, "q must be a torch.Tensor"),
], ids=["dtype-mismatch", "heads-not-multiple", "d-too-small", "d-too-large", "rank", "int-dtype",
        "k-v-shapes", "not-a-tensor"])
def test_bad_inputs_raise_errors_that_name_the_argument(args, error, names):
    with pytest.raises(error, match=names):
        flash_attention(**args)


def test_bad_scale_and_causal_are_rejected():
    q, k, v = (t.to(DEVICE) for t in (_bad()["q"], _bad()["k"], _bad()["v"]))
    with pytest.raises(ValueError, match="scale"):
        check_inputs(q, k, v, False, -1.0)
    with pytest.raises(TypeError, match="causal"):
        check_inputs(q, k, v, "yes", None)


def test_cpu_tensors_are_rejected_when_triton_is_compiled_for_a_gpu(monkeypatch):
    # what a learner sees after importing triton without TRITON_INTERPRET on a machine with no GPU:
    # a ValueError naming q, not a crash inside a compiled launch
    from flashlab.kernels import _mode

    monkeypatch.setattr(_mode, "is_interpreter", lambda: False)
    q, k, v = _bad()["q"], _bad()["k"], _bad()["v"]  # CPU tensors
    with pytest.raises(ValueError, match="q is on device cpu.*TRITON_INTERPRET=1"):
        flash_attention(q, k, v)


def test_shapes_past_the_kernels_index_and_grid_limits_are_rejected(monkeypatch):
    # meta tensors have shapes and strides but no storage: big layouts cost no memory here
    from flashlab.kernels import _mode

    small = torch.empty(1, 2, 8, 64, device="meta")
    # (B, N, H, d) storage viewed as (B, H, N, d) with N * H * d > 2^31: offsets would overflow int32
    huge_q = torch.empty(1, 2**18, 2**8, 64, device="meta").transpose(1, 2)  # (1, 256, 2^18, 64)
    with pytest.raises(ValueError, match=r"q \(shape.*int32"):
        check_inputs(huge_q, small, small)
    monkeypatch.setattr(_mode, "is_interpreter", lambda: False)  # the grid limit is CUDA's
    many_heads = torch.empty(1, 70000, 1, 64, device="meta")  # (B, H, Nq, d): B*H > 65535
    with pytest.raises(ValueError, match="B\\*H = 70000.*grid"):
        check_inputs(many_heads, many_heads, many_heads)


def test_tensors_on_different_devices_are_rejected():
    if not torch.cuda.is_available():
        q = torch.randn(1, 2, 8, 16)
        k = torch.randn(1, 2, 8, 16, device="meta")
        with pytest.raises(ValueError, match="k is on meta"):
            check_inputs(q, k, k)
    else:
        q = torch.randn(1, 2, 8, 16, device="cuda")
        with pytest.raises(ValueError, match="k is on cpu"):
            check_inputs(q, torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16))


@pytest.mark.parametrize("fwd_blocks, bwd_blocks", [
    ((32, 16), (16, 32, 32, 16)),  # BLOCK_M > BLOCK_N: several key blocks per diagonal
    ((16, 32), (32, 16, 16, 32)),  # BLOCK_M < BLOCK_N: key blocks wider than query blocks
], ids=["tall-tiles", "wide-tiles"])
def test_kernels_are_correct_for_unequal_block_sizes(fwd_blocks, bwd_blocks):
    # the default interpreter config has every block 16; GPU configs do not: check the causal
    # stage boundaries and ragged tiles when BLOCK_M != BLOCK_N
    from flashlab.kernels import flash_bwd, flash_fwd

    seed = random.randrange(2**31)
    q, k, v = _inputs(1, 2, 1, 45, 39, 32, torch.float32, seed)
    scale = 32**-0.5
    g = torch.Generator().manual_seed(seed + 1)
    do = torch.randn(q.shape, generator=g).to(DEVICE)  # (1, 2, Nq, d)
    for causal in (False, True):
        where = f"(seed={seed}, causal={causal}, blocks {fwd_blocks} / {bwd_blocks})"
        ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
        ref = attention_reference(*ref_leaves, causal=causal)
        ref.backward(do.double())
        pt = attention_reference(q, k, v, causal=causal, upcast=False)
        for forward in (flash_fwd.forward_v1, flash_fwd.forward_v2):
            o, lse = forward(q, k, v, causal, scale, config=flash_fwd.FwdConfig(*fwd_blocks, 4, 2))
            assert max_error(o, ref) <= allowed_error(ref, pt), f"{forward.__name__} output wrong {where}"
        grads = flash_bwd.backward(q, k, v, o, lse, do, causal, scale, config=flash_bwd.BwdConfig(*bwd_blocks, 4, 2, 16))
        for name, mine, r in zip(("dq", "dk", "dv"), grads, ref_leaves):
            err = max_error(mine, r.grad)
            assert err < 1e-4, f"{name} error {err:.3g} {where}"


def _forward_rungs_with_tall_tiles():
    from flashlab.kernels import flash_fwd, flash_fwd_hopper

    tall = flash_fwd.FwdConfig(block_m=32, block_n=16, num_warps=4, num_stages=2)
    hopper_tall = flash_fwd_hopper.HopperConfig(block_q=32, block_k=16, num_warps=4, num_stages=2)
    return {
        "v0": lambda q, k, v, s: flash_fwd.forward_v0(q, k, v, True, s, config=tall),
        "v1": lambda q, k, v, s: flash_fwd.forward_v1(q, k, v, True, s, config=tall),
        "v2": lambda q, k, v, s: flash_fwd.forward_v2(q, k, v, True, s, config=tall),
        "v4_hopper": lambda q, k, v, s: flash_fwd_hopper.forward(q, k, v, True, s, config=hopper_tall),
    }


@pytest.mark.parametrize("rung", ["v0", "v1", "v2", "v4_hopper"])
def test_causal_key_blocks_past_the_last_query_row_are_never_loaded(rung):
    # Nq = 37 with BLOCK_M = 32: the last query block holds rows 32..36 and sees keys 0..36 only.
    # Keys 48..69 fill whole BLOCK_N = 16 blocks that no query sees; they are NaN here. A kernel
    # that loads such a tile (a loop bound of (start_m + 1) * BLOCK_M instead of the last row
    # that exists) multiplies 0 by NaN and spreads it; one that skips them matches the reference.
    from flashlab.kernels import flash_bwd, flash_fwd_hopper

    seed = random.randrange(2**31)
    Nq, Nk, d, unseen = 37, 70, 64, 48
    q, k, v = _inputs(1, 2, 2, Nq, Nk, d, torch.float16, seed)  # (1, 2, Nq, d), (1, 2, Nk, d) x 2
    if rung == "v4_hopper" and not flash_fwd_hopper.supports(q, k, v, True):
        pytest.skip("the Hopper rung does not run on this device")
    k_nan, v_nan = k.clone(), v.clone()
    k_nan[:, :, unseen:] = float("nan")
    v_nan[:, :, unseen:] = float("nan")
    scale = d**-0.5
    where = f"(rung {rung}, seed={seed})"
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    ref = attention_reference(*ref_leaves, causal=True)  # on the clean keys: unseen ones do not matter
    pt = attention_reference(q, k, v, causal=True, upcast=False)
    o, lse = _forward_rungs_with_tall_tiles()[rung](q, k_nan, v_nan, scale)
    err, allowed = max_error(o, ref), allowed_error(ref, pt)
    assert err <= allowed, f"output error {err:.3g} > allowed {allowed:.3g}: an unseen key block was loaded {where}"
    # backward with tall dQ tiles (BLOCK_M2 = 32 > BLOCK_N2 = 16): dQ must skip the unseen key
    # blocks too, and the dK/dV programs of unseen key blocks must write zeros without loading them
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(seed + 1)).to(DEVICE, q.dtype)
    ref.backward(do.double())
    pt_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    attention_reference(*pt_leaves, causal=True, upcast=False).backward(do)
    grads = flash_bwd.backward(q, k_nan, v_nan, o, lse, do, True, scale,
                               config=flash_bwd.BwdConfig(16, 16, 32, 16, 4, 2, 16))
    for name, mine, r, p in zip(("dq", "dk", "dv"), grads, ref_leaves, pt_leaves):
        magnitude = ref_leaves[2].grad if name == "dk" else None
        err, allowed = max_error(mine, r.grad), allowed_error(r.grad, p.grad, magnitude)
        assert err <= allowed, f"{name} error {err:.3g} > allowed {allowed:.3g} {where}"
    assert (grads[1][:, :, unseen:] == 0).all() and (grads[2][:, :, unseen:] == 0).all(), \
        f"dK, dV of keys no query sees must be exactly 0 {where}"


def test_error_table_lists_every_entry_and_flags_one_off_the_reference(monkeypatch):
    """Notebook 06's table: each rung and the minimal kernel within the flash-attention rule, and a
    forward 1 % off the reference is called out."""
    q, k, v = _inputs(1, 2, 2, 20, 28, 16, torch.float32, 5)
    text = ladder.error_table(q, k, v)
    rows = text.splitlines()[1:]
    assert len(rows) == 2 * (1 + len(ladder.RUNGS)) and all(r.endswith("ok") for r in rows), text
    assert {r.split()[1] for r in rows} == {"minimal", *ladder.RUNGS}, text

    def off(q, k, v, causal=False, scale=None):
        o, lse = ladder.minimal(q, k, v, causal, scale)
        return o * 1.01, lse

    monkeypatch.setitem(ladder.RUNGS, "v0_grid_bh", off)
    assert [r.split()[-1] for r in ladder.error_table(q, k, v, (True,)).splitlines()[1:]].count("LARGE") == 1


# ------------------------------------------------------------------ notebook 06 and 07's tables


def _numbers(line: str, after: str) -> list[float]:
    """The numbers printed after each occurrence of ``after`` in ``line``."""
    return [float(part.split()[0].rstrip(",")) for part in line.split(after)[1:]]


def _reference64(q, k, v, causal):
    """Softmax attention in float64 written out here (GQA by repeating k, v; causal top-left)."""
    group = q.shape[1] // k.shape[1]
    q, k, v = q.double(), k.repeat_interleave(group, 1).double(), v.repeat_interleave(group, 1).double()
    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5  # (B, H, Nq, Nk)
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1), float("-inf"))
    return torch.softmax(s, -1) @ v  # (B, H, Nq, d)


def test_head_sharing_table_reports_flash_attentions_error_on_mha_gqa_and_mqa():
    text = ladder.head_sharing_table(n_q=20, n_k=28, d=16, heads=4, kv_heads=(4, 2, 1), device=DEVICE,
                                     dtype=torch.float32, seed=3)
    lines = text.splitlines()
    assert [line.split(":")[0] for line in lines] == ["MHA", "GQA", "MQA"], text
    g = torch.Generator().manual_seed(3)
    for line, h_kv in zip(lines, (4, 2, 1)):
        q = torch.randn(1, 4, 20, 16, generator=g).to(DEVICE)
        k, v = (torch.randn(1, h_kv, 28, 16, generator=g).to(DEVICE) for _ in range(2))
        err = (flash_attention(q, k, v, causal=True).double() - _reference64(q, k, v, True)).abs().max().item()
        assert f"k/v (1, {h_kv}, 28, 16)" in line, line
        assert _numbers(line, "max error")[0] == pytest.approx(err, rel=0.06, abs=1e-7), line
        assert err < 1e-5, f"{line}: flash_attention is {err:.1e} off a float64 softmax attention"
    with pytest.raises(ValueError, match="kv_heads"):
        ladder.head_sharing_table(heads=4, kv_heads=(3,))


def test_dtype_error_table_puts_flash_attention_beside_pytorch_in_the_same_dtype():
    text = ladder.dtype_error_table(n_q=20, n_k=28, d=16, dtypes=("float32", "float16"), device=DEVICE, seed=4)
    g = torch.Generator().manual_seed(4)
    for line, dtype in zip(text.splitlines(), (torch.float32, torch.float16), strict=True):
        q = torch.randn(1, 2, 20, 16, generator=g).to(DEVICE, dtype)
        k, v = (torch.randn(1, 2, 28, 16, generator=g).to(DEVICE, dtype) for _ in range(2))
        ref = _reference64(q, k, v, False).to(dtype).double()  # the float64 result in the dtype, as the table
        ours = (flash_attention(q, k, v).double() - ref).abs().max().item()
        plain = torch.softmax((q @ k.transpose(-2, -1)) / 4.0, -1) @ v  # PyTorch in the dtype, d = 16
        theirs = (plain.double() - ref).abs().max().item()
        assert line.startswith(str(dtype)), line
        assert _numbers(line, "flash_attention error")[0] == pytest.approx(ours, rel=0.06, abs=1e-7), line
        assert _numbers(line, "same-dtype error")[0] == pytest.approx(theirs, rel=0.06, abs=1e-7), line
    with pytest.raises(ValueError, match="dtypes"):
        ladder.dtype_error_table(dtypes=("float64",))


def test_gradient_error_table_reports_the_backwards_error_against_float64_autograd():
    text = ladder.gradient_error_table(n=17, d=16, heads=4, kv_heads=2, device=DEVICE, dtype=torch.float32, seed=5)
    g = torch.Generator().manual_seed(5)
    for line, causal in zip(text.splitlines(), (False, True), strict=True):
        q = torch.randn(1, 4, 17, 16, generator=g).to(DEVICE).requires_grad_()
        k, v = (torch.randn(1, 2, 17, 16, generator=g).to(DEVICE).requires_grad_() for _ in range(2))
        do = torch.randn(1, 4, 17, 16, generator=g).to(DEVICE)
        flash_attention(q, k, v, causal=causal).backward(do)
        leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
        _reference64(*leaves, causal).backward(do.double())
        errs = [(t.grad.double() - r.grad).abs().max().item() for t, r in zip((q, k, v), leaves)]
        assert line.startswith(f"causal={causal}"), line
        printed = [_numbers(line, f" {name} ")[0] for name in ("dq", "dk", "dv")]
        assert printed == pytest.approx(errs, rel=0.06, abs=1e-7), line
    with pytest.raises(ValueError, match="kv_heads"):
        ladder.gradient_error_table(heads=4, kv_heads=3)


def test_refusal_messages_are_what_flash_attention_raises_and_refuse_an_accepted_case():
    text = attention_module.refusal_messages(device=DEVICE)
    lines = text.splitlines()
    assert len(lines) == len(attention_module.REFUSED_SHAPES)
    for line, (q_shape, kv_shape) in zip(lines, attention_module.REFUSED_SHAPES):
        with pytest.raises((TypeError, ValueError)) as caught:
            flash_attention(torch.randn(q_shape, device=DEVICE), torch.randn(kv_shape, device=DEVICE),
                            torch.randn(kv_shape, device=DEVICE))
        assert line == f"{caught.type.__name__}: {caught.value}"
    with pytest.raises(ValueError, match="cases"):
        attention_module.refusal_messages(cases=(((1, 2, 8, 16), (1, 2, 8, 16)),), device=DEVICE)
