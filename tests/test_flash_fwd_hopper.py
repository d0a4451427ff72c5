"""The Hopper rung (flash_fwd_hopper) and the benchmark harness around it.

Without a GPU the kernel runs in Triton's CPU interpreter (tests/conftest.py), which executes
tensor-descriptor loads too; fp16 only there (its bf16 dot is wrong). Small blocks keep it fast.
"""
import importlib.util
import math
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from flashlab.kernels import flash_fwd_hopper as hopper  # noqa: E402
from flashlab.kernels.attention import attention_reference, allowed_error, max_error  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SMALL = hopper.HopperConfig(block_q=32, block_k=16, num_warps=4, num_stages=2)
pytestmark = pytest.mark.interpreter


def _qkv(b, h, nq, nk, d, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, n, d, generator=g).to(DEVICE, torch.float16) for n in (nq, nk, nk)]


PERSISTENT = hopper.HopperConfig(block_q=32, block_k=16, num_warps=4, num_stages=2, persistent=1)


@pytest.mark.parametrize("cfg", [SMALL, PERSISTENT], ids=["one-program-per-tile", "persistent"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b,h,nq,nk,d", [(1, 2, 64, 64, 64), (2, 1, 77, 45, 64), (1, 1, 50, 90, 128),
                                         (3, 2, 100, 33, 64)])
def test_hopper_forward_matches_reference_for_ragged_lengths(b, h, nq, nk, d, causal, cfg, monkeypatch):
    # the persistent grid has 4 programs in the interpreter: (3, 2, 100) is 24 tiles, 6 per program;
    # outputs start as NaN, so a tile no program visits fails
    monkeypatch.setenv("FLASHLAB_POISON", "1")
    q, k, v = _qkv(b, h, nq, nk, d, seed=nq * 1000 + nk + int(causal))
    o, lse = hopper.forward(q, k, v, causal, None, cfg)
    ref = attention_reference(q, k, v, causal, upcast=True)
    same = attention_reference(q, k, v, causal, upcast=False)
    err, allowed = max_error(o, ref), allowed_error(ref, same)
    assert err <= allowed, f"max |o - ref| = {err:.3g} > allowed {allowed:.3g} (b={b} h={h} nq={nq} nk={nk})"
    assert o.shape == (b, h, nq, d) and o.dtype == torch.float16
    assert lse.shape == (b, h, nq) and lse.dtype == torch.float32


# the short causal row's config and the candidates timed beside it, at their real block sizes
# (benchmarks/NOTES.md, session 7): 64x64 s3 (shipped) and 32-key steps (three or four programs per SM)
SHORT_CANDIDATES = [hopper.SHORT_CAUSAL_CONFIGS[128], hopper.HopperConfig(64, 32, 4, 3), hopper.HopperConfig(64, 32, 4, 2)]


@pytest.mark.skipif(DEVICE != "cuda", reason="real block sizes at N = 1024: compiled on the GPU only")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("cfg", SHORT_CANDIDATES, ids=lambda c: f"{c.block_q}x{c.block_k}s{c.num_stages}")
def test_short_causal_candidates_match_float64_on_the_gpu(cfg, dtype, monkeypatch):
    # B = 2, H = 17, N = 1000 (a ragged last query block), d = 128
    monkeypatch.setenv("FLASHLAB_POISON", "1")
    g = torch.Generator().manual_seed(1000 + cfg.block_k + cfg.num_stages)
    q, k, v = (torch.randn(2, 17, 1000, 128, generator=g).to(DEVICE, dtype) for _ in range(3))  # (B, H, N, d)
    o, lse = hopper.forward(q, k, v, True, None, cfg)
    ref = attention_reference(q.double(), k.double(), v.double(), True, upcast=True)
    same = attention_reference(q, k, v, True, upcast=False)
    err, allowed = max_error(o, ref), allowed_error(ref, same)
    assert err <= allowed, f"{cfg} {dtype}: max |o - ref| = {err:.3g} > allowed {allowed:.3g}"
    assert not lse.isnan().any(), f"{cfg}: some lse rows were never written"


def test_short_causal_rows_take_the_short_config_and_longer_ones_the_default():
    short = hopper.SHORT_CAUSAL_CONFIGS[128]
    assert hopper.default_config(128, True, hopper.SHORT_CAUSAL_N) == short
    assert hopper.default_config(128, True, hopper.SHORT_CAUSAL_N + 1) == hopper.DEFAULT_CONFIGS[(128, True)]
    assert hopper.default_config(128, False, 512) == hopper.DEFAULT_CONFIGS[(128, False)]  # not causal
    assert hopper.default_config(128, True, None) == hopper.DEFAULT_CONFIGS[(128, True)]  # length unknown


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("b,h,hkv,nq,nk", [(1, 4, 1, 40, 50), (2, 4, 2, 33, 20)])
def test_hopper_grouped_query_attention_reads_kv_head_h_over_group(b, h, hkv, nq, nk, causal, monkeypatch):
    # k and v have Hkv < H heads and are never expanded: the kernel indexes kv head h // (H // Hkv)
    monkeypatch.setenv("FLASHLAB_POISON", "1")
    g = torch.Generator().manual_seed(100 * h + nq + int(causal))
    q = torch.randn(b, h, nq, 64, generator=g).to(DEVICE, torch.float16)  # (B, H, Nq, d)
    k, v = (torch.randn(b, hkv, nk, 64, generator=g).to(DEVICE, torch.float16) for _ in range(2))  # (B, Hkv, Nk, d)
    assert hopper.supports(q, k, v, causal)
    o, lse = hopper.forward(q, k, v, causal, None, SMALL)
    ref = attention_reference(q, k, v, causal, upcast=True)
    same = attention_reference(q, k, v, causal, upcast=False)
    err, allowed = max_error(o, ref), allowed_error(ref, same)
    assert err <= allowed, f"GQA H={h} Hkv={hkv}: max |o - ref| = {err:.3g} > allowed {allowed:.3g}"


@pytest.mark.parametrize("causal", [False, True])
def test_a_nan_in_one_head_never_reaches_another_heads_output(causal):
    # the last key tile of head 0 is short (Nk = 40, BLOCK_N = 16): its missing rows must read as
    # zeros, not as head 1's first rows, which here are NaN (and so is head 1's own output)
    q, k, v = _qkv(1, 2, 37, 40, 64, seed=21)
    k[:, 1], v[:, 1] = float("nan"), float("nan")
    o, _ = hopper.forward(q, k, v, causal, None, SMALL)
    ref = attention_reference(q[:, :1], k[:, :1], v[:, :1], causal, upcast=True)
    same = attention_reference(q[:, :1], k[:, :1], v[:, :1], causal, upcast=False)
    err, allowed = max_error(o[:, :1], ref), allowed_error(ref, same)
    assert err <= allowed, f"head 0 output error {err:.3g} > {allowed:.3g}: head 1's NaN leaked into head 0"
    assert o[:, 1].isnan().all(), "head 1 read NaN keys, so its output should be NaN"


def test_hopper_lse_is_the_natural_log_sum_exp_of_scaled_scores():
    q, k, v = _qkv(1, 2, 40, 40, 64, seed=7)
    scale = 0.3
    _, lse = hopper.forward(q, k, v, True, scale, SMALL)
    s = (q.double() @ k.double().transpose(-1, -2)) * scale  # (1, 2, 40, 40)
    s = s.masked_fill(torch.ones(40, 40, dtype=torch.bool, device=s.device).triu(1), -math.inf)
    ref = torch.logsumexp(s, dim=-1)
    assert (lse.double() - ref).abs().max().item() < 1e-3, "lse is not logsumexp(q k^T * scale) in natural log"


@pytest.mark.parametrize("bad,match", [
    (lambda q, k, v: (q.float(), k, v), "dtype"),
    (lambda q, k, v: (q[..., :48], k[..., :48], v[..., :48]), "d=48"),
    (lambda q, k, v: (q[0], k, v), "4-D"),
    (lambda q, k, v: (q, k[..., :32], v[..., :32]), "q's d"),
])
def test_hopper_rejects_bad_inputs_naming_the_problem(bad, match):
    q, k, v = _qkv(1, 1, 32, 32, 64, seed=1)
    with pytest.raises((TypeError, ValueError), match=match):
        hopper.forward(*bad(q, k, v), False)


def test_supports_says_no_where_the_rung_is_not_verified():
    q, k, v = _qkv(1, 1, 32, 32, 64, seed=2)
    assert not hopper.supports(q.float(), k.float(), v.float(), False)  # fp32
    assert not hopper.supports(q[..., :32], k[..., :32], v[..., :32], False)  # d=32
    assert not hopper.supports(q, k[:, :, :, :], v[:, :, :16], False)  # v not shaped like k
    q3 = torch.cat([q, q, q], dim=1)  # (1, 3, 32, 64)
    k2 = torch.cat([k, k], dim=1)  # (1, 2, 32, 64): 2 kv heads do not divide 3 query heads
    assert not hopper.supports(q3, k2, k2, False)
    if DEVICE == "cpu":
        assert hopper.supports(q, k, v, False)
        assert not hopper.supports(q.bfloat16(), k.bfloat16(), v.bfloat16(), False)  # interpreter bf16 dot


def test_hopper_refuses_bf16_in_the_interpreter_instead_of_returning_wrong_numbers():
    # the interpreter's bf16 tl.dot is wrong and this kernel does not upcast: a clear error, not garbage
    from flashlab.kernels import _mode

    if not _mode.is_interpreter():
        pytest.skip("compiled mode: bf16 is supported on the GPU")
    q, k, v = (t.bfloat16() for t in _qkv(1, 1, 32, 32, 64, seed=4))
    with pytest.raises(TypeError, match="q.dtype=torch.bfloat16.*interpreter"):
        hopper.forward(q, k, v, False, None, SMALL)


def test_sweep_config_parser_reads_flags_and_rejects_unknown_ones():
    bench = _load("bench_attention")
    configs = bench.parse_configs("128,64,4,2; 64,64,4,3,ws; 128,64,4,2,p2")
    assert [(c.block_q, c.block_k, c.num_warps, c.num_stages, c.warp_specialize, c.persistent)
            for c in configs] == [(128, 64, 4, 2, False, 0), (64, 64, 4, 3, True, 0), (128, 64, 4, 2, False, 2)]
    assert bench.config_label(configs[1]) == "64x64 w4 s3 ws"
    assert bench.config_label(configs[2]) == "128x64 w4 s2 p2"
    with pytest.raises(SystemExit, match="lz"):
        bench.parse_configs("128,64,4,2,lz")


def test_config_rejects_block_sizes_that_break_the_band_loop():
    with pytest.raises(ValueError, match="block_q=64 must be a multiple of block_k=128"):
        hopper.HopperConfig(block_q=64, block_k=128)
    with pytest.raises(ValueError, match="block_k=48"):
        hopper.HopperConfig(block_q=64, block_k=48)


def _load(name):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_refuses_to_time_under_the_interpreter(monkeypatch, capsys):
    from flashlab import bench

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert bench.main(["--quick"]) == 2
    assert "TRITON_INTERPRET" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["bench_attention", "bench_backward", "bench_memory", "ncu_traffic", "gluon_probe"])
def test_benchmark_scripts_plan_without_a_gpu(name, capsys):
    assert _load(name).main(["--dry-run"]) == 0
    assert capsys.readouterr().out.strip(), f"{name} --dry-run printed no plan"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
@pytest.mark.parametrize("what", ["check", "time"])
def test_gluon_probe_refuses_without_a_gpu(what, capsys):
    assert _load("gluon_probe").main([what]) == 2
    assert "refusing" in capsys.readouterr().err


def test_gpu_sweep_summary_counts_failures_and_names_the_worst_case():
    sweep = _load("gpu_sweep")
    g = torch.Generator().manual_seed(5)
    results = []
    for i, dtype in enumerate(["fp16", "fp16", "bf16", "fp32"]):
        errs = (torch.rand(4, generator=g) * 0.5).tolist()  # error / allowed in [0, 0.5): passes
        r = dict(dtype=dtype, causal=bool(i % 2), heads="MHA", d=64, Nq=17 + i, Nk=128, rung="v3_autotuned",
                 bwd_rung="bwd_fused" if i == 0 else "bwd_two_pass")
        for name, e in zip(("o", "dq", "dk", "dv"), errs):
            r[f"err_{name}"], r[f"allowed_{name}"] = e, 1.0
        r["ok"] = True
        results.append(r)
    results[1]["err_dk"], results[1]["ok"] = 1.5, False  # one fp16 causal case over its limit
    text = sweep.summarise(results)
    assert "| fp16 | True | 1 | 0 | 1 | 0 | 0 |" in text
    assert "| fp16 | v3_autotuned | 2 | 1.50 | MHA d=64 Nq=18 Nk=128 causal |" in text
    assert "dk 1.5>1" in text
    worst_fused = max(results[0][f"err_{n}"] for n in ("dq", "dk", "dv"))
    assert f"| fp16 | bwd_fused | 1 | {worst_fused:.2f} |" in text and "| fp16 | bwd_two_pass | 1 | 1.50 |" in text
    assert sweep.worst_ratio(results[1]) == 1.5


def test_ncu_csv_parser_sums_every_kernel():
    ncu = _load("ncu_traffic")
    g = torch.Generator().manual_seed(3)
    values = torch.randint(1, 10**9, (3, 2), generator=g).tolist()
    lines = ['==PROF== Connected', '"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"']
    for i, (r, w) in enumerate(values):
        lines.append(f'"{i}","k{i}","dram__bytes_read.sum","byte","{r:,}"')
        lines.append(f'"{i}","k{i}","dram__bytes_write.sum","byte","{w:,}"')
    parsed = ncu.parse_ncu_csv("\n".join(lines))
    assert parsed["totals"]["dram__bytes_read.sum"] == sum(r for r, _ in values)
    assert parsed["totals"]["dram__bytes_write.sum"] == sum(w for _, w in values)
    assert len(parsed["kernels"]) == 3


def test_committed_results_describe_their_machine():
    import json

    for name in ("bench_attention", "bench_memory", "ncu_traffic"):
        path = REPO / "benchmarks" / "results" / f"{name}.json"
        if not path.exists():
            pytest.skip(f"{path} not committed yet")
        data = json.loads(path.read_text())
        env = data["environment"]
        for key in ("device", "torch", "triton", "date_utc"):
            assert env.get(key), f"{path.name}: environment.{key} is missing"
        assert data["protocol"] and data["rows"], f"{path.name} has no protocol or no rows"


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("h,hkv,d", [(2, 2, 64), (2, 2, 128), (4, 2, 64), (2, 2, 80), (2, 1, 128)])
def test_fast_support_check_agrees_with_the_full_one_on_validated_inputs(dtype, h, hkv, d):
    # flash_attention validates once, then asks supports_checked on every call.
    from flashlab.kernels.attention import check_inputs

    q = torch.randn(1, h, 33, d, dtype=dtype, device=DEVICE)  # (B, H, Nq, d)
    k = torch.randn(1, hkv, 20, d, dtype=dtype, device=DEVICE)  # (B, Hkv, Nk, d)
    v = torch.randn(1, hkv, 20, d, dtype=dtype, device=DEVICE)  # (B, Hkv, Nk, d)
    check_inputs(q, k, v)
    for causal in (False, True):
        assert hopper.supports_checked(q, k, v) == hopper.supports(q, k, v, causal), (dtype, h, hkv, d, causal)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
