"""The warp-specialised Gluon rung (``flash_fwd_gluon``, ladder entry ``v5_gluon_ws``).

Gluon has no CPU interpreter, so on a machine without a GPU this file checks what can be checked
there: the kernel compiles for sm90 (Triton's compiler and ptxas need no GPU, tests/sm90_compile.py)
into what the design says (wgmma, register reallocation between partitions, three warpgroups, no
spilled registers, the shared memory the config predicts); bad configs and inputs are refused with
the argument named; the dispatch never picks this rung off a GPU. The numbers are checked on a GPU
(the ``gpu`` tests below, and benchmarks/gpu_sweep.py, benchmarks/gluon_probe.py check).
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from flashlab.kernels import flash_fwd_gluon as fg  # noqa: E402
from flashlab.kernels import ladder  # noqa: E402

HERE = Path(__file__).resolve().parent
SMEM_LIMIT = 227 * 1024  # bytes of shared memory one CTA may use on sm90


def _compile(d, causal, dtype, *config):
    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src"))
    env.pop("TRITON_INTERPRET", None)  # compiled mode: under the interpreter Gluon's own helpers are not compilable
    run = subprocess.run([sys.executable, str(HERE / "sm90_compile.py"), str(d), str(int(causal)), dtype,
                          *map(str, config)], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("d, causal, dtype", [(128, False, "bfloat16"), (128, True, "float16"),
                                              (64, True, "bfloat16")])
def test_compiles_for_sm90_without_spills(d, causal, dtype):
    report = _compile(d, causal, dtype)
    assert report["target"], "not compiled for sm_90a"
    assert report["local"] == 0, f"registers spilled to local memory: {report}"
    assert report["threads"] == 384, f"expected 3 warpgroups (producer + 2 consumers): {report}"
    assert report["setmaxnreg"] > 0, f"no register reallocation between partitions: {report}"
    # two consumers, each a QK^T and a PV product at three places (first block, loop, last block)
    assert report["wgmma"] >= 4, f"expected wgmma instructions: {report}"
    assert report["smem_model"] <= report["shared"] <= SMEM_LIMIT, report


def test_compiles_for_sm90_with_a_bottom_right_sliding_window_without_spills():
    report = _compile(128, True, "float16", 128, 2, "bottom_right", 100)
    assert report["local"] == 0 and report["threads"] == 384 and report["wgmma"] >= 4, report


def test_largest_ring_fits_shared_memory():
    report = _compile(128, False, "bfloat16", 128, 3)  # 3 x (K + V) blocks of 128 x 128 + Q
    assert report["local"] == 0 and report["shared"] <= SMEM_LIMIT, report


@pytest.mark.parametrize("kwargs, name", [(dict(block_n=96), "block_n"), (dict(num_buffers=0), "num_buffers"),
                                          (dict(consumer_regs=250), "consumer_regs"),
                                          (dict(producer_regs=16), "producer_regs")])
def test_bad_config_names_the_field(kwargs, name):
    with pytest.raises(ValueError, match=name):
        fg.GluonConfig(**kwargs)


def test_smem_model_counts_q_and_both_rings():
    assert fg.GluonConfig(block_n=128, num_buffers=2).smem_bytes(128) == (128 + 2 * 2 * 128) * 128 * 2


@pytest.mark.parametrize("change, match", [
    (lambda q, k, v: (q.float(), k.float(), v.float()), "float16 or bfloat16"),
    (lambda q, k, v: (torch.cat([q, q[:, :1]], 1), k, v), "divides q's H"),  # H = 3, Hkv = 2
    (lambda q, k, v: (q[..., :32], k[..., :32], v[..., :32]), "head dim d=32"),
    (lambda q, k, v: (q[0], k, v), "q.shape"),
])
def test_bad_inputs_are_refused_by_name(change, match):
    q = torch.zeros(1, 2, 8, 64, dtype=torch.float16)
    q2, k2, v2 = change(q, q.clone(), q.clone())
    with pytest.raises((TypeError, ValueError), match=match):
        fg.forward(q2, k2, v2)
    assert not fg.supports(q2, k2, v2)


def test_cpu_tensors_are_refused_by_name():
    q = torch.zeros(1, 2, 8, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="q is on cpu.*CUDA sm90"):
        fg.forward(q, q, q)


def test_mask_mod_is_refused_by_name_and_window_is_not_preferred_unmeasured():
    from flashlab.attnspec import AttnSpec

    q = torch.zeros(1, 2, 256, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="mask_mod"):
        fg.forward(q, q, q, AttnSpec(mask_mod=lambda qi, ki: ki <= qi))
    with pytest.raises(ValueError, match="mask_mod"):
        ladder.resolve("v5_gluon_ws", q, q, q, AttnSpec(mask_mod=lambda qi, ki: ki <= qi))
    assert "window" in fg.SUPPORTED_OPTIONS and "causal_align" in fg.SUPPORTED_OPTIONS


def test_not_supported_or_preferred_off_a_gpu():
    q = torch.zeros(1, 2, 4096, 128, dtype=torch.float16)  # CPU tensors
    assert not fg.supports(q, q, q) and not fg.preferred(q, q, False)
    assert ladder.resolve("v5_gluon_ws", q, q, q, False) == ladder.resolve("v4_hopper", q, q, q, False)
    assert ladder.best_rung(q, q, q, False) != "v5_gluon_ws"


def test_chosen_with_bottom_right_where_preferred_but_not_with_a_window(monkeypatch):
    from flashlab.attnspec import AttnSpec

    q = torch.zeros(1, 4, 2048, 128, dtype=torch.bfloat16)  # (B, H, Nq, d)
    k = torch.zeros(1, 1, 8192, 128, dtype=torch.bfloat16)  # (B, Hkv, Nk, d): a chunk against a longer cache
    monkeypatch.setattr(fg, "preferred", lambda q, k, causal: True)  # as on an H200 at this shape
    assert ladder.choose(q, k, k, AttnSpec(causal=True, causal_align="bottom_right")) == "v5_gluon_ws"
    assert ladder.choose(q, k, k, AttnSpec(causal=True)) == "v5_gluon_ws"
    assert ladder.choose(q, k, k, AttnSpec(causal=True, causal_align="bottom_right", window=256)) != "v5_gluon_ws"
    monkeypatch.setattr(fg, "preferred", lambda q, k, causal: False)
    assert ladder.choose(q, k, k, AttnSpec(causal=True, causal_align="bottom_right")) != "v5_gluon_ws"


# ------------------------------------------------------------------ on a GPU


def _cuda_sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


gpu = pytest.mark.skipif(not _cuda_sm90(), reason="the Gluon rung runs on CUDA sm90 (Hopper) only")


@pytest.fixture
def _poison(monkeypatch):
    monkeypatch.setenv("FLASHLAB_POISON", "1")


@gpu
@pytest.mark.gpu
@pytest.mark.usefixtures("_poison")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("Nq, Nk", [(1, 1), (17, 300), (300, 17), (1000, 1000), (2048, 2048), (129, 4096)])
@pytest.mark.parametrize("block_n, nbuf", [(128, 2), (64, 3)])
def test_gluon_rung_matches_reference_on_gpu(dtype, causal, d, Nq, Nk, block_n, nbuf):
    from flashlab.kernels.attention import allowed_error, attention_reference, max_error

    seed = 7 * Nq + 11 * Nk + d + block_n + int(causal)  # fixed per case, different across cases
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(2, 3, n, d, device="cuda", generator=g).to(dtype) for n in (Nq, Nk, Nk))
    o, lse = fg.forward(q, k, v, causal, config=fg.GluonConfig(block_n, nbuf))
    ref = attention_reference(q.double(), k.double(), v.double(), causal=causal)
    pt = attention_reference(q, k, v, causal=causal, upcast=False)
    assert max_error(o, ref) <= allowed_error(ref, pt), f"seed={seed}: error {max_error(o, ref):.3g}"
    s = q.double() @ k.double().transpose(-2, -1) / d**0.5  # (2, 3, Nq, Nk)
    if causal:
        s = s.masked_fill(~torch.ones(Nq, Nk, dtype=torch.bool, device="cuda").tril(), float("-inf"))
    assert max_error(lse, torch.logsumexp(s, -1)) < 1e-3, f"seed={seed}: lse"


@gpu
@pytest.mark.gpu
@pytest.mark.usefixtures("_poison")
@pytest.mark.parametrize("Hkv", [1, 4])
def test_flash_attention_runs_a_bottom_right_chunk_on_the_gluon_rung(Hkv, monkeypatch):
    from flashlab.attnspec import AttnSpec
    from flashlab.kernels.attention import allowed_error, flash_attention, max_error

    monkeypatch.setattr(fg, "PREFERRED_MIN_FLOPS", 0)  # a small batch keeps the float64 reference small
    g = torch.Generator(device="cuda").manual_seed(300 + Hkv)
    q = torch.randn(1, 4, 2048, 128, device="cuda", generator=g).to(torch.bfloat16)  # (B, H, Nq, d)
    k, v = (torch.randn(1, Hkv, 5000, 128, device="cuda", generator=g).to(torch.bfloat16)
            for _ in range(2))  # (B, Hkv, Nk, d): a ragged last key tile
    spec = AttnSpec(causal=True, causal_align="bottom_right")
    assert ladder.best_rung(q, k, v, spec) == "v5_gluon_ws"
    out = flash_attention(q, k, v, causal=True, causal_align="bottom_right")
    kk, vv = (t.double().repeat_interleave(4 // Hkv, 1) for t in (k, v))  # (B, H, Nk, d)
    mask = torch.ones(2048, 5000, dtype=torch.bool, device="cuda").tril(5000 - 2048)  # query i sees j <= i + Nk - Nq
    s = (q.double() @ kk.transpose(-2, -1) / 128**0.5).masked_fill(~mask, float("-inf"))  # (B, H, Nq, Nk)
    ref = torch.softmax(s, -1) @ vv
    pt = (torch.softmax((q @ kk.to(q.dtype).transpose(-2, -1)).float() / 128**0.5 + torch.where(
        mask, 0.0, float("-inf")), -1).to(q.dtype) @ vv.to(q.dtype))
    assert max_error(out, ref) <= allowed_error(ref, pt), f"Hkv={Hkv}: error {max_error(out, ref):.3g}"
    _, lse = ladder.run(ladder.choose(q, k, v, spec), q, k, v, spec)  # what the backward will read: (B, H, Nq)
    assert max_error(lse, torch.logsumexp(s, -1)) < 2e-3, f"Hkv={Hkv}: lse"


@gpu
@pytest.mark.gpu
@pytest.mark.usefixtures("_poison")
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_flash_attention_uses_gluon_rung_where_preferred_and_trains(causal, monkeypatch):
    from flashlab.kernels.attention import allowed_error, attention_reference, flash_attention, max_error

    # a small batch, so that the float64 reference stays small: the work rule set aside here
    # (PREFERRED_MIN_FLOPS is about launch overhead, not about what the rung computes)
    monkeypatch.setattr(fg, "PREFERRED_MIN_FLOPS", 0)
    seed = 2048 + int(causal)
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(1, 2, 2048, 128, device="cuda", generator=g).to(torch.bfloat16) for _ in range(3))
    assert ladder.best_rung(q, k, v, causal) == "v5_gluon_ws"
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = flash_attention(*leaves, causal=causal)
    ref = attention_reference(q.double(), k.double(), v.double(), causal=causal)
    pt = attention_reference(q, k, v, causal=causal, upcast=False)
    assert max_error(out, ref) <= allowed_error(ref, pt), f"seed={seed}"
    out.float().sum().backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() for t in leaves), f"seed={seed}"


# Nk is a multiple of every block_n here (ragged key lengths: the GQA test at the end), so each case
# plants NaN only in key blocks no query block visits, as in tests/test_visibility.py
SPEC_CASES = [  # Nq, Nk, spec
    (128, 1024, "bottom_right", 100),  # one query block: key blocks below the window never loaded
    (300, 1024, "bottom_right", None),  # causal bottom-right: the first 724 keys seen by every row
    (1000, 1024, "top_left", 200),  # a band: each query block loads its own few key blocks
    (640, 1024, "top_left", 1),  # a window of one key: the diagonal alone
    (200, 768, "bottom_right", 333),  # a window wider than one query block, ragged query rows
]


@gpu
@pytest.mark.gpu
@pytest.mark.usefixtures("_poison")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("case", range(len(SPEC_CASES)))
@pytest.mark.parametrize("block_n, nbuf", [(128, 2), (64, 3)])
def test_gluon_rung_computes_window_and_bottom_right_without_loading_unseen_keys(dtype, d, case, block_n, nbuf):
    import numpy as np

    from flashlab.attnspec import AttnSpec
    from flashlab.kernels.attention import allowed_error, attention_reference, max_error
    from flashlab.visibility import TileVisibility

    nq, nk, align, window = SPEC_CASES[case]
    spec = AttnSpec(causal=True, causal_align=align, window=window)
    seed = 1000 * case + d + block_n
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(2, 3, n, d, device="cuda", generator=g).to(dtype) for n in (nq, nk, nk))
    # keys in key blocks no query block of BLOCK_M rows visits: NaN, so loading one shows
    seen = TileVisibility(spec, nq, nk, fg.BLOCK_M, block_n).visited_tiles.any(axis=0)  # (key blocks,)
    unseen = torch.from_numpy(np.repeat(~seen, block_n)[:nk]).cuda()
    k_nan, v_nan = k.clone(), v.clone()
    k_nan[:, :, unseen] = float("nan")
    v_nan[:, :, unseen] = float("nan")
    where = f"seed={seed} Nq={nq} Nk={nk} {spec} block_n={block_n} ({int(unseen.sum())} keys poisoned)"
    o, lse = fg.forward(q, k_nan, v_nan, spec, config=fg.GluonConfig(block_n, nbuf))
    ref = attention_reference(q.double(), k.double(), v.double(), spec=spec)
    pt = attention_reference(q, k, v, spec=spec, upcast=False)
    assert max_error(o, ref) <= allowed_error(ref, pt), f"{where}: error {max_error(o, ref):.3g}"
    visible = torch.from_numpy(spec.mask(np.arange(nq)[:, None], np.arange(nk)[None, :], nq, nk)).cuda()
    s = (q.double() @ k.double().transpose(-2, -1) / d**0.5).masked_fill(~visible, float("-inf"))
    assert max_error(lse, torch.logsumexp(s, -1)) < 1e-3, f"{where}: lse"


@gpu
@pytest.mark.gpu
def test_gluon_compiles_the_shared_loop_bounds_to_the_numpy_models_numbers():
    # the Gluon rung calls kernels.visible.kv_bounds, a @triton.jit function, compiled by Gluon's
    # front end: check that there it returns visibility.kv_stages's numbers over a grid of shapes
    import itertools

    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl

    from flashlab.attnspec import AttnSpec
    from flashlab.kernels.visible import kv_bounds
    from flashlab.visibility import kv_stages

    @gluon.jit
    def probe(Out, N_Q, N_K, DIAG, WINDOW, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
              CAUSAL: gl.constexpr, HAS_WINDOW: gl.constexpr):
        pid = gl.program_id(0)
        lo, full_lo, full_hi, hi = kv_bounds(pid, N_Q, N_K, DIAG, WINDOW, None, BLOCK_M, BLOCK_N,
                                             CAUSAL, HAS_WINDOW, False)
        gl.store(Out + pid * 4, lo)
        gl.store(Out + pid * 4 + 1, full_lo)
        gl.store(Out + pid * 4 + 2, full_hi)
        gl.store(Out + pid * 4 + 3, hi)

    checked = 0
    for nq, nk, block_n, causal, align, window in itertools.product(
            (1, 130, 700), (64, 333, 1024), (64, 128), (False, True), ("top_left", "bottom_right"), (None, 1, 100)):
        if not causal and (window or align != "top_left"):
            continue
        spec = AttnSpec(causal=causal, causal_align=align, window=window)
        try:
            spec.check_lengths(nq, nk)
        except ValueError:
            continue
        rule = spec.kernel_args(nq, nk)
        n = -(-nq // fg.BLOCK_M)
        out = torch.full((n, 4), -7, dtype=torch.int32, device="cuda")
        probe[(n,)](out, nq, nk, rule["DIAG"], rule["WINDOW"], BLOCK_M=fg.BLOCK_M, BLOCK_N=block_n,
                    CAUSAL=rule["CAUSAL"], HAS_WINDOW=rule["HAS_WINDOW"], num_warps=4)
        flags = (rule["DIAG"], rule["WINDOW"], causal, window is not None)
        for p in range(n):
            expected = kv_stages(p, fg.BLOCK_M, block_n, nq, nk, *flags)
            assert tuple(out[p].tolist()) == expected, f"{spec} Nq={nq} Nk={nk} block_n={block_n} block {p}"
        checked += 1
    assert checked > 40


def test_dispatch_prefers_the_gluon_rung_for_ragged_keys_and_grouped_heads(monkeypatch):
    """Per-head descriptors zero-fill a short last key tile and GQA is indexed in the kernel, so
    flash_attention's choice depends on the shape and the work (d, Nq, Nk, FLOPs), not on
    Nk % block_n or Hkv."""
    import torch

    from flashlab.kernels import flash_fwd_gluon

    monkeypatch.setattr(flash_fwd_gluon, "_runs_here", lambda q: True)
    q = torch.empty(1, 32, 4096, 128, dtype=torch.float16)  # the GQA rows: B = 1, H = 32, Hkv = 8
    block_n = flash_fwd_gluon.default_config(128, False).block_n
    ragged = torch.empty(1, 8, 32 * block_n + 1, 128, dtype=torch.float16)
    grouped = torch.empty(1, 8, 4096, 128, dtype=torch.float16)
    assert flash_fwd_gluon.preferred(q, ragged, False) and flash_fwd_gluon.preferred(q, grouped, True)
    assert not flash_fwd_gluon.preferred(q[:, :, :1024], grouped, True)  # causal below PREFERRED_MIN_N
    assert not flash_fwd_gluon.preferred(q[..., :64], grouped[..., :64], False)  # d = 64: v4 is faster
    # N = 2048 causal: 3.4e10 FLOP, a ~0.1 ms kernel, where v5's longer launch path made v4 faster
    assert not flash_fwd_gluon.preferred(q[:, :, :2048], grouped[:, :, :2048], True)


@gpu
@pytest.mark.gpu
@pytest.mark.usefixtures("_poison")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("Nq, Nk", [(300, 300), (129, 1000), (1024, 1024)])
@pytest.mark.parametrize("block_n, nbuf", [(128, 2), (64, 3)])
def test_gluon_rung_reads_each_query_heads_kv_head_and_no_other(dtype, causal, d, Nq, Nk, block_n, nbuf):
    """GQA (H = 8, Hkv = 2) with a ragged Nk: kv head 1 is all NaN, so the query heads of kv
    head 0 are right only if no tile of theirs reads past their kv head's last key row."""
    from flashlab.kernels.attention import allowed_error, attention_reference, max_error

    seed = 3 * Nq + 5 * Nk + d + block_n + int(causal)
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(2, 8, Nq, d, device="cuda", generator=g).to(dtype)  # (B, H, Nq, d)
    k, v = (torch.randn(2, 2, Nk, d, device="cuda", generator=g).to(dtype) for _ in range(2))  # (B, Hkv, Nk, d)
    k_nan, v_nan = k.clone(), v.clone()
    k_nan[:, 1], v_nan[:, 1] = float("nan"), float("nan")
    o, lse = fg.forward(q, k_nan, v_nan, causal, config=fg.GluonConfig(block_n, nbuf))
    # query heads 0..3 read kv head 0: against attention on k, v expanded to 8 heads
    k8, v8 = (t.repeat_interleave(4, dim=1)[:, :4] for t in (k, v))  # (B, 4, Nk, d)
    ref = attention_reference(q[:, :4].double(), k8.double(), v8.double(), causal=causal)
    pt = attention_reference(q[:, :4], k8, v8, causal=causal, upcast=False)
    assert max_error(o[:, :4], ref) <= allowed_error(ref, pt), f"seed={seed}: error {max_error(o[:, :4], ref):.3g}"
    assert torch.isnan(o[:, 4:]).all(), f"seed={seed}: query heads of the NaN kv head should be NaN"
    s = q[:, :4].double() @ k8.double().transpose(-2, -1) / d**0.5  # (2, 4, Nq, Nk)
    if causal:
        s = s.masked_fill(~torch.ones(Nq, Nk, dtype=torch.bool, device="cuda").tril(), float("-inf"))
    assert max_error(lse[:, :4], torch.logsumexp(s, -1)) < 1e-3, f"seed={seed}: lse"


@pytest.mark.parametrize("config", ["64,2,240,24,1,8", "shipped"])
def test_persistent_config_compiles_for_sm90_without_spills(config):
    if config == "shipped":  # the short causal rows' config: 128-key blocks, 232 / 40 registers
        c = fg.SHORT_CAUSAL_CONFIG
        config = f"{c.block_n},{c.num_buffers},{c.consumer_regs},{c.producer_regs},{c.persistent},{c.group_heads}"
    report = _compile(128, True, "bfloat16", config, "-")  # one program per SM
    assert report["local"] == 0 and report["threads"] == 384 and report["wgmma"] >= 4, report
    assert report["smem_model"] <= report["shared"] <= SMEM_LIMIT, report


PERSISTENT_CASES = [  # Nq, Nk, causal_align (None: dense), window
    (1000, 1000, "top_left", None),  # causal, ragged last query block
    (1000, 1000, None, None),  # dense
    (1024, 1024, "top_left", None),  # the short causal row's shape
    (300, 1024, "bottom_right", None),  # causal bottom-right
    (1000, 1024, "top_left", 200),  # a band
]


@gpu
@pytest.mark.gpu
@pytest.mark.usefixtures("_poison")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("case", range(len(PERSISTENT_CASES)))
@pytest.mark.parametrize("cfg", [fg.SHORT_CAUSAL_CONFIG, fg.GluonConfig(128, 2, persistent=1, group_heads=8),
                                 fg.GluonConfig(64, 2, persistent=1, group_heads=7),
                                 fg.GluonConfig(64, 3, persistent=1, group_heads=1)],
                         ids=["shipped", "128x2g8", "64x2g7", "64x3g1"])
def test_persistent_gluon_rung_matches_reference_on_gpu(dtype, case, cfg):
    """One program per SM looping over several (head, query block) tiles each (B*H = 80 heads:
    hundreds of tiles for ~132 programs), GQA (Hkv = 8), groups of heads with a short last group."""
    from flashlab.attnspec import AttnSpec
    from flashlab.kernels.attention import allowed_error, attention_reference, max_error

    nq, nk, align, window = PERSISTENT_CASES[case]
    spec = AttnSpec(causal=align is not None, causal_align=align or "top_left", window=window)
    seed = 500 * case + cfg.block_n + cfg.group_heads
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(2, 40, nq, 128, device="cuda", generator=g).to(dtype)  # (B, H, Nq, d)
    k, v = (torch.randn(2, 8, nk, 128, device="cuda", generator=g).to(dtype) for _ in range(2))  # (B, Hkv, Nk, d)
    o, lse = fg.forward(q, k, v, spec, config=cfg)
    k40, v40 = (t.repeat_interleave(5, dim=1) for t in (k, v))  # (B, H, Nk, d)
    ref = attention_reference(q.double(), k40.double(), v40.double(), spec=spec)
    pt = attention_reference(q, k40, v40, spec=spec, upcast=False)
    where = f"seed={seed} Nq={nq} Nk={nk} {spec} {cfg}"
    assert max_error(o, ref) <= allowed_error(ref, pt), f"{where}: error {max_error(o, ref):.3g}"
    import numpy as np

    visible = torch.from_numpy(spec.mask(np.arange(nq)[:, None], np.arange(nk)[None, :], nq, nk)).cuda()
    s = (q.double() @ k40.double().transpose(-2, -1) / 128**0.5).masked_fill(~visible, float("-inf"))
    assert max_error(lse, torch.logsumexp(s, -1)) < 1e-3, f"{where}: lse"


def test_dispatch_runs_the_short_causal_row_persistent_and_only_it(monkeypatch):
    """The short causal row (B = 16, H = 16, N = 1024, d = 128) goes to this rung with the
    persistent config; d = 64, shorter or lighter causal rows do not; dense and longer rows keep
    the default (one program per tile)."""
    monkeypatch.setattr(fg, "_runs_here", lambda q: True)
    q = torch.empty(16, 16, 1024, 128, dtype=torch.bfloat16)  # (B, H, N, d)
    assert fg.preferred(q, q, True) and fg.default_config(128, True, 1024, 1024) == fg.SHORT_CAUSAL_CONFIG
    assert fg.SHORT_CAUSAL_CONFIG.persistent == 1
    assert not fg.preferred(q[..., :64], q[..., :64], True), "d = 64"
    assert not fg.preferred(q[:8], q[:8], True), "half the work (3.4e10 FLOP): launch-bound, v4"
    assert not fg.preferred(q[:, :, :512], q[:, :, :512], True), "N = 512"
    assert fg.default_config(128, True, 4096, 4096) == fg.default_config(128, True)
    assert fg.default_config(128, False, 1024, 1024) == fg.default_config(128, False)
    # the shape-and-work rule alone (what the bench's row header and notebook 08's table ask)
    assert fg.prefers_work(128, 1024, 1024, True, 16 * 16) and not fg.prefers_work(128, 1024, 1024, True, 16)


@gpu
@pytest.mark.gpu
@pytest.mark.usefixtures("_poison")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_flash_attention_runs_the_short_causal_row_on_the_persistent_rung(dtype, monkeypatch):
    from flashlab.kernels.attention import allowed_error, attention_reference, flash_attention, max_error

    monkeypatch.setattr(fg, "SHORT_CAUSAL_MIN_FLOPS", 0)  # 2 x 24 heads, so the float64 reference stays small
    seed = 1024 + (dtype == torch.bfloat16)
    g = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = (torch.randn(2, 24, 1100, 128, device="cuda", generator=g).to(dtype) for _ in range(3))
    assert ladder.best_rung(q, k, v, True) == "v5_gluon_ws"
    out = flash_attention(q, k, v, causal=True)
    ref = attention_reference(q.double(), k.double(), v.double(), causal=True)
    pt = attention_reference(q, k, v, causal=True, upcast=False)
    assert max_error(out, ref) <= allowed_error(ref, pt), f"seed={seed}: error {max_error(out, ref):.3g}"
