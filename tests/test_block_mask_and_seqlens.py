"""Block masks derived from a mask_mod (full / partial / empty tiles, FlexAttention's BlockMask) and
per-sequence lengths in a padded batch: NumPy paths, traffic and FLOP counts, the tile picture and
the Triton rungs v0-v3 (interpreter), against float64 references on seeded inputs, with NaN in
every key that must never be loaded.
"""
import random

import numpy as np
import pytest

from flashlab import TrafficTracer, flops, reference, tiled, traffic
from flashlab.attnspec import AttnSpec
from flashlab.visibility import FULL, PARTIAL, SKIPPED, TileVisibility

HOLE = (48, 64)  # keys no query sees: a whole key block of 16 inside the span other blocks cover


def doc_hole(q_idx, kv_idx):
    # documents of 40 tokens, causal inside each, and keys 48..63 hidden from every query
    return (q_idx // 40 == kv_idx // 40) & (kv_idx <= q_idx) & ((kv_idx < 48) | (kv_idx >= 64))


try:  # one function for NumPy (its .fn) and the kernels
    import triton
    import triton.language as tl  # noqa: F401  (the interpreter looks it up in the mask_mod's globals)

    from flashlab.kernels.visible import kv_offset, kv_steps  # globals of the probe kernel below
except ImportError:
    pass
else:
    doc_hole = triton.jit(doc_hole)

DOC_HOLE = AttnSpec(mask_mod=doc_hole)


# -- the block mask ---------------------------------------------------------------------------
def test_kernel_block_lists_hold_every_computed_tile_partial_first_and_full_ones_unragged():
    rng = random.Random(0)
    for _ in range(200):
        nq, nk, bq, bk = rng.randint(1, 50), rng.randint(1, 50), rng.choice([1, 3, 4, 8]), rng.choice([1, 3, 4, 8])
        period, phase = rng.randint(2, 6), rng.randint(0, 5)
        spec = AttnSpec(mask_mod=lambda qi, ki, p=period, f=phase: ((qi // p + ki // p + f) % 3 != 0) | (ki == 0))
        grid = TileVisibility(spec, nq, nk, bq, bk)
        lists = grid.kernel_lists()
        where = f"nq={nq} nk={nk} block_q={bq} block_k={bk} period={period} phase={phase}"
        for i in range(grid.n_q_blocks):
            n_masked, n_full = lists[i, :2]
            masked, full = lists[i, 2:2 + n_masked], lists[i, 2 + n_masked:2 + n_masked + n_full]
            assert sorted([*masked, *full]) == list(grid.kv_blocks(i)), where
            assert all(grid.state(i, j) == FULL and (j + 1) * bk <= nk for j in full), where
            assert all(grid.state(i, j) == PARTIAL or (j + 1) * bk > nk for j in masked), where
            assert (lists[i, 2 + n_masked + n_full:] == -1).all(), where


def test_a_mask_mod_with_holes_skips_them_in_numpy_traffic_flops_and_the_picture():
    from flashlab.viz.tiles import TileSchedule

    nq = nk = 100
    grid = TileVisibility(DOC_HOLE, nq, nk, 16, 16)
    assert (grid.states[:, 3] == SKIPPED).all() and grid.kv_range(4)[0] < 3 < grid.kv_range(4)[1], \
        "the hole should lie inside some query block's span"
    rng = np.random.default_rng(7)
    q, k, v = rng.standard_normal((2, nq, 8)), rng.standard_normal((2, nk, 8)), rng.standard_normal((2, nk, 8))
    k[:, slice(*HOLE)] = np.nan  # a skipped tile is never read
    v[:, slice(*HOLE)] = np.nan
    visible = DOC_HOLE.mask(np.arange(nq)[:, None], np.arange(nk)[None, :], nq, nk)
    s = np.where(visible, q @ np.nan_to_num(k).swapaxes(-1, -2) / np.sqrt(8), -np.inf)  # float64 by hand
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = (p / p.sum(-1, keepdims=True)) @ np.nan_to_num(v)
    for fn, formula in ((tiled.tiled_attention, traffic.fa2_forward_traffic),
                        (tiled.tiled_attention_fa1, traffic.fa1_forward_traffic)):
        tracer = TrafficTracer(itemsize=2)
        o = fn(q, k, v, spec=DOC_HOLE, block_q=16, block_k=16, tracer=tracer)
        np.testing.assert_allclose(o, ref, atol=1e-12, err_msg=fn.__name__)
        sizes = dict(block_q=16, block_k=16, itemsize=2, batch=2, spec=DOC_HOLE)
        assert tracer.hbm_bytes == formula(nq, nk, 8, **sizes).total, fn.__name__
        assert sum(st.flops for st in tracer.steps) == flops.attention_flops(nq, nk, 8, block_q=16, block_k=16,
                                                                            batch=2, spec=DOC_HOLE)
        assert not any(st.k_block == 3 for st in tracer.steps if st.k_block is not None), fn.__name__
    assert (TileSchedule(tracer).skipped == (grid.states == SKIPPED)).all()


# -- per-sequence lengths: NumPy --------------------------------------------------------------
RAGGED = [
    AttnSpec(seqlens_q=(7, 20, 1), seqlens_k=(9, 20, 13)),
    AttnSpec(causal=True, causal_align="bottom_right", window=5, seqlens_q=(7, 20, 1), seqlens_k=(9, 20, 13)),
    AttnSpec(causal=True, seqlens_k=(20, 11, 17)),
    AttnSpec(mask_mod=lambda qi, ki: (qi + ki) % 3 != 1, seqlens_q=(5, 20, 12), seqlens_k=(6, 3, 20)),
]


def _padded_reference(q, k, v, spec):
    """float64 attention of each sequence from its own visibility rule, padding rows 0, lse -inf."""
    nq, nk = q.shape[-2], k.shape[-2]
    o, lse = np.zeros(q.shape[:-1] + (v.shape[-1],)), np.full(q.shape[:-1], -np.inf)
    for b, nq_b, nk_b in spec.sequences(nq, nk, q.shape[0]):
        seen = spec.base.mask(np.arange(nq_b)[:, None], np.arange(nk_b)[None, :], nq_b, nk_b)
        s = np.where(seen, q[b, ..., :nq_b, :] @ k[b, ..., :nk_b, :].swapaxes(-1, -2) / np.sqrt(q.shape[-1]), -np.inf)
        m = s.max(-1, keepdims=True)
        p = np.exp(s - m)
        o[b, ..., :nq_b, :] = p / p.sum(-1, keepdims=True) @ v[b, ..., :nk_b, :]
        lse[b, ..., :nq_b] = (m + np.log(p.sum(-1, keepdims=True)))[..., 0]
    return o, lse


@pytest.mark.parametrize("spec", RAGGED, ids=["plain", "bottom-right-window", "causal-keys-only", "mask_mod"])
def test_numpy_paths_compute_a_padded_batch_per_sequence_without_reading_padding(spec):
    rng = np.random.default_rng(11)
    q, k, v, do = (rng.standard_normal((3, 2, 20, 4)) for _ in range(4))
    o_ref, lse_ref = _padded_reference(q, k, v, spec)
    k_nan, v_nan, q_nan = k.copy(), v.copy(), q.copy()
    for b, nq_b, nk_b in spec.sequences(20, 20, 3):
        k_nan[b, :, nk_b:] = v_nan[b, :, nk_b:] = q_nan[b, :, nq_b:] = np.nan
    for fn in (reference.naive_attention, tiled.tiled_attention, tiled.tiled_attention_fa1):
        kw = {} if fn is reference.naive_attention else dict(block_q=4, block_k=3)
        o, lse = fn(q_nan, k_nan, v_nan, spec=spec, return_lse=True, **kw)
        np.testing.assert_allclose(o, o_ref, atol=1e-12, err_msg=fn.__name__)
        np.testing.assert_array_equal(np.isinf(lse), np.isinf(lse_ref), err_msg=f"{fn.__name__}: padding lse")
        np.testing.assert_allclose(lse[np.isfinite(lse_ref)], lse_ref[np.isfinite(lse_ref)], atol=1e-12)
    grads_ref = reference.naive_attention_backward(q, k, v, do, spec=spec)
    grads = tiled.tiled_attention_backward(q_nan, k_nan, v_nan, o_ref, lse_ref, do, spec=spec, block_q=4, block_k=3)
    for name, mine, ref in zip(("dq", "dk", "dv"), grads, grads_ref):
        np.testing.assert_allclose(mine, ref, atol=1e-12, err_msg=name)
    b, nq_b, nk_b = 0, *next(spec.sequences(20, 20, 3))[1:]
    assert not grads_ref[0][b, :, nq_b:].any() and not grads_ref[1][b, :, nk_b:].any()
    # the per-sequence gradient equals the gradient of that sequence alone (a finite difference)
    eps, (bb, h, r, c) = 1e-6, (1, 1, 3, 2)
    bumped = q.copy()
    bumped[bb, h, r, c] += eps
    change = ((reference.naive_attention(bumped, k, v, spec=spec) - o_ref) * do).sum() / eps
    assert abs(change - grads_ref[0][bb, h, r, c]) < 1e-4


@pytest.mark.parametrize("options, error, name", [
    (dict(seqlens_q=(3, -1)), ValueError, "seqlens_q"),
    (dict(seqlens_q=(3, 0)), ValueError, "seqlens_q"),
    (dict(seqlens_k=(3, 21)), ValueError, "seqlens_k"),
    (dict(seqlens_q=(3, 4, 5)), ValueError, "seqlens_q"),
    (dict(seqlens_q=np.array([[3, 4]])), ValueError, "seqlens_q"),
    (dict(seqlens_q=np.array([3.0, 4.0])), TypeError, "seqlens_q"),
    (dict(seqlens_k=(3, True)), TypeError, "seqlens_k"),
    (dict(seqlens_q=(3, 4), seqlens_k=(5,)), ValueError, "seqlens_k"),
    (dict(seqlens_q=(5, 4), seqlens_k=(3, 20), causal=True, causal_align="bottom_right"), ValueError, "sequence 0"),
])
def test_bad_lengths_are_rejected_naming_the_argument(options, error, name):
    q = np.ones((2, 20, 4))
    with pytest.raises(error, match=name):
        reference.naive_attention(q, q, q, **options)
    with pytest.raises(error, match=name):
        tiled.tiled_attention(q, q, q, **options)


def test_counts_and_tile_grids_refuse_lengths_instead_of_ignoring_them():
    ragged = AttnSpec(causal=True, seqlens_q=(3, 8))
    with pytest.raises(ValueError, match="seqlens"):
        traffic.fa2_forward_traffic(8, 8, 4, spec=ragged)
    with pytest.raises(ValueError, match="seqlens"):
        flops.attention_flops(8, 8, 4, block_q=4, block_k=4, spec=ragged)
    with pytest.raises(ValueError, match="seqlens"):
        TileVisibility(ragged, 8, 8, 4, 4)


def test_lengths_need_a_batch_axis_and_no_tracer():
    with pytest.raises(ValueError, match="seqlens_q needs a batch axis"):
        reference.naive_attention(np.ones((20, 4)), np.ones((20, 4)), np.ones((20, 4)), seqlens_q=(3,))
    with pytest.raises(ValueError, match="tracer"):
        tiled.tiled_attention(np.ones((1, 8, 4)), np.ones((1, 8, 4)), np.ones((1, 8, 4)), seqlens_q=(3,),
                              tracer=TrafficTracer())


# -- Triton: compiled on a GPU, else in the interpreter ----------------------------------------
def _device():
    """torch and where the kernels run: compiled on a GPU when there is one, else the interpreter."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    return torch, "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.interpreter
def test_rungs_skip_a_mask_mods_empty_tiles_inside_the_range_and_run_full_ones_unmasked():
    torch, device = _device()
    from flashlab.kernels import flash_fwd
    from flashlab.kernels.attention import allowed_error, attention_reference, flash_attention, max_error

    g = torch.Generator().manual_seed(21)
    q, k, v = (torch.randn(1, 2, 100, 16, generator=g).to(device) for _ in range(3))  # fp32
    k_nan, v_nan = k.clone(), v.clone()
    k_nan[:, :, slice(*HOLE)] = float("nan")  # key block 3 of 16: inside query block 2's span, never seen
    v_nan[:, :, slice(*HOLE)] = float("nan")
    ref = attention_reference(q.double(), k.double(), v.double(), spec=DOC_HOLE)
    pt = attention_reference(q, k, v, spec=DOC_HOLE, upcast=False)
    grid = TileVisibility(DOC_HOLE, 100, 100, 32, 16)
    assert (grid.states == FULL).any() and grid.kv_range(2)[0] < 3 < grid.kv_range(2)[1]
    for name in ("forward_v0", "forward_v1", "forward_v2"):
        o, lse = getattr(flash_fwd, name)(q, k_nan, v_nan, DOC_HOLE, config=flash_fwd.FwdConfig(32, 16, 1, 1))
        assert max_error(o, ref) <= allowed_error(ref, pt), f"{name}: error {max_error(o, ref):.3g}"
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = flash_attention(*leaves, mask_mod=doc_hole)
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    ref = attention_reference(*ref_leaves, spec=DOC_HOLE)
    do = torch.randn(q.shape, generator=g).to(device)
    out.backward(do)
    ref.backward(do.double())
    for name, mine, r in zip("qkv", leaves, ref_leaves):
        assert max_error(mine.grad, r.grad) < 1e-4, f"d{name}"


RAGGED_KERNEL = [
    AttnSpec(seqlens_q=(7, 40, 20), seqlens_k=(9, 40, 33)),
    AttnSpec(causal=True, causal_align="bottom_right", window=5, seqlens_q=(7, 40, 20), seqlens_k=(9, 40, 33)),
    AttnSpec(causal=True, seqlens_k=(29, 40, 33)),
]


@pytest.mark.interpreter
@pytest.mark.parametrize("spec", RAGGED_KERNEL, ids=["plain", "bottom-right-window", "causal-keys-only"])
def test_rungs_compute_a_padded_batch_without_loading_padding_and_train(spec):
    torch, device = _device()
    from flashlab.kernels import flash_fwd
    from flashlab.kernels.attention import allowed_error, attention_reference, flash_attention, max_error

    g = torch.Generator().manual_seed(31)
    q, k, v = (torch.randn(3, 2, 40, 16, generator=g) for _ in range(3))
    q_nan, k_nan, v_nan = q.clone(), k.clone(), v.clone()
    for b, nq_b, nk_b in spec.sequences(40, 40, 3):
        q_nan[b, :, nq_b:] = k_nan[b, :, nk_b:] = v_nan[b, :, nk_b:] = float("nan")
    o_ref, lse_ref = (torch.from_numpy(x).to(device) for x in _padded_reference(
        q.double().numpy(), k.double().numpy(), v.double().numpy(), spec))
    q, k, v, q_nan, k_nan, v_nan = (t.to(device) for t in (q, k, v, q_nan, k_nan, v_nan))
    pt = attention_reference(q, k, v, spec=spec, upcast=False)
    rungs = {name: (lambda *a, f=getattr(flash_fwd, name): f(*a, spec, config=flash_fwd.FwdConfig(16, 16, 1, 1)))
             for name in ("forward_v0", "forward_v1", "forward_v2")}
    rungs["forward_v3"] = lambda *a: flash_fwd.forward_v3(*a, spec)
    for name, rung in rungs.items():
        o, lse = rung(q_nan, k_nan, v_nan)
        assert max_error(o, o_ref) <= allowed_error(o_ref, pt), f"{name}: error {max_error(o, o_ref):.3g}"
        assert torch.equal(torch.isinf(lse), torch.isinf(lse_ref)), f"{name}: padding rows' lse must be -inf"
        assert (lse - lse_ref)[torch.isfinite(lse_ref)].abs().max() < 1e-4, name
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = flash_attention(*leaves, spec=spec)
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    ref = attention_reference(*ref_leaves, spec=spec)
    assert max_error(out, ref) <= allowed_error(ref, pt)
    do = torch.randn(q.shape, generator=g).to(device)
    out.backward(do)
    ref.backward(do.double())
    for name, mine, r in zip("qkv", leaves, ref_leaves):
        assert max_error(mine.grad, r.grad) < 1e-4, f"d{name}"


@pytest.mark.interpreter
def test_flash_attention_takes_tensor_lengths_and_rungs_without_them_refuse_by_name():
    torch, device = _device()
    from flashlab.kernels import flash_fwd, ladder
    from flashlab.kernels.attention import flash_attention

    q = torch.randn(2, 2, 24, 16, generator=torch.Generator().manual_seed(41)).to(device)
    lengths = torch.tensor([5, 24], dtype=torch.int32, device=device)
    out = flash_attention(q, q, q, seqlens_q=lengths, seqlens_k=lengths)
    assert (out[0, :, 5:] == 0).all() and torch.isfinite(out).all()
    with pytest.raises(ValueError, match="seqlens"):
        ladder.RUNGS["v4_hopper"](q, q, q, seqlens_q=lengths)
    with pytest.raises(ValueError, match="seqlens"):
        ladder.RUNGS["v5_gluon_ws"](q, q, q, seqlens_q=lengths)
    with pytest.raises(TypeError, match="seqlens_k"):
        flash_attention(q, q, q, seqlens_k=lengths.float())
    with pytest.raises(ValueError, match="seqlens_q"):
        flash_attention(q, q, q, seqlens_q=torch.tensor([5, 25]))
    with pytest.raises(ValueError, match="mask_mod with seqlens"):
        flash_fwd.forward_v2(q, q, q, AttnSpec(mask_mod=doc_hole, seqlens_q=(5, 24)))


@pytest.mark.interpreter
def test_kernel_loop_helpers_walk_the_models_lists_and_band_stages():
    torch = pytest.importorskip("torch")
    pytest.importorskip("triton")
    from flashlab.kernels import _mode
    from flashlab.visibility import kv_stages

    if not _mode.is_interpreter():
        pytest.skip("runs in the interpreter (the GPU tests run the kernels that use these helpers)")

    @triton.jit
    def probe(Out, BLOCKS, N_Q, N_K, DIAG, WINDOW, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, LISTED: tl.constexpr, N_KB: tl.constexpr):
        # row pid: s0..s3, then the first key of every step from s0 to s3 (-1 past them)
        pid = tl.program_id(0)
        s0, s1, s2, s3 = kv_steps(pid, N_Q, N_K, DIAG, WINDOW, BLOCKS, BLOCK_M, BLOCK_N, CAUSAL, HAS_WINDOW, LISTED)
        for t, x in ((0, s0), (1, s1), (2, s2), (3, s3)):
            tl.store(Out + pid * (4 + N_KB) + t, x)
        for step in range(s0, s3):
            tl.store(Out + pid * (4 + N_KB) + 4 + step - s0, kv_offset(step, pid, N_K, BLOCKS, BLOCK_N, LISTED))

    rng = random.Random(9)
    for _ in range(30):
        nq, nk, bm, bn = rng.randint(1, 70), rng.randint(1, 70), rng.choice([16, 32]), rng.choice([16, 32])
        listed = rng.random() < 0.5
        if listed:
            period = rng.randint(2, 9)
            spec = AttnSpec(mask_mod=lambda qi, ki, p=period: ((qi // p + ki // p) % 3 != 0) | (ki == 0))
        else:
            causal = rng.random() < 0.7
            spec = AttnSpec(causal=causal, window=rng.choice([None, 3, 20]) if causal else None,
                            causal_align=rng.choice(["top_left", "bottom_right"]) if causal else "top_left")
            try:
                spec.check_lengths(nq, nk)
            except ValueError:
                continue
        grid = TileVisibility(spec, nq, nk, bm, bn)
        n_qb, n_kb = grid.n_q_blocks, grid.n_kv_blocks
        n_prog = n_qb + 1  # one program past the last query block: a padding block takes no step
        out = torch.full((n_prog, 4 + n_kb), -1, dtype=torch.int32)
        blocks = torch.from_numpy(grid.kernel_lists()) if listed else None
        rule = spec.kernel_args(nq, nk)
        probe[(n_prog,)](out, blocks, nq, nk, rule["DIAG"], rule["WINDOW"], BLOCK_M=bm, BLOCK_N=bn,
                         CAUSAL=rule["CAUSAL"], HAS_WINDOW=rule["HAS_WINDOW"], LISTED=listed, N_KB=n_kb)
        where = f"{spec} nq={nq} nk={nk} BLOCK_M={bm} BLOCK_N={bn}"
        for i in range(n_qb):
            s0, s1, s2, s3 = out[i, :4].tolist()
            starts = out[i, 4:4 + s3 - s0].tolist()
            assert sorted(c // bn for c in starts) == list(grid.kv_blocks(i)), f"query block {i}: {where}"
            unmasked = starts[s1 - s0:s2 - s0]
            assert all(grid.state(i, c // bn) == FULL and c + bn <= nk for c in unmasked), where
            if not listed:
                lo, full_lo, full_hi, hi = kv_stages(i, bm, bn, nq, nk, rule["DIAG"], rule["WINDOW"],
                                                     spec.causal, spec.window is not None)
                assert (s0, s1, s2, s3) == (lo // bn, full_lo // bn, full_hi // bn, -(-hi // bn)), where
        assert out[n_qb, :4].tolist() == [0, 0, 0, 0], f"a block with no query row took steps: {where}"
