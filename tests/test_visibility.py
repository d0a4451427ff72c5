"""One AttnSpec, one tile-visibility model: every path reads the same geometry, and sliding-window
attention (the proof) runs end to end: NumPy forward (FA2, FA1) and backward, traffic and FLOP
counts, the tile picture, and the Triton rungs, against float64 references on fresh seeded inputs.
"""
import random

import numpy as np
import pytest

from flashlab import TrafficTracer, flops, reference, tiled, traffic
from flashlab.attnspec import AttnSpec
from flashlab.visibility import FULL, SKIPPED, TileVisibility

try:  # the Triton twins of the model (the probe kernel below reads them as globals)
    import triton
    import triton.language as tl

    from flashlab.kernels.visible import kv_bounds, q_bounds
except ImportError:
    tl = kv_bounds = q_bounds = None
else:
    @triton.jit
    def sliding_window_9(q_idx, kv_idx):
        # a new variant is one function: the same one serves NumPy (via .fn) and the kernels
        return (kv_idx <= q_idx) & (kv_idx > q_idx - 9)

SPECS = [
    AttnSpec(),
    AttnSpec(causal=True),
    AttnSpec(causal=True, window=5),
    AttnSpec(causal=True, causal_align="bottom_right"),
    AttnSpec(causal=True, causal_align="bottom_right", window=3),
    AttnSpec(mask_mod=lambda qi, ki: (qi + 2 * ki) % 5 != 1),
]
SPEC_IDS = ["dense", "causal", "window5", "bottom-right", "bottom-right-window3", "mask_mod"]


def _random_problem(rng):
    nq, nk = rng.randint(1, 60), rng.randint(1, 60)
    block_q, block_k = rng.choice([1, 2, 3, 4, 8, 16]), rng.choice([1, 2, 3, 4, 8, 16])
    causal = rng.random() < 0.8
    spec = AttnSpec(causal=causal, causal_align=rng.choice(["top_left", "bottom_right"]) if causal else "top_left",
                    window=rng.choice([None, 1, 2, 5, 17]) if causal else None)
    return spec, nq, nk, block_q, block_k


def _valid_problems(seed: int, count: int):
    """`count` random problems in which every query row sees a key."""
    rng = random.Random(seed)
    while count:
        spec, nq, nk, bq, bk = _random_problem(rng)
        try:
            spec.check_lengths(nq, nk)
        except ValueError:
            continue
        count -= 1
        yield spec, nq, nk, bq, bk


def test_closed_form_tile_states_equal_the_rule_evaluated_on_every_tile():
    for spec, nq, nk, bq, bk in _valid_problems(0, 400):
        fast, slow = TileVisibility(spec, nq, nk, bq, bk), TileVisibility(spec, nq, nk, bq, bk, generic=True)
        assert (fast.states == slow.states).all(), f"{spec} nq={nq} nk={nk} block_q={bq} block_k={bk}"


def test_kernel_loop_stages_cover_exactly_the_computed_tiles_and_unmasked_ones_are_full():
    for spec, nq, nk, bq, bk in _valid_problems(1, 400):
        grid = TileVisibility(spec, nq, nk, bq, bk)
        where = f"{spec} nq={nq} nk={nk} block_q={bq} block_k={bk}"
        for i in range(grid.n_q_blocks):
            lo, full_lo, full_hi, hi = grid.kv_stages(i)
            blocks = set(range(lo // bk, -(-hi // bk))) if hi > lo else set()
            assert blocks == {j for j in range(grid.n_kv_blocks) if grid.visited(i, j)}, f"query block {i} {where}"
            assert all(grid.state(i, c // bk) == FULL and c + bk <= nk for c in range(full_lo, full_hi, bk)), where
        for j in range(grid.n_kv_blocks):
            lo, full_lo, full_hi, hi = grid.q_stages(j)
            blocks = set(range(lo // bq, -(-hi // bq))) if hi > lo else set()
            assert blocks == {i for i in range(grid.n_q_blocks) if grid.visited(i, j)}, f"key block {j} {where}"
            assert all(grid.tile_mask(r // bq, j).all() for r in range(full_lo, full_hi, bq)), where


def test_rows_that_would_see_no_key_are_rejected_naming_the_option():
    with pytest.raises(ValueError, match="causal_align"):
        reference.naive_attention(np.ones((5, 4)), np.ones((3, 4)), np.ones((3, 4)), causal=True,
                                  causal_align="bottom_right")
    with pytest.raises(ValueError, match="window"):
        AttnSpec(window=4)  # a window needs causal
    with pytest.raises(ValueError, match="window"):
        tiled.tiled_attention(np.ones((9, 4)), np.ones((2, 4)), np.ones((2, 4)), causal=True, window=3)


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
@pytest.mark.parametrize("nq,nk,bq,bk", [(13, 21, 4, 3), (21, 21, 5, 4), (7, 30, 2, 8)])
def test_numpy_paths_match_the_reference_and_traffic_and_flops_match_the_trace(spec, nq, nk, bq, bk):
    rng = np.random.default_rng(nq * 100 + nk)
    q, k, v = rng.standard_normal((2, nq, 4)), rng.standard_normal((2, nk, 4)), rng.standard_normal((2, nk, 3))
    do = rng.standard_normal((2, nq, 3))
    o_ref, lse_ref = reference.naive_attention(q, k, v, spec=spec, return_lse=True)
    sizes = dict(block_q=bq, block_k=bk, itemsize=2, batch=2, spec=spec)
    for fn, formula in ((tiled.tiled_attention, traffic.fa2_forward_traffic),
                        (tiled.tiled_attention_fa1, traffic.fa1_forward_traffic)):
        tracer = TrafficTracer(itemsize=2)
        o, lse = fn(q, k, v, spec=spec, block_q=bq, block_k=bk, return_lse=True, tracer=tracer)
        np.testing.assert_allclose(o, o_ref, atol=1e-12, err_msg=f"{fn.__name__} output")
        np.testing.assert_allclose(lse, lse_ref, atol=1e-12, err_msg=f"{fn.__name__} lse")
        assert tracer.hbm_bytes == formula(nq, nk, 4, 3, **sizes).total, fn.__name__
        assert sum(s.flops for s in tracer.steps) == flops.attention_flops(nq, nk, 4, 3, block_q=bq, block_k=bk,
                                                                          batch=2, spec=spec)
    grads_ref = reference.naive_attention_backward(q, k, v, do, spec=spec)
    tracer = TrafficTracer(itemsize=2)
    grads = tiled.tiled_attention_backward(q, k, v, o_ref, lse_ref, do, spec=spec, block_q=bq, block_k=bk,
                                           tracer=tracer)
    for name, mine, ref in zip(("dq", "dk", "dv"), grads, grads_ref):
        np.testing.assert_allclose(mine, ref, atol=1e-12, err_msg=name)
    assert tracer.hbm_bytes == traffic.backward_traffic(nq, nk, 4, 3, **sizes).total
    assert sum(s.flops for s in tracer.steps) == flops.attention_flops(
        nq, nk, 4, 3, pass_="backward", block_q=bq, block_k=bk, batch=2, spec=spec)


def test_sliding_window_written_as_a_mask_mod_gives_the_same_results_and_traffic():
    w, nq, nk = 6, 29, 29
    as_mask = AttnSpec(mask_mod=lambda qi, ki: (ki <= qi) & (ki > qi - w))
    built_in = AttnSpec(causal=True, window=w)
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((nq, 8)), rng.standard_normal((nk, 8)), rng.standard_normal((nk, 8))
    np.testing.assert_allclose(tiled.tiled_attention(q, k, v, spec=as_mask, block_q=4, block_k=4),
                               tiled.tiled_attention(q, k, v, spec=built_in, block_q=4, block_k=4), atol=1e-12)
    assert (traffic.fa2_forward_traffic(nq, nk, 8, spec=as_mask, block_q=4, block_k=4)
            == traffic.fa2_forward_traffic(nq, nk, 8, spec=built_in, block_q=4, block_k=4))
    assert flops.computed_area(nq, nk, 4, 4, spec=as_mask) == flops.computed_area(nq, nk, 4, 4, window=w, causal=True)
    assert flops.computed_area(nq, nk, 4, 4, window=w, causal=True) < flops.computed_area(nq, nk, 4, 4, causal=True)


def test_the_tile_picture_skips_what_the_model_skips_for_a_window():
    from flashlab.viz.tiles import TileSchedule

    rng = np.random.default_rng(4)
    spec = AttnSpec(causal=True, window=5)
    q, k, v = rng.standard_normal((23, 4)), rng.standard_normal((23, 4)), rng.standard_normal((23, 4))
    tracer = TrafficTracer()
    tiled.tiled_attention(q, k, v, spec=spec, block_q=4, block_k=4, tracer=tracer)
    schedule = TileSchedule(tracer)
    expected = TileVisibility(spec, 23, 23, 4, 4).states == SKIPPED
    assert (schedule.skipped == expected).all()
    assert expected.sum() > 0 and not expected[:, 0].all()  # the window skips tiles below the diagonal too


# -- Triton (interpreter here; compiled on a GPU) ---------------------------------------------------
def _torch_inputs(nq, nk, d, dtype, seed, device):
    import torch

    g = torch.Generator().manual_seed(seed)
    return [torch.randn(1, 2, n, d, generator=g).to(device, dtype) for n in (nq, nk, nk)]


def test_triton_loop_bound_helpers_equal_the_numpy_model():
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from flashlab.kernels import _mode
    from flashlab.visibility import kv_stages, q_stages

    triton = _mode.triton()

    @triton.jit
    def probe(Out, N_Q, N_K, DIAG, WINDOW, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr):
        pid = tl.program_id(0)
        a0, a1, a2, a3 = kv_bounds(pid, N_Q, N_K, DIAG, WINDOW, None, BLOCK_M, BLOCK_N, CAUSAL, HAS_WINDOW, False)
        b0, b1, b2, b3 = q_bounds(pid, N_Q, N_K, DIAG, WINDOW, None, BLOCK_M, BLOCK_N, CAUSAL, HAS_WINDOW, False)
        for t, x in ((0, a0), (1, a1), (2, a2), (3, a3), (4, b0), (5, b1), (6, b2), (7, b3)):
            tl.store(Out + pid * 8 + t, x)

    if not _mode.is_interpreter():
        pytest.skip("runs in the interpreter (the GPU tests run the kernels that use these helpers)")
    rng = random.Random(5)
    for _ in range(40):
        spec, nq, nk, _, _ = _random_problem(rng)
        bm, bn = rng.choice([16, 32]), rng.choice([16, 32])
        try:
            spec.check_lengths(nq, nk)
        except ValueError:
            continue
        args = spec.kernel_args(nq, nk)
        n = max(-(-nq // bm), -(-nk // bn))
        out = torch.full((n, 8), -7, dtype=torch.int32)
        probe[(n,)](out, nq, nk, args["DIAG"], args["WINDOW"], BLOCK_M=bm, BLOCK_N=bn,
                    CAUSAL=args["CAUSAL"], HAS_WINDOW=args["HAS_WINDOW"])
        flags = (args["DIAG"], args["WINDOW"], spec.causal, spec.window is not None)
        for p in range(n):
            where = f"{spec} nq={nq} nk={nk} BLOCK_M={bm} BLOCK_N={bn} program {p}"
            if p < -(-nq // bm):
                assert tuple(out[p, :4].tolist()) == kv_stages(p, bm, bn, nq, nk, *flags), where
            if p < -(-nk // bn):
                assert tuple(out[p, 4:].tolist()) == q_stages(p, bm, bn, nq, nk, *flags), where


WINDOW_CASES = [  # Nq, Nk, spec
    (30, 70, AttnSpec(causal=True, window=20)),  # key blocks past the last query unseen
    (20, 70, AttnSpec(causal=True, causal_align="bottom_right", window=17)),  # blocks below the window unseen
    (37, 70, AttnSpec(causal=True, causal_align="bottom_right")),  # every block seen
]


def _window_check(rungs, nq, nk, spec, device, dtype, poison_block, bwd_config):
    """Each forward rung and the backward against the float64 reference, with NaN in every key
    block of ``poison_block`` keys that no query sees (a multiple of every BLOCK_N the rungs and
    the backward use, so a kernel that loads such a key loads a tile it should have skipped)."""
    import torch

    from flashlab.kernels import flash_bwd
    from flashlab.kernels.attention import allowed_error, attention_reference, max_error

    seed = 1000 * nq + nk + (spec.window or 0)  # fixed per case
    q, k, v = _torch_inputs(nq, nk, 64, dtype, seed, device)  # (1, 2, N, 64)
    seen = TileVisibility(spec, nq, nk, nq, poison_block).visited_tiles.any(axis=0)  # (key blocks,)
    unseen = torch.from_numpy(np.repeat(~seen, poison_block)[:nk]).to(device)
    k_nan, v_nan = k.clone(), v.clone()
    k_nan[:, :, unseen] = float("nan")
    v_nan[:, :, unseen] = float("nan")
    where = f"(seed={seed}, Nq={nq}, Nk={nk}, {spec})"
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    ref = attention_reference(*ref_leaves, spec=spec)
    pt_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    pt = attention_reference(*pt_leaves, spec=spec, upcast=False)
    for name, rung in rungs.items():
        o, lse = rung(q, k_nan, v_nan, spec)
        err, allowed = max_error(o, ref), allowed_error(ref, pt)
        assert err <= allowed, f"{name}: output error {err:.3g} > allowed {allowed:.3g} {where}"
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(seed + 1)).to(device, dtype)
    ref.backward(do.double())
    pt.backward(do)
    grads = flash_bwd.backward(q, k_nan, v_nan, o, lse, do, spec, config=bwd_config)
    for name, mine, r, p in zip(("dq", "dk", "dv"), grads, ref_leaves, pt_leaves):
        magnitude = ref_leaves[2].grad if name == "dk" else None
        err, allowed = max_error(mine, r.grad), allowed_error(r.grad, p.grad, magnitude)
        assert err <= allowed, f"{name} error {err:.3g} > allowed {allowed:.3g} {where}"
    assert (grads[1][:, :, unseen] == 0).all() and (grads[2][:, :, unseen] == 0).all(), where


@pytest.mark.interpreter
@pytest.mark.parametrize("nq,nk,spec", WINDOW_CASES + [(20, 70, "mask_mod")],
                         ids=["window", "bottom-right-window", "bottom-right", "window-as-mask_mod"])
def test_triton_rungs_compute_window_and_bottom_right_without_loading_unseen_keys(nq, nk, spec):
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from flashlab.kernels import _mode, flash_bwd, flash_fwd

    if not _mode.is_interpreter():
        pytest.skip("the interpreter version; tests/test_visibility.py's gpu test runs it compiled")
    if spec == "mask_mod":
        spec = AttnSpec(mask_mod=sliding_window_9)
    tall = flash_fwd.FwdConfig(32, 16, 1, 1)
    rungs = {name: (lambda q, k, v, s, f=getattr(flash_fwd, name): f(q, k, v, s, config=tall))
             for name in ("forward_v0", "forward_v1", "forward_v2")}
    _window_check(rungs, nq, nk, spec, "cpu", torch.float16, 16, flash_bwd.BwdConfig(16, 16, 32, 16, 4, 2, 16))


# On the GPU v3 autotunes BLOCK_N up to 64, so keys are poisoned in blocks of 64; Nk is a multiple
# of 64 because the Hopper rung reads a ragged key tail from the next head's rows (masked, but a
# NaN planted there would leak in through P V).
GPU_WINDOW_CASES = [
    (30, 192, AttnSpec(causal=True, window=20)),  # keys 64.. unseen
    (20, 192, AttnSpec(causal=True, causal_align="bottom_right", window=17)),  # keys ..127 unseen
    (37, 192, AttnSpec(causal=True, causal_align="bottom_right")),
]


@pytest.mark.gpu
@pytest.mark.parametrize("nq,nk,spec", GPU_WINDOW_CASES, ids=["window", "bottom-right-window", "bottom-right"])
def test_compiled_rungs_compute_window_and_bottom_right_without_loading_unseen_keys(nq, nk, spec):
    torch = pytest.importorskip("torch")
    from flashlab.kernels import flash_bwd, flash_fwd, flash_fwd_hopper

    tall = flash_fwd.FwdConfig(32, 16, 4, 2)
    rungs = {name: (lambda q, k, v, s, f=getattr(flash_fwd, name): f(q, k, v, s, config=tall))
             for name in ("forward_v0", "forward_v1", "forward_v2")}
    rungs["v3"] = lambda q, k, v, s: flash_fwd.forward_v3(q, k, v, s)
    rungs["v4_hopper"] = lambda q, k, v, s: flash_fwd_hopper.forward(
        q, k, v, s, config=flash_fwd_hopper.HopperConfig(32, 16, 4, 2))
    _window_check(rungs, nq, nk, spec, "cuda", torch.float16, 64, flash_bwd.BwdConfig(16, 16, 32, 16, 4, 2, 16))


@pytest.mark.interpreter
@pytest.mark.parametrize("how", ["window", "mask_mod"])
def test_flash_attention_computes_a_sliding_window_given_as_keyword_or_as_mask_mod(how):
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from flashlab.kernels import ladder
    from flashlab.kernels.attention import allowed_error, attention_reference, flash_attention, max_error

    device = "cuda" if torch.cuda.is_available() else "cpu"
    q, k, v = _torch_inputs(33, 33, 32, torch.float32, 12, device)
    options = dict(causal=True, window=9) if how == "window" else dict(mask_mod=sliding_window_9)
    if how == "mask_mod":
        assert ladder.best_rung(q, k, v, AttnSpec(**options)) == "v2_exp2_causal"
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = flash_attention(*leaves, **options)
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    ref = attention_reference(*ref_leaves, causal=True, window=9)  # the built-in rule, as reference
    pt_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    pt = attention_reference(*pt_leaves, causal=True, window=9, upcast=False)
    assert max_error(out, ref) <= allowed_error(ref, pt)
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(13)).to(device)
    for t in (out, ref, pt):
        t.backward(do.to(t.dtype))
    for name, mine, r, p in zip("qkv", leaves, ref_leaves, pt_leaves):
        assert max_error(mine.grad, r.grad) <= allowed_error(r.grad, p.grad), f"d{name}"


@pytest.mark.interpreter
def test_rungs_refuse_options_they_do_not_compute_naming_them():
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from flashlab.kernels import ladder
    from flashlab.kernels.attention import flash_attention

    q, k, v = _torch_inputs(24, 24, 32, torch.float16, 11, "cuda" if torch.cuda.is_available() else "cpu")
    with pytest.raises(ValueError, match="mask_mod"):
        ladder.RUNGS["v4_hopper"](q, k, v, mask_mod=sliding_window_9)
    with pytest.raises(ValueError, match="seqlens"):  # per-sequence lengths: rungs v0-v3 only
        ladder.RUNGS["v4_hopper"](q, k, v, seqlens_q=(24,))
    with pytest.raises(ValueError, match="mask_mod"):  # v5 computes windows, not a mask_mod
        ladder.RUNGS["v5_gluon_ws"](q, k, v, mask_mod=sliding_window_9)
    with pytest.raises(ValueError, match="window"):
        flash_attention(q, k, v, window=6)  # a window needs causal=True


def test_staged_rungs_compile_for_sm90_with_window_bottom_right_and_mask_mod():
    # the interpreter accepts kernels the compiler rejects: compile (no launch) for an sm90 target
    import os
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("torch")
    pytest.importorskip("triton")
    here = Path(__file__).resolve().parent
    env = dict(os.environ, PYTHONPATH=str(here.parent / "src"))
    env.pop("TRITON_INTERPRET", None)
    run = subprocess.run([sys.executable, str(here / "sm90_compile_rungs.py")], capture_output=True, text=True,
                         env=env, timeout=300)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert run.stdout.count("ok ") == 7, run.stdout
