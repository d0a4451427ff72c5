"""Launch plans (``flashlab.kernels.plans``): one per input signature, reused, equal to the path without them.

The first tests run where the kernels run: in Triton's interpreter on CPU tensors (plans are made
and reused, every launch interpreted), or compiled on CUDA tensors where there is a GPU. They
check the bookkeeping and that a plan computes exactly what the path without plans computes.
The GPU tests at the end check the direct launch of the compiled kernels against Triton's own
launch (``launch_plan.DIRECT_LAUNCH = False``), bit for bit, and against the float64 reference
under the flash-attention rule.
"""
import math

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from flashlab.attnspec import AttnSpec  # noqa: E402
from flashlab.kernels import _mode, attention, launch_plan, plans  # noqa: E402
from flashlab.kernels.attention import attention_reference, flash_attention  # noqa: E402

# where the kernels run: compiled on a GPU, else on CPU tensors in the interpreter (tests/conftest.py)
DEVICE = "cuda" if torch.cuda.is_available() and not _mode.is_interpreter() else "cpu"


def _inputs(seed, B=1, H=2, Hkv=1, Nq=24, Nk=24, d=16, dtype=torch.float32, device=DEVICE, layout="bhnd"):
    """Seeded q (B, H, Nq, d), k and v (B, Hkv, Nk, d) leaves and do; ``layout="bnhd"``: strided views
    of (B, N, H, d) storage, as a model's projections give."""
    g = torch.Generator(device=device).manual_seed(seed)

    def make(h, n):
        if layout == "bnhd":
            return torch.randn(B, n, h, d, generator=g, device=device).to(dtype).transpose(1, 2)  # (B, h, n, d) view
        return torch.randn(B, h, n, d, generator=g, device=device).to(dtype)  # (B, h, n, d)

    q, k, v = make(H, Nq).requires_grad_(), make(Hkv, Nk).requires_grad_(), make(Hkv, Nk).requires_grad_()
    do = torch.randn(B, H, Nq, d, generator=g, device=device).to(dtype)  # (B, H, Nq, d)
    return q, k, v, do


def _step(q, k, v, do, **kwargs):
    """(o, dq, dk, dv) of one forward+backward step through autograd."""
    o = flash_attention(q, k, v, **kwargs)
    return (o.detach(),) + torch.autograd.grad(o, (q, k, v), do)


@pytest.fixture
def fresh(monkeypatch):
    """Empty plan and check caches, plans on; emptied again afterwards."""
    monkeypatch.setattr(plans, "ENABLED", True)
    plans.clear()
    attention._CHECKED.clear()
    yield
    plans.clear()
    attention._CHECKED.clear()


def test_same_signature_reuses_the_forward_and_backward_plans(fresh):
    _step(*_inputs(0), causal=True)
    forward, backward = dict(plans._FORWARD), dict(plans._BACKWARD)
    assert len(forward) == 1 and len(backward) == 1, f"one step made {len(forward)} forward, {len(backward)} backward plans"
    _step(*_inputs(1), causal=True)  # new tensors, same signature
    assert plans._FORWARD.keys() == forward.keys() and plans._BACKWARD.keys() == backward.keys(), "a known signature made a new plan"
    assert all(plans._FORWARD[key] is plan for key, plan in forward.items()), "the forward plan was rebuilt"
    assert all(plans._BACKWARD[key] is plan for key, plan in backward.items()), "the backward plan was rebuilt"


CHANGES = {  # name: (inputs keywords, flash_attention keywords) differing from the base call
    "shape": (dict(Nq=20, Nk=20), dict(causal=True)),
    "stride": (dict(layout="bnhd"), dict(causal=True)),
    "dtype": (dict(dtype=torch.float16), dict(causal=True)),
    "spec": (dict(), dict(causal=True, window=8)),
    "scale": (dict(), dict(causal=True, scale=0.3)),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_a_different_signature_gets_its_own_plan(fresh, change):
    _step(*_inputs(0), causal=True)
    forward, backward = dict(plans._FORWARD), dict(plans._BACKWARD)
    inputs, options = CHANGES[change]
    _step(*_inputs(1, **inputs), **options)
    assert len(plans._FORWARD) == 2 and len(plans._BACKWARD) == 2, f"a different {change} did not make new plans"
    assert all(plans._FORWARD[key] is plan for key, plan in forward.items()), "the first forward plan was replaced"
    assert all(plans._BACKWARD[key] is plan for key, plan in backward.items()), "the first backward plan was replaced"


CASES = {  # name: (inputs keywords, flash_attention keywords)
    "gqa_causal_fp32": (dict(H=4, Hkv=2, Nq=24, Nk=24), dict(causal=True)),
    "mha_dense_fp16_ragged": (dict(H=2, Hkv=2, Nq=19, Nk=29, dtype=torch.float16), dict(causal=False)),
    "window_bottom_right": (dict(H=2, Hkv=1, Nq=17, Nk=30), dict(causal=True, window=9, causal_align="bottom_right")),
    "strided_views": (dict(H=2, Hkv=1, layout="bnhd"), dict(causal=True)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_plans_compute_exactly_what_the_path_without_plans_computes(fresh, monkeypatch, case):
    inputs, options = CASES[case]
    q, k, v, do = _inputs(7, **inputs)
    planned = _step(q, k, v, do, **options)
    again = _step(q, k, v, do, **options)  # the plan reused
    monkeypatch.setattr(plans, "ENABLED", False)
    plain = _step(q, k, v, do, **options)
    for name, a, b, c in zip(("o", "dq", "dk", "dv"), planned, again, plain):
        assert torch.equal(a, c), f"{name}: the planned step differs from the step without plans ({case})"
        assert torch.equal(b, c), f"{name}: the reused plan differs from the step without plans ({case})"
    ref = attention_reference(q.detach(), k.detach(), v.detach(), **options)
    err = (planned[0].double() - ref.double()).abs().max().item()
    assert err < (2e-3 if q.dtype == torch.float16 else 1e-5), f"o is {err:.3g} from the float64 reference ({case})"


def test_the_hopper_rungs_launch_is_planned_and_matches_the_reference(fresh):
    """v4_hopper runs in the interpreter for fp16; flash_attention picks it only on a GPU, so the
    plan is asked for it by name here."""
    q, k, v, _ = _inputs(3, H=4, Hkv=2, Nq=40, Nk=56, d=64, dtype=torch.float16)
    q, k, v = q.detach(), k.detach(), v.detach()
    spec = attention.attn_spec(q, k, v, True)
    o, lse = plans.forward(q, k, v, spec, rung="v4_hopper")
    (plan,) = plans._FORWARD.values()
    assert plan.rung == "v4_hopper" and plan.launch is not None, "the Hopper rung's launch was not planned"
    if DEVICE == "cpu":
        assert plan.launch.args is None, "a plan kept a compiled kernel in the interpreter, which has none"
    else:
        assert plan.launch.args is not None, "the plan kept no compiled kernel after its first launch"
    q2, k2, v2, _ = _inputs(4, H=4, Hkv=2, Nq=40, Nk=56, d=64, dtype=torch.float16)
    o2, _ = plans.forward(q2.detach(), k2.detach(), v2.detach(), spec, rung="v4_hopper")
    assert len(plans._FORWARD) == 1, "the same signature made a second plan"
    for out, (a, b, c) in ((o, (q, k, v)), (o2, (q2, k2, v2))):
        ref = attention_reference(a.detach(), b.detach(), c.detach(), causal=True)
        err = (out.double() - ref.double()).abs().max().item()
        assert err < 2e-3, f"the planned Hopper launch is {err:.3g} from the float64 reference"
    scores = torch.einsum("bhqd,bhkd->bhqk", q.double(), k.double().repeat_interleave(2, 1)) / math.sqrt(64)
    scores = scores.masked_fill(torch.ones(40, 56, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    assert (lse.double() - scores.logsumexp(-1)).abs().max().item() < 1e-3, "the planned launch's lse is wrong"


BAD = {  # name: a function of valid q, k, v giving a bad call (q, k, v, keywords)
    "dtype": lambda q, k, v: (q, k.half(), v, dict(causal=True)),
    "head_dim": lambda q, k, v: (q, k[..., :8].contiguous(), v[..., :8].contiguous(), dict(causal=True)),
    "heads": lambda q, k, v: (q, torch.cat([k] * 3, 1), torch.cat([v] * 3, 1), dict(causal=True)),  # Hkv=3, H=2
    "negative_scale": lambda q, k, v: (q, k, v, dict(causal=True, scale=-1.0)),
    "nan_scale": lambda q, k, v: (q, k, v, dict(causal=True, scale=float("nan"))),
    "bool_scale": lambda q, k, v: (q, k, v, dict(causal=True, scale=True)),
    "causal_not_bool": lambda q, k, v: (q, k, v, dict(causal=1)),
    "not_a_tensor": lambda q, k, v: (q.detach().cpu().numpy(), k, v, dict(causal=True)),
}


def test_bad_inputs_raise_the_same_errors_after_plans_exist(fresh):
    q, k, v, do = _inputs(5)
    calls = {name: make(q.detach(), k.detach(), v.detach()) for name, make in BAD.items()}
    cold = {}
    for name, (a, b, c, options) in calls.items():  # no plan and no checked signature yet
        try:
            flash_attention(a, b, c, **options)
        except (TypeError, ValueError) as err:
            cold[name] = err
        else:
            raise AssertionError(f"{name}: the bad call was accepted")
    _step(q, k, v, do, causal=True)  # a checked signature, a forward and a backward plan
    with torch.no_grad():
        flash_attention(q, k, v, causal=True, scale=1.0)  # and one with a scale given
    for name, (a, b, c, options) in calls.items():
        with pytest.raises(type(cold[name])) as warm:
            flash_attention(a, b, c, **options)
        assert str(warm.value) == str(cold[name]), f"{name}: the error changed once plans existed: {warm.value}"


def test_a_failed_check_is_never_remembered(fresh):
    q, k, v, _ = _inputs(6)
    for _ in range(2):
        with pytest.raises(ValueError, match="scale=-2.0 must be a finite positive number"):
            flash_attention(q, k, v, True, -2.0)
    assert not attention._CHECKED, "a signature that failed its check was cached"


def test_plans_off_makes_no_plans(fresh, monkeypatch):
    monkeypatch.setattr(plans, "ENABLED", False)
    _step(*_inputs(8), causal=True)
    assert not plans._FORWARD and not plans._BACKWARD, "plans were made with plans.ENABLED = False"


# ------------------------------------------------------------------ GPU: the direct launch
GPU_ROWS = {  # name: (B, H, Hkv, N, d, dtype, causal); the rung flash_attention picks is asserted
    "gqa_causal_bf16_v4": ((1, 8, 2, 1024, 128, torch.bfloat16, True), "v4_hopper"),
    "mha_dense_bf16_v5": ((4, 16, 16, 2048, 128, torch.bfloat16, False), "v5_gluon_ws"),
    "mha_dense_fp16_d64_ragged_v4": ((2, 4, 4, 1000, 64, torch.float16, False), "v4_hopper"),
    "gqa_fp32_v3": ((1, 4, 2, 300, 64, torch.float32, True), "v3_autotuned"),
}


@pytest.mark.gpu
@pytest.mark.parametrize("row", list(GPU_ROWS))
def test_gpu_direct_launch_equals_the_jit_launch_and_the_reference(fresh, monkeypatch, row):
    from flashlab.kernels import _mode, ladder
    from flashlab.kernels.attention import allowed_error, attn_spec, max_error

    if _mode.is_interpreter():
        pytest.skip("TRITON_INTERPRET=1: nothing is compiled, so nothing is launched directly")
    (B, H, Hkv, N, d, dtype, causal), rung = GPU_ROWS[row]
    monkeypatch.setenv("FLASHLAB_POISON", "1")  # an element a direct launch left unwritten shows as NaN
    q, k, v, do = _inputs(11, B=B, H=H, Hkv=Hkv, Nq=N, Nk=N, d=d, dtype=dtype, device="cuda")
    first = _step(q, k, v, do, causal=causal)  # JIT launches, kernels kept
    direct = _step(q, k, v, do, causal=causal)  # direct launches
    (fplan,) = plans._FORWARD.values()
    assert fplan.rung == rung, f"flash_attention ran {fplan.rung}, expected {rung}"
    if fplan.launch is not None:
        assert fplan.launch.args is not None, "the forward plan kept no compiled kernel: every call goes through the JIT"
    # plans cover the two-pass backward; where the ladder picks another rung there is no backward plan
    two_pass = ladder.choose_backward(q, k, attn_spec(q, k, v, causal)) == "bwd_two_pass"
    if two_pass:
        (bplan,) = plans._BACKWARD.values()
        for name in ("pre", "dq", "dkdv"):
            assert getattr(bplan, name).args is not None, f"the backward plan kept no compiled {name} kernel"
    else:
        assert not plans._BACKWARD, "a backward plan was made for a backward that is not the two-pass one"
    monkeypatch.setattr(launch_plan, "DIRECT_LAUNCH", False)
    jit = _step(q, k, v, do, causal=causal)
    torch.cuda.synchronize()
    for name, a, b, c in zip(("o", "dq", "dk", "dv"), first, direct, jit):
        if name == "dq" and not two_pass:
            continue  # the Gluon backward adds dQ's shares by the copy engine in no fixed order: checked below
        assert torch.equal(b, c), f"{name}: the direct launch differs from the JIT launch ({row})"
        assert torch.equal(a, c), f"{name}: the first (JIT) step differs from a later one ({row})"
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    same = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    ref = attention_reference(*leaves, causal=causal)
    pt = attention_reference(*same, causal=causal, upcast=False)
    ref_grads = torch.autograd.grad(ref, leaves, do.double())
    pt_grads = torch.autograd.grad(pt, same, do)
    assert max_error(direct[0], ref) <= allowed_error(ref, pt.detach()), f"o: direct launch error ({row})"
    for name, mine, r, p in zip(("dq", "dk", "dv"), direct[1:], ref_grads, pt_grads):
        magnitude = ref_grads[2] if name == "dk" else None
        err, allowed = max_error(mine, r), allowed_error(r, p, magnitude)
        assert err <= allowed, f"{name}: direct launch error {err:.3g} > allowed {allowed:.3g} ({row})"
    if not two_pass:  # dQ was not compared bitwise: each launch's own dQ against the reference
        for path, grads in (("first (JIT)", first), ("JIT", jit)):
            err, allowed = max_error(grads[1], ref_grads[0]), allowed_error(ref_grads[0], pt_grads[0])
            assert err <= allowed, f"dq: {path} launch error {err:.3g} > allowed {allowed:.3g} ({row})"


@pytest.mark.gpu
def test_gpu_a_launch_hook_sends_every_launch_through_the_jit(fresh, monkeypatch):
    """A profiler's launch hook must see every kernel: with one installed, no direct launch."""
    from flashlab.kernels import _mode

    if _mode.is_interpreter():
        pytest.skip("TRITON_INTERPRET=1: nothing is compiled")
    from triton import knobs

    q, k, v, do = _inputs(12, B=1, H=4, Hkv=2, Nq=256, Nk=256, d=64, dtype=torch.float16, device="cuda")
    _step(q, k, v, do, causal=True)
    seen = []

    def hook(metadata):
        seen.append(metadata)

    chain = knobs.runtime.launch_enter_hook
    if hasattr(chain, "add"):  # Triton 3.6, 3.7: a HookChain
        chain.add(hook)
        try:
            _step(q, k, v, do, causal=True)
        finally:
            chain.remove(hook)
    else:
        monkeypatch.setattr(knobs.runtime, "launch_enter_hook", hook)
        _step(q, k, v, do, causal=True)
    torch.cuda.synchronize()
    assert len(seen) == 4, f"the hook saw {len(seen)} launches of 4 (forward, preprocess, dQ, dK/dV)"


class _RecordingKernel:
    """Stands in for a CompiledKernel: records what a direct launch passes to ``run``."""

    function, packed_metadata = "function", "metadata"

    def __init__(self):
        self.calls = []

    def run(self, *args):
        self.calls.append(args)


def _as_jit_sees(value):
    """A JIT argument as the launcher reads it: a tensor's pointer, a descriptor's fields."""
    if hasattr(value, "data_ptr"):
        return value.data_ptr()
    if hasattr(value, "block_shape"):
        return (type(value), value.base.data_ptr(), list(value.shape), list(value.strides), list(value.block_shape),
                getattr(value, "layout", None), value.padding)
    return value


@pytest.mark.parametrize("rung", ["v4_hopper", "v5_gluon_ws"])
def test_a_direct_launch_passes_what_the_jit_would_with_only_the_pointers_changed(fresh, monkeypatch, rung):
    """The direct path, checked on the CPU with a stand-in compiled kernel: every argument of the
    second call is what the JIT path would pass for the new tensors (descriptors rebuilt on them)."""
    from flashlab.kernels import flash_fwd_gluon, flash_fwd_hopper

    if rung == "v5_gluon_ws" and not flash_fwd_gluon._gluon_available():
        pytest.skip("this Triton has no Gluon")
    module = flash_fwd_hopper if rung == "v4_hopper" else flash_fwd_gluon
    shape = dict(H=4, Hkv=2, Nq=40, Nk=56, d=64, dtype=torch.float16, device="cpu")  # never launched
    first = [t.detach() for t in _inputs(9, **shape)[:3]]
    second = [t.detach() for t in _inputs(10, **shape)[:3]]
    spec = AttnSpec(causal=True, scale=0.125, group=2)
    launch = module.kernel_launch(*first, spec, module.default_config(64, True))
    kernel = _RecordingKernel()
    launch._record(kernel, launch.jit_values((*first, *flash_fwd_hopper.new_outputs(first[0]))))  # as a first launch
    outputs = flash_fwd_hopper.new_outputs(second[0])
    launch(*second, *outputs)
    (call,) = kernel.calls
    grid, stream, rest = call[:3], call[3], call[4:]
    assert grid == launch.grid3 and stream == launch.stream
    assert rest[:5] == ("function", "metadata", None, None, None), "the launch metadata and hooks are not as the JIT's"
    expected = launch.jit_values((*second, *outputs))
    for name, got in zip(launch.names, rest[5:]):
        assert _as_jit_sees(got) == _as_jit_sees(expected[name]), f"argument {name} differs from the JIT's"
    monkeypatch.setattr(launch_plan, "DIRECT_LAUNCH", False)
    monkeypatch.setattr(launch, "_jit", lambda tensors: "jit")
    assert launch(*second, *outputs) == "jit" and len(kernel.calls) == 1, "DIRECT_LAUNCH = False still launched directly"
    monkeypatch.setattr(launch_plan, "DIRECT_LAUNCH", True)
    unaligned = torch.empty(second[0].numel() + 8, dtype=torch.float16)[1:1 + second[0].numel()].view(second[0].shape)
    assert launch(unaligned, *second[1:], *outputs) == "jit", "an unaligned pointer was launched directly"
