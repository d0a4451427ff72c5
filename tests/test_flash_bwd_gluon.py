"""The warp-specialised Gluon backward (``flash_bwd_gluon``, backward rung ``bwd_gluon_ws``).

Gluon has no CPU interpreter, so on a machine without a GPU this file checks what can be checked
there: the kernel compiles for sm90 (tests/sm90_compile_bwd.py, the stand-in driver of
tests/standin_gpu.py) into what the design says (three warpgroups with register reallocation,
wgmma, the dQ reduction the config names, the shared memory the config predicts, no spilled
registers at d = 64 and a bounded spill at d = 128); bad configs are refused by name; off a GPU the rung is not supported and the backward
ladder falls back to ``bwd_two_pass``. The gradients are checked on a GPU (the ``gpu`` tests below
against float64 autograd on fresh seeded inputs, and benchmarks/gpu_sweep.py --backward-rung bwd_gluon_ws).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from flashlab.kernels import flash_bwd_gluon as gb  # noqa: E402
from flashlab.kernels import ladder  # noqa: E402

HERE = Path(__file__).resolve().parent
SMEM_LIMIT = 227 * 1024  # bytes of shared memory one CTA may use on sm90


def _compile(d, causal, dtype, *config):
    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src"))
    env.pop("TRITON_INTERPRET", None)  # compiled mode: Gluon has no interpreter
    run = subprocess.run([sys.executable, str(HERE / "sm90_compile_bwd.py"), str(d), str(int(causal)), dtype,
                          *map(str, config)], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("d, causal, dtype, config", [
    (128, False, "bfloat16", (2, "d", "tma")),  # consumers exchange dS^T, each reduces half of dQ's columns
    (128, True, "float16", (2, "d", "atomic")),  # per-element atomics: the fallback where Gluon lacks the reduce
    (64, True, "bfloat16", (2, "keys", "tma")),  # each consumer reduces dQ over its own 64 keys
    (128, True, "bfloat16", (2, "d", "tma", "lag", "hf")),  # dQ a step behind (two dS^T buffers), heavy first
    (128, True, "bfloat16", (2, "d", "tma", "lag", "g0")),  # the causal default: heads grouped to fill the SMs
])
def test_compiles_for_sm90_into_the_designed_kernel(d, causal, dtype, config):
    report = _compile(d, causal, dtype, *config)
    assert report["target"], "not compiled for sm_90a"
    assert report["local"] == 0, f"an array was placed in local memory: {report}"
    # Spills go to the stack frame. At d = 64 there are about none (0 bytes with triton 3.7.1, 8 with
    # triton 3.6.0 on the H200). At d = 128 a consumer's 240 registers hold dK_c, dV_c (128), S^T and
    # dP^T (64) and lse_i, D_i (32) at once, and ptxas spills a few values a step (frames of 328-744
    # bytes for these GQA compiles with triton 3.7.1, 208-256 without GQA; benchmarks/NOTES.md,
    # "Session 6, second round"): the bounds catch a change that makes it worse.
    assert report["stack"] <= (32 if d == 64 else 1024), f"registers spilled to the stack: {report}"
    assert report["threads"] == 384, f"expected 3 warpgroups (producer + 2 consumers): {report}"
    assert report["setmaxnreg"] > 0, f"no register reallocation between partitions: {report}"
    assert report["wgmma"] >= 5, f"expected the five products as wgmma instructions: {report}"
    if config[2] == "tma":
        assert report["reduce"] > 0 and report["atomics"] == 0, f"dQ should leave by the tile reduce: {report}"
    else:
        assert report["reduce"] == 0 and report["atomics"] > 0, f"dQ should leave by atomics: {report}"
    assert report["shared"] <= SMEM_LIMIT, report
    assert report["smem_model"] <= report["shared"] <= report["smem_model"] + 1024, report


def test_staging_lse_and_delta_in_shared_memory_frees_registers_at_d128():
    # lse_i and D_i held from the start of a step cost a consumer 32 registers; staged in the ring
    # slot by the producer they are read where used, and ptxas spills less (a compile-only check:
    # the speed of this variant has not been measured)
    plain = _compile(128, False, "bfloat16", 2, "d", "tma", "lag")
    staged = _compile(128, False, "bfloat16", 2, "d", "tma", "lag", "rows")
    assert staged["stack"] < plain["stack"], (plain, staged)
    assert staged["smem_model"] <= staged["shared"] <= staged["smem_model"] + 1024, staged


def test_the_ds_exchange_at_d64_halves_the_dq_staging_without_spills():
    # each consumer reduces 32 of dQ's columns over all 128 keys (a 64-byte-wide slice of the
    # 128-byte-swizzled K tile) instead of all 64 over its own keys: half the staging and reduce bytes
    keys = _compile(64, True, "bfloat16", 2, "keys", "tma", "rows", "one")
    exchange = _compile(64, True, "bfloat16", 2, "d", "tma", "rows", "one")
    assert exchange["stack"] == 0 and exchange["local"] == 0, exchange
    half_staging = 2 * gb.BLOCK_M * 32 * 4  # bytes: two consumers' (64, 32) fp32 tiles fewer
    assert keys["shared"] - exchange["shared"] >= half_staging - 1024, (keys, exchange)
    assert exchange["reduce"] > 0, exchange


def test_one_loop_with_staged_rows_frees_registers_in_the_causal_kernel():
    # causal: compiled beside the unmasked loop, the masked loops keep it spilling; one loop with the
    # mask under a run-time branch, and lse_i, D_i in shared memory, spill far less (compile-only)
    plain = _compile(128, True, "bfloat16", 2, "d", "tma", "lag", "g0")
    one = _compile(128, True, "bfloat16", 2, "d", "tma", "lag", "g0", "rows", "one")
    assert one["stack"] < plain["stack"] // 2, (plain, one)


@pytest.mark.parametrize("kwargs, name", [(dict(num_buffers=0), "num_buffers"), (dict(dq_split="rows"), "dq_split"),
                                          (dict(dq_reduce="nccl"), "dq_reduce"),
                                          (dict(consumer_regs=250), "consumer_regs"), (dict(head_group=-1), "head_group")])
def test_bad_config_names_the_field(kwargs, name):
    with pytest.raises(ValueError, match=name):
        gb.GluonBwdConfig(**kwargs)


def test_dq_split_follows_the_head_dim_unless_given():
    assert gb.GluonBwdConfig().split(128) == "d" and gb.GluonBwdConfig().split(64) == "keys"
    assert gb.GluonBwdConfig(dq_split="keys").split(128) == "keys"


def test_default_schedule_is_the_one_measured_fastest_for_the_shape():
    # benchmarks/NOTES.md, "Session 7 (branch bwd6)": staged rows and the dS^T exchange at both head
    # dims, dQ a step behind at d = 128 only, one loop when causal; the launch order by MHA / GQA
    for d in (64, 128):
        for causal in (False, True):
            for group in (1, 4):
                cfg = gb.default_config(d, causal, group)
                where = f"d={d} causal={causal} group={group}: {cfg}"
                assert cfg.split(d) == "d" and cfg.rows_in_smem, where
                assert cfg.lag_dq == (d == 128), where
                assert cfg.one_loop == causal, where
                assert cfg.heavy_first == (causal and group > 1), where
                assert cfg.head_group == (0 if causal and group == 1 else 1), where
                assert cfg.smem_bytes(d) <= SMEM_LIMIT, where


def test_launch_order_groups_as_many_heads_as_fill_the_sms():
    fill = gb.GluonBwdConfig(head_group=0)
    assert fill.heads_per_group(heads=64, key_blocks=32) == 4  # N = 4096: 4 heads x 32 blocks ~ 132 SMs
    assert fill.heads_per_group(heads=16, key_blocks=128) == 1  # N = 16384: one head fills them
    assert fill.heads_per_group(heads=2, key_blocks=8) == 2  # never more heads than there are
    assert gb.GluonBwdConfig(head_group=3).heads_per_group(heads=8, key_blocks=4) == 3
    assert gb.GluonBwdConfig(heavy_first=True, head_group=3).heads_per_group(heads=8, key_blocks=4) == 8
    assert gb.GluonBwdConfig().heads_per_group(heads=8, key_blocks=4) == 1


def test_not_supported_off_a_gpu_and_the_ladder_falls_back_to_two_pass():
    from flashlab.attnspec import AttnSpec

    q = torch.zeros(1, 2, 256, 128, dtype=torch.bfloat16)  # CPU tensors
    assert not gb.supports(q, q, AttnSpec(causal=True))
    assert ladder.resolve_backward("bwd_gluon_ws", q, q, AttnSpec(causal=True)) == "bwd_two_pass"
    assert "bwd_gluon_ws" in ladder.BWD_RUNGS


def test_unsupported_inputs_are_not_claimed(monkeypatch):
    from flashlab.attnspec import AttnSpec
    from flashlab.kernels import flash_fwd_gluon

    monkeypatch.setattr(flash_fwd_gluon, "_runs_here", lambda q: True)  # as if on an sm90 GPU
    q = torch.zeros(1, 2, 256, 128, dtype=torch.bfloat16)
    assert gb.supports(q, q, AttnSpec(causal=True, causal_align="bottom_right"))
    assert not gb.supports(q.float(), q.float(), AttnSpec())  # fp32
    assert not gb.supports(q[..., :32], q[..., :32], AttnSpec())  # d = 32
    assert not gb.supports(q, q, AttnSpec(mask_mod=lambda qi, ki: ki <= qi))
    assert ladder.resolve_backward("bwd_gluon_ws", q.float(), q.float(), AttnSpec()) == "bwd_two_pass"


def test_measured_backward_names_the_gluon_rung_only_where_a_measurement_put_it(monkeypatch):
    monkeypatch.setattr(ladder, "GLUON_BACKWARD_MIN_N", {(128, True): 4096})
    monkeypatch.setattr(ladder, "FUSED_BACKWARD_MIN_N", {})
    assert ladder.measured_backward(128, True, 4096, 8192) == "bwd_gluon_ws"
    assert ladder.measured_backward(128, True, 2048, 8192) == "bwd_two_pass"
    assert ladder.measured_backward(128, False, 8192, 8192) == "bwd_two_pass"
    assert ladder.measured_backward(64, True, 8192, 8192) == "bwd_two_pass"


# ------------------------------------------------------------------ on a GPU


def _cuda_sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


gpu = pytest.mark.skipif(not _cuda_sm90(), reason="the Gluon backward runs on CUDA sm90 (Hopper) only")

CASES = [  # B, H, Hkv, Nq, Nk, d, AttnSpec fields
    (2, 3, 3, 1000, 1000, 128, dict(causal=False)),
    (2, 3, 3, 1000, 1000, 128, dict(causal=True)),
    (1, 8, 2, 777, 1000, 128, dict(causal=True)),  # GQA, ragged Nq
    (1, 4, 1, 17, 300, 128, dict(causal=False)),  # MQA, a short query block
    (2, 2, 2, 300, 17, 128, dict(causal=False)),  # a key block with 17 keys
    (1, 4, 2, 300, 517, 128, dict(causal=True, causal_align="bottom_right")),
    (1, 2, 2, 640, 1024, 128, dict(causal=True, window=200)),
    (2, 3, 3, 1000, 1000, 64, dict(causal=False)),
    (1, 8, 2, 777, 1000, 64, dict(causal=True)),
    (1, 2, 2, 1, 239, 64, dict(causal=True)),  # one query row that sees one key
]


def _grads_and_reference(case, dtype, config, seed):
    from flashlab.attnspec import AttnSpec
    from flashlab.kernels import flash_fwd_hopper
    from flashlab.kernels.attention import attention_reference

    b, h, hkv, nq, nk, d, options = case
    spec = AttnSpec(**options)
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, do = (torch.randn(b, h, nq, d, device="cuda", generator=g).to(dtype) for _ in range(2))  # (B, H, Nq, d)
    k, v = (torch.randn(b, hkv, nk, d, device="cuda", generator=g).to(dtype) for _ in range(2))  # (B, Hkv, Nk, d)
    assert gb.supports(q, k, spec)
    o, lse = flash_fwd_hopper.forward(q, k, v, spec)
    grads = gb.backward(q, k, v, o, lse, do, spec, config=config)
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    same = [t.clone().requires_grad_() for t in (q, k, v)]
    attention_reference(*ref, spec=spec).backward(do.double())
    attention_reference(*same, spec=spec, upcast=False).backward(do)
    return grads, ref, same


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("reduce", ["tma", "atomic"])
def test_gluon_backward_matches_float64_on_gpu(dtype, case, reduce, monkeypatch):
    from flashlab.kernels.attention import allowed_error, max_error

    if reduce == "tma" and not gb.tma_reduce_available():
        pytest.skip("this Triton's Gluon has no tile reduce")
    monkeypatch.setenv("FLASHLAB_POISON", "1")  # dk, dv start as NaN: an unwritten row shows
    import dataclasses

    b, h, hkv, nq, nk, d, options = CASES[case]
    seed = 100 * case + len(str(dtype)) + len(reduce)
    cfg = dataclasses.replace(gb.default_config(d, options["causal"], h // hkv), dq_reduce=reduce)  # the shipped schedule
    grads, ref, same = _grads_and_reference(CASES[case], dtype, cfg, seed)
    for name, got, r, p in zip("qkv", grads, ref, same):
        assert got.shape == r.grad.shape and got.dtype == dtype, f"d{name} {tuple(got.shape)} {got.dtype}"
        err, allowed = max_error(got, r.grad), allowed_error(r.grad, p.grad, ref[2].grad if name == "k" else None)
        assert err <= allowed, f"seed={seed} {CASES[case]} {reduce}: d{name} error {err:.3g} > allowed {allowed:.3g}"


VARIANTS = [  # head dim, GluonBwdConfig fields: every schedule the bench may time
    (128, dict(dq_split="d")), (128, dict(dq_split="keys")), (64, dict(dq_split="keys")),
    (128, dict(lag_dq=True)), (128, dict(early_dq=False)), (128, dict(heavy_first=True)),
    (128, dict(lag_dq=True, heavy_first=True)), (128, dict(lag_dq=True, num_buffers=3)),
    (64, dict(heavy_first=True)), (64, dict(num_buffers=3)), (64, dict(early_dq=False)),
    (128, dict(lag_dq=True, head_group=0)), (64, dict(head_group=0)),
    (128, dict(lag_dq=True, rows_in_smem=True)), (64, dict(rows_in_smem=True)),
    (128, dict(lag_dq=True, head_group=0, rows_in_smem=True, one_loop=True)), (64, dict(one_loop=True)),
    (64, dict(head_group=0, rows_in_smem=True, one_loop=True)),
    (64, dict(dq_split="d")), (64, dict(dq_split="d", lag_dq=True, rows_in_smem=True)),  # the exchange at d = 64
    (64, dict(dq_split="d", lag_dq=True, head_group=0, rows_in_smem=True, one_loop=True)),
    (128, dict(heavy_first=True, rows_in_smem=True)), (128, dict(heavy_first=True, rows_in_smem=True, one_loop=True)),
    (128, dict(lag_dq=True, heavy_first=True, rows_in_smem=True, one_loop=True)),
]


def _variant_id(i):
    d, fields = VARIANTS[i]
    return f"d{d}-" + "-".join(k if v is True else f"{k}{v}" for k, v in fields.items())


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("variant", range(len(VARIANTS)), ids=_variant_id)
def test_gluon_backward_schedules_agree_with_float64_on_gpu(variant, causal):
    from flashlab.kernels.attention import allowed_error, max_error

    d, fields = VARIANTS[variant]
    cfg = gb.GluonBwdConfig(**{"dq_reduce": gb.default_config(d).dq_reduce, **fields})
    assert cfg.smem_bytes(d) <= SMEM_LIMIT, cfg
    seed = 10 * variant + int(causal)
    grads, ref, same = _grads_and_reference((1, 4, 2, 700, 900, d, dict(causal=causal)), torch.bfloat16, cfg, seed)
    for name, got, r, p in zip("qkv", grads, ref, same):
        err, allowed = max_error(got, r.grad), allowed_error(r.grad, p.grad, ref[2].grad if name == "k" else None)
        assert err <= allowed, f"seed={seed} {cfg}: d{name} error {err:.3g} > allowed {allowed:.3g}"


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("head_group", [2, 0])
def test_every_key_block_of_every_head_runs_once_in_grouped_launch_orders(head_group, causal, monkeypatch):
    # B * Hkv = 5 heads in groups of 2 (the last group has one head) or as many as fill the SMs:
    # the program -> (head, key block) map must cover every pair once, whatever the group size
    from flashlab.kernels.attention import allowed_error, max_error

    monkeypatch.setenv("FLASHLAB_POISON", "1")  # dk, dv start as NaN: a key block no program ran shows
    cfg = gb.GluonBwdConfig(dq_reduce=gb.default_config(128).dq_reduce, lag_dq=True, head_group=head_group)
    seed = 500 + head_group + int(causal)
    grads, ref, same = _grads_and_reference((1, 5, 5, 700, 1100, 128, dict(causal=causal)), torch.bfloat16, cfg,
                                            seed)
    for name, got, r, p in zip("qkv", grads, ref, same):
        err, allowed = max_error(got, r.grad), allowed_error(r.grad, p.grad, ref[2].grad if name == "k" else None)
        assert err <= allowed, f"seed={seed} {cfg}: d{name} error {err:.3g} > allowed {allowed:.3g}"


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
def test_gluon_backward_reads_only_its_own_heads_rows(causal, d):
    """Ragged Nq and Nk, GQA (H = 4, Hkv = 2): every input of the second kv head (and of its query
    heads) is NaN. The gradients of the first kv head's heads must be finite and right: no tile
    of theirs may read past a head's last row, and no dQ share may land in another head's rows."""
    from flashlab.kernels import flash_fwd_hopper
    from flashlab.kernels.attention import allowed_error, attention_reference, max_error

    seed = 77 + d + int(causal)
    g = torch.Generator(device="cuda").manual_seed(seed)
    nq, nk = 333, 517
    q, do = (torch.randn(1, 4, nq, d, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(1, 2, nk, d, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
    o, lse = flash_fwd_hopper.forward(q, k, v, causal)
    for t in (q, do, o, k, v):
        t[:, t.shape[1] // 2:] = float("nan")  # the second kv head and its two query heads
    lse[:, 2:] = float("nan")
    dq, dk, dv = gb.backward(q, k, v, o, lse, do, causal)
    ref = [t[:, :n].double().requires_grad_() for t, n in ((q, 2), (k, 1), (v, 1))]
    same = [t[:, :n].clone().requires_grad_() for t, n in ((q, 2), (k, 1), (v, 1))]
    attention_reference(*ref, causal=causal).backward(do[:, :2].double())
    attention_reference(*same, causal=causal, upcast=False).backward(do[:, :2])
    for name, got, r, p in zip("qkv", (dq[:, :2], dk[:, :1], dv[:, :1]), ref, same):
        err, allowed = max_error(got, r.grad), allowed_error(r.grad, p.grad, ref[2].grad if name == "k" else None)
        assert err <= allowed, f"seed={seed}: d{name} of the clean heads, error {err:.3g} > allowed {allowed:.3g}"
    assert torch.isnan(dk[:, 1:]).any(), f"seed={seed}: the NaN kv head's dK should carry its NaN"


@gpu
@pytest.mark.gpu
def test_flash_attention_trains_through_the_gluon_backward_where_chosen(monkeypatch):
    from flashlab.kernels.attention import allowed_error, attention_reference, flash_attention, max_error

    monkeypatch.setattr(ladder, "GLUON_BACKWARD_MIN_N", {(128, True): 1})
    calls = []
    run = ladder.run_backward
    monkeypatch.setattr(ladder, "run_backward", lambda name, *a: calls.append(name) or run(name, *a))
    g = torch.Generator(device="cuda").manual_seed(4242)
    q, k, v, do = (torch.randn(1, 4, 1024, 128, device="cuda", generator=g).to(torch.bfloat16) for _ in range(4))
    mine = [t.clone().requires_grad_() for t in (q, k, v)]
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    same = [t.clone().requires_grad_() for t in (q, k, v)]
    flash_attention(*mine, causal=True).backward(do)
    attention_reference(*ref, causal=True).backward(do.double())
    attention_reference(*same, causal=True, upcast=False).backward(do)
    assert calls == ["bwd_gluon_ws"], calls
    for name, a, r, p in zip("qkv", mine, ref, same):
        err, allowed = max_error(a.grad, r.grad), allowed_error(r.grad, p.grad, ref[2].grad if name == "k" else None)
        assert err <= allowed, f"d{name} error {err:.3g} > allowed {allowed:.3g}"


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("d", [64, 128])
def test_gradients_cancel_where_a_query_sees_one_key(dtype, d):
    # Nq = 1, causal: the query sees key 0 only, so dS = P (dP - D) = 0 and dK, dQ are 0 in float64;
    # D_i from flash_bwd.preprocess (the diagonal of O dO^T) is summed as the wgmma sums dP^T
    from flashlab.kernels import flash_fwd_hopper

    g = torch.Generator(device="cuda").manual_seed(d + len(str(dtype)))
    q, do = (torch.randn(1, 2, 1, d, device="cuda", generator=g).to(dtype) for _ in range(2))  # (B, H, 1, d)
    k, v = (torch.randn(1, 2, 239, d, device="cuda", generator=g).to(dtype) for _ in range(2))  # (B, H, 239, d)
    o, lse = flash_fwd_hopper.forward(q, k, v, True)
    dq, dk, dv = gb.backward(q, k, v, o, lse, do, True)
    for name, grad in (("dk", dk), ("dq", dq)):
        worst = grad.double().abs().max().item()
        assert worst <= 1e-5, f"{name} should cancel to 0 (one visible key), max |{name}| = {worst:.3g}"
    assert dv[:, :, 0].double().abs().max() > 0, "dV of the visible key is dO, not 0"
