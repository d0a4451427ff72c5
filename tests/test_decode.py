"""flash_decode (split-KV decode attention) and flash_attention's return_lse / causal_align.

Interpreter tests use small sizes in fp32 and fp16 (bf16 ``tl.dot`` is wrong in Triton's CPU
interpreter); the ``gpu`` tests add bf16 and real sizes on a CUDA GPU. Every cache is poisoned with
NaN past each sequence's length, and every output buffer with NaN before the kernel runs
(``FLASHLAB_POISON=1``), so an entry read that should not be, or an output never written, fails.
"""
import dataclasses
import math

import pytest

from flashlab import decode, decode_results

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

ATOL = {torch.float32: 1e-5, torch.float16: 2e-3}  # fp16: output rounding (2^-11) plus P rounded to fp16
GPU_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # the "interpreter" tests run compiled on a GPU


# ------------------------------------------------------------------------------- the split rule

SMS = 132  # an H200: 132 SMs, 2 programs each at the default bf16 config


def test_split_rule_splits_a_small_grid_to_one_wide_program_per_sm():
    assert decode.split_rule(1, 32, 1, 32768, SMS) == decode.SplitChoice(4, True, True)  # 128 programs, fused combine
    assert decode.split_rule(4, 8, 1, 4096, SMS) == decode.SplitChoice(4, True, True)
    assert decode.split_rule(1, 8, 1, 131072, SMS) == decode.SplitChoice(16, True, True)
    assert decode.split_rule(1, 16, 1, 32768, SMS) == decode.SplitChoice(8, True, True)
    # 126 splits: the combine kernel
    assert decode.split_rule(1, 1, 1, 1 << 20, SMS) == decode.SplitChoice(126, True, False)
    assert decode.split_rule(4, 31, 1, 32768, SMS) == decode.SplitChoice(1, True, True)  # 124 programs: one wave
    assert decode.split_rule(1, 70, 1, 32768, SMS) == decode.SplitChoice(2, True, True)  # 70 busy SMs: too few
    assert decode.split_rule(1, 100, 1, 32768, SMS) == decode.SplitChoice(1, True, True)  # 100 of 132 busy


def test_split_rule_without_a_wide_config_splits_up_to_two_programs_per_sm():
    assert decode.split_rule(1, 32, 1, 32768, SMS, has_wide=False) == decode.SplitChoice(8, False, True)  # 256 programs
    assert decode.split_rule(4, 8, 1, 4096, SMS, has_wide=False) == decode.SplitChoice(8, False, True)
    assert decode.split_rule(1, 16, 1, 32768, SMS, has_wide=False) == decode.SplitChoice(16, False, True)  # 256
    # two per SM would take 33 splits: one per SM instead
    assert decode.split_rule(1, 8, 1, 131072, SMS, has_wide=False) == decode.SplitChoice(16, False, True)
    assert decode.split_rule(1, 4, 1, 1 << 20, SMS, has_wide=False).splits == math.ceil(decode.ONE_WAVE_FILL * SMS / 4)


def test_split_rule_runs_a_grid_that_fills_the_sms_unsplit():
    assert decode.split_rule(4, 32, 1, 4096, SMS) == decode.SplitChoice(1, True, True)  # 128 programs: wide config
    assert decode.split_rule(64, 8, 1, 131072, SMS) == decode.SplitChoice(1, True, True)  # 512
    assert decode.split_rule(64, 8, 1, 131072, SMS, has_wide=False) == decode.SplitChoice(1, False, True)
    # 2048 programs >= 7 waves of 264: default config
    assert decode.split_rule(64, 32, 1, 32768, SMS) == decode.SplitChoice(1, False, True)
    assert decode.num_splits(16, 8, 1, 32768, SMS) == 1


def test_split_rule_keeps_chunks_long_enough_and_bounded():
    assert decode.num_splits(1, 1, 1, 3 * decode.MIN_KEYS_PER_SPLIT, SMS) == 3
    assert decode.num_splits(1, 1, 1, 10, SMS) == 1  # shorter than one chunk: no split
    assert decode.num_splits(1, 1, 1, 1 << 30, 100000) == decode.MAX_SPLITS


def test_split_rule_fills_the_sms_and_counts_the_combine():
    import random

    rng = random.Random(0)
    for _ in range(400):
        batch, kv_heads, rows = rng.randint(1, 64), rng.choice([1, 2, 4, 8, 32]), rng.randint(1, 4)
        max_len, sms, per_sm = rng.randint(1, 1 << 18), rng.randint(1, 300), rng.randint(1, 4)
        has_wide = rng.random() < 0.5
        splits, wide, fused = choice = decode.split_rule(batch, kv_heads, rows, max_len, sms, per_sm, has_wide)
        programs = batch * kv_heads * rows
        cap = max(1, min(decode.MAX_SPLITS, max_len // decode.MIN_KEYS_PER_SPLIT))
        fewest = math.ceil(math.ceil(decode.ONE_WAVE_FILL * sms) / programs)  # splits for one program per SM
        if programs * fewest > sms >= programs and programs * (sms // programs) >= decode.PARTIAL_WAVE_FILL * sms:
            fewest = sms // programs  # they would spill into a second wave: one partial wave instead
        case = (batch, kv_heads, rows, max_len, sms, per_sm, has_wide, choice)
        assert 1 <= splits <= cap and fused == (splits <= decode.FUSED_MAX_SPLITS), case
        assert not wide or has_wide, f"the wide config where none exists: {case}"
        if programs >= decode.MANY_WAVES * sms * per_sm:
            assert (splits, wide) == (1, False), f"a grid of many waves runs unsplit, default config: {case}"
        elif programs >= decode.ONE_WAVE_FILL * sms:
            assert (splits, wide) == (1, has_wide), f"a grid that fills every SM runs unsplit: {case}"
        elif has_wide:
            assert wide and splits == min(fewest, cap), f"a small grid: one wide program per SM: {case}"
        elif splits < cap:  # not capped: every SM gets a program; more only for a full second one
            assert splits == fewest or programs * splits >= decode.ONE_WAVE_FILL * sms, case
            assert splits == fewest or (programs * splits <= sms * per_sm
                                        and splits <= decode.SECOND_PER_SM_MAX_SPLITS), case


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_split_rule_rejects_bad_sizes(bad):
    with pytest.raises(ValueError, match="batch"):
        decode.split_rule(bad, 8, 1, 1024, 132)
    if bad is not True:
        with pytest.raises(ValueError, match="has_wide"):
            decode.split_rule(1, 8, 1, 1024, 132, 2, bad)


# --------------------------------------------------------------------------- interpreter checks

def _inputs(B, H, Hkv, Nq, n_max, d, dtype, lengths, seed, device=DEVICE):
    """q, poisoned caches (NaN at and past each length), and cache_seqlens (int32) or None."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, Nq, d, generator=g).to(device, dtype)  # (B, H, Nq, d)
    k = torch.randn(B, Hkv, n_max, d, generator=g).to(device, dtype)  # (B, Hkv, N_max, d)
    v = torch.randn(B, Hkv, n_max, d, generator=g).to(device, dtype)  # (B, Hkv, N_max, d)
    if lengths is None:
        return q, k, v, None
    seqlens = torch.tensor(lengths, dtype=torch.int32, device=device)  # (B,)
    for b, length in enumerate(lengths):
        k[b, :, length:] = float("nan")
        v[b, :, length:] = float("nan")
    return q, k, v, seqlens


@pytest.fixture
def poison(monkeypatch):
    monkeypatch.setenv("FLASHLAB_POISON", "1")


CASES = [  # B, H, Hkv, Nq, N_max, d, lengths, num_splits
    (2, 4, 2, 1, 50, 32, [50, 17], None),  # GQA, one query, full and ragged
    (2, 4, 1, 3, 70, 32, [1 + 2, 70], 3),  # MQA, length = Nq (each query sees its prefix only)
    (3, 2, 2, 5, 40, 16, [5, 33, 40], 4),  # MHA, splits past the shortest sequence stay empty
    (1, 4, 2, 16, 37, 16, [37], 2),  # Nq = 16
    (2, 4, 4, 1, 33, 24, None, 5),  # all N_max (no cache_seqlens), head dim not a power of two
    (1, 2, 1, 1, 1, 32, [1], None),  # length 1
]


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_flash_decode_matches_float64_reference_on_poisoned_caches(case, dtype, poison):
    B, H, Hkv, Nq, n_max, d, lengths, splits = case
    q, k, v, seqlens = _inputs(B, H, Hkv, Nq, n_max, d, dtype, lengths, seed=sum(case[:6]))
    o, lse = decode.flash_decode(q, k, v, seqlens, num_splits=splits, return_lse=True)
    ref_o, ref_lse = decode.decode_reference(q, k, v, seqlens)
    assert o.shape == q.shape and o.dtype == dtype and lse.shape == q.shape[:3] and lse.dtype == torch.float32
    assert not o.isnan().any(), "NaN in o: a poisoned cache entry was read, or an element never written"
    err_o = (o.double().cpu() - ref_o).abs().max().item()
    err_lse = (lse.double().cpu() - ref_lse).abs().max().item()
    assert err_o <= ATOL[dtype], f"o error {err_o:.3g} > {ATOL[dtype]}"
    assert err_lse <= 1e-5, f"lse error {err_lse:.3g}"


@pytest.mark.interpreter
def test_flash_decode_gives_one_answer_whatever_the_number_of_splits():
    q, k, v, seqlens = _inputs(2, 4, 2, 2, 70, 16, torch.float32, [70, 41], seed=7)
    outs = [decode.flash_decode(q, k, v, seqlens, num_splits=s) for s in (1, 3, 8)]
    for s, o in zip((3, 8), outs[1:]):
        assert (o - outs[0]).abs().max().item() < 1e-5, f"num_splits={s} differs from 1 split"


@pytest.mark.interpreter
@pytest.mark.parametrize("step", [1, 4])
def test_fused_combine_matches_the_combine_kernel(step, poison):
    """5 splits merged 1 or 4 at a time (the last step part empty), and by the second kernel."""
    from flashlab.kernels import decode_plan
    from flashlab.kernels import flash_decode as kernels

    q, k, v, seqlens = _inputs(2, 8, 1, 3, 80, 16, torch.float32, [80, 30], seed=9)
    base = kernels.default_config(16, torch.float32)
    fused, separate = (decode_plan.forward(q, k, v, seqlens, 0.25, True, 5, dataclasses.replace(
        base, fused_combine=f, combine_step=step)) for f in (True, False))
    ref_o, ref_lse = decode.decode_reference(q, k, v, seqlens, scale=0.25)
    for name, (o, lse) in (("fused", fused), ("combine kernel", separate)):
        assert (o.double().cpu() - ref_o).abs().max().item() < 1e-5, name
        assert (lse.double().cpu() - ref_lse).abs().max().item() < 1e-5, name


@pytest.mark.interpreter
def test_flash_attention_return_lse_and_bottom_right(poison):
    from flashlab import flash_attention

    g = torch.Generator().manual_seed(3)
    for Nq, Nk in ((3, 300), (20, 45), (6, 6)):  # decode path, prefix + square combine, square
        q = torch.randn(1, 4, Nq, 32, generator=g).to(DEVICE)  # (B, H, Nq, d)
        k, v = torch.randn(2, 1, 2, Nk, 32, generator=g).to(DEVICE)  # (B, Hkv, Nk, d) each
        o, lse = flash_attention(q, k, v, causal=True, causal_align="bottom_right", return_lse=True)
        ref_o, ref_lse = decode.decode_reference(q, k, v)  # bottom-right, all Nk keys
        assert (o.double().cpu() - ref_o).abs().max().item() < 1e-5, f"Nq={Nq}, Nk={Nk}: o"
        assert (lse.double().cpu() - ref_lse).abs().max().item() < 1e-5, f"Nq={Nq}, Nk={Nk}: lse"
    o, lse = flash_attention(q, k, v, return_lse=True)  # non-causal, top-left path with lse
    s = q.double() @ k.double().repeat_interleave(2, 1).transpose(-1, -2) / math.sqrt(32)  # (B, H, Nq, Nk)
    assert (lse.double() - torch.logsumexp(s, -1)).abs().max().item() < 1e-5
    assert (o.double() - torch.softmax(s, -1) @ v.double().repeat_interleave(2, 1)).abs().max().item() < 1e-5


@pytest.mark.interpreter
def test_flash_attention_bottom_right_has_gradients():
    from flashlab import flash_attention

    g = torch.Generator().manual_seed(5)
    q = torch.randn(1, 2, 4, 16, generator=g).to(DEVICE).requires_grad_()  # (B, H, Nq, d)
    k, v = (torch.randn(1, 2, 9, 16, generator=g).to(DEVICE).requires_grad_() for _ in range(2))  # (B, H, Nk, d)
    do = torch.randn(1, 2, 4, 16, generator=g).to(DEVICE)
    flash_attention(q, k, v, causal=True, causal_align="bottom_right").backward(do)
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]
    ref = torch.nn.functional.scaled_dot_product_attention(
        *leaves, attn_mask=torch.ones(4, 9, dtype=torch.bool, device=DEVICE).tril(9 - 4))
    ref.backward(do.double())
    for name, mine, r in zip("qkv", (q, k, v), leaves):
        assert (mine.grad.double() - r.grad).abs().max().item() < 1e-4, f"d{name}"


@pytest.mark.interpreter
def test_flash_attention_decode_shape_matches_rungs():
    from flashlab import flash_attention
    from flashlab.kernels.attention import attention_reference

    g = torch.Generator().manual_seed(11)
    q = torch.randn(2, 4, 1, 32, generator=g).to(DEVICE)  # (B, H, 1, d)
    k, v = torch.randn(2, 2, 2, 260, 32, generator=g).to(DEVICE)  # (B, Hkv, Nk, d) each
    assert decode.takes_over(q, k, v, False, False, "top_left")
    err = (flash_attention(q, k, v).double() - attention_reference(q, k, v)).abs().max().item()
    assert err < 1e-5


def _paged_inputs(B, H, Hkv, Nq, d, page, max_blocks, num_blocks, lengths, seed, dtype=torch.float32, device=DEVICE):
    """q, a paged cache whose unused blocks, table entries and rows past each length are poisoned
    (NaN blocks, -1 entries), the block table and cache_seqlens."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, Nq, d, generator=g).to(dtype)  # (B, H, Nq, d)
    k = torch.randn(num_blocks, Hkv, page, d, generator=g).to(dtype)  # (num_blocks, Hkv, page, d)
    v = torch.randn(num_blocks, Hkv, page, d, generator=g).to(dtype)
    table = torch.randperm(num_blocks, generator=g)[: B * max_blocks].view(B, max_blocks).to(torch.int32)
    for b, length in enumerate(lengths):
        pages = -(-length // page)
        table[b, pages:] = -1  # past the sequence's last page: names no block
        last, rows = int(table[b, pages - 1]), length - (pages - 1) * page
        k[last, :, rows:] = float("nan")
        v[last, :, rows:] = float("nan")
    for block in set(range(num_blocks)) - set(table[table >= 0].tolist()):
        k[block] = float("nan")
        v[block] = float("nan")
    seqlens = torch.tensor(lengths, dtype=torch.int32)
    return q.to(device), k.to(device), v.to(device), table.to(device), seqlens.to(device)


@pytest.mark.interpreter
@pytest.mark.parametrize("splits", [None, 3])
def test_paged_cache_matches_the_contiguous_reference(splits, poison):
    q, k, v, table, seqlens = _paged_inputs(3, 4, 2, 2, 32, 16, 5, 20, [80, 17, 33], seed=21)
    o, lse = decode.flash_decode(q, k, v, seqlens, num_splits=splits, return_lse=True, block_table=table)
    ref_o, ref_lse = decode.decode_reference(q, decode.paged_to_contiguous(k, table),
                                             decode.paged_to_contiguous(v, table), seqlens)
    assert not o.isnan().any(), "NaN in o: a block or row past a sequence's length was read"
    assert (o.double().cpu() - ref_o).abs().max().item() < 1e-5
    assert (lse.double().cpu() - ref_lse).abs().max().item() < 1e-5


@pytest.mark.interpreter
@pytest.mark.parametrize("prefetch", [True, False], ids=["prefetch", "no-prefetch"])
def test_paged_cache_with_pages_smaller_than_the_tile_looks_up_every_row(prefetch, poison):
    """BLOCK_N = 32 over 16-key pages: each tile spans two pages, so each key row finds its own
    (its table entries read a step ahead, or in the step)."""
    from flashlab.kernels import decode_plan
    from flashlab.kernels import flash_decode as kernels

    q, k, v, table, seqlens = _paged_inputs(3, 4, 2, 2, 32, 16, 5, 20, [80, 17, 33], seed=23)
    config = dataclasses.replace(kernels.INTERPRETER_DECODE_CONFIG, block_n=32, page_prefetch=prefetch)
    o, lse = decode_plan.forward(q, k, v, seqlens, 32 ** -0.5, True, 2, config, block_table=table)
    ref_o, ref_lse = decode.decode_reference(q, decode.paged_to_contiguous(k, table),
                                             decode.paged_to_contiguous(v, table), seqlens)
    assert not o.isnan().any(), "NaN in o: a block or row past a sequence's length was read"
    assert (o.double().cpu() - ref_o).abs().max().item() < 1e-5, "wrong rows gathered across pages"
    assert (lse.double().cpu() - ref_lse).abs().max().item() < 1e-5
    bad = torch.where(table == table[2, 1], 99, table)  # sequence 2's second page (of 3): no such block
    o_bad, lse_bad = decode_plan.forward(q, k, v, seqlens, 32 ** -0.5, True, 2, config, block_table=bad)
    assert o_bad[2].isnan().all() and lse_bad[2].isnan().all(), "a row's page naming no block: NaN expected"
    assert (o_bad[:2].double().cpu() - ref_o[:2]).abs().max().item() < 1e-5, "other sequences are unaffected"


def test_paged_cache_rejects_bad_tables_naming_the_argument():
    q, k, v, table, seqlens = _paged_inputs(2, 4, 2, 1, 16, 16, 3, 8, [40, 9], seed=4)
    for bad, match in ((table.long(), "block_table.dtype"), (table[:1], "block_table.shape")):
        with pytest.raises((TypeError, ValueError), match=match):
            decode.flash_decode(q, k, v, seqlens, block_table=bad)
    with pytest.raises(ValueError, match="page size"):
        decode.flash_decode(q, k[:, :, :12], v[:, :, :12], seqlens, block_table=table)
    with pytest.raises(ValueError, match="cache_seqlens"):
        decode.check_lengths(q, k, seqlens + 20, block_table=table)  # 60 > 3 blocks x 16


@pytest.mark.interpreter
@pytest.mark.parametrize("splits", [1, 2])
def test_paged_cache_entry_naming_no_block_gives_nan_for_its_sequence_only(splits):
    q, k, v, table, seqlens = _paged_inputs(2, 4, 2, 1, 16, 16, 3, 8, [40, 9], seed=4)
    bad = torch.where(table == table[0, 1], 99, table)  # sequence 0's second page: no such block
    with pytest.raises(ValueError, match=r"block_table\[0, 1\] = 99"):
        decode.check_lengths(q, k, seqlens, block_table=bad)
    with pytest.raises(ValueError, match=r"block_table\[0, 1\] = 99"):
        decode.flash_decode(q, k, v, seqlens, num_splits=splits, block_table=bad)
    o, lse = decode.flash_decode(q, k, v, seqlens, num_splits=splits, return_lse=True, block_table=bad,
                                 check_lengths=False)
    assert o[0].isnan().all() and lse[0].isnan().all(), "sequence 0 reads a page that is no block: NaN expected"
    ref_o, _ = decode.decode_reference(q, decode.paged_to_contiguous(k, table), decode.paged_to_contiguous(v, table),
                                       seqlens)
    assert (o[1].double().cpu() - ref_o[1]).abs().max().item() < 1e-5, "sequence 1 is unaffected"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(GPU_DTYPES.values()), ids=list(GPU_DTYPES))
def test_paged_cache_on_gpu(dtype, poison):
    q, k, v, table, seqlens = _paged_inputs(4, 32, 8, 3, 128, 64, 40, 200, [2560, 3, 1000, 65], seed=8,
                                            dtype=dtype, device="cuda")
    from flashlab.kernels import decode_plan
    from flashlab.kernels.attention import allowed_error, max_error

    o = decode.flash_decode(q, k, v, seqlens, block_table=table)
    kk, vv = decode.paged_to_contiguous(k, table), decode.paged_to_contiguous(v, table)
    ref, _ = decode.decode_reference(q, kk, vv, seqlens)
    same, _ = decode.decode_reference(q, kk, vv, seqlens, upcast=False)
    assert max_error(o.cpu(), ref) <= allowed_error(ref, same.cpu())
    choice = decode.choice_for(q, kk)  # the table read in the step instead of a step ahead
    config = dataclasses.replace(decode.config_of(q, choice), page_prefetch=False)
    o_late = decode_plan.forward(q, k, v, seqlens, 128 ** -0.5, True, choice.splits, config, block_table=table)[0]
    assert torch.equal(o_late, o), "reading the table a step ahead changed the result"


# --------------------------------------------------------------------------------- bad input

def _good(Nq=2, n_max=20):
    return _inputs(2, 4, 2, Nq, n_max, 16, torch.float32, [n_max, 5], seed=1)


@pytest.mark.parametrize("change, match", [
    (lambda q, k, v, s: (q, k, v, s.to(torch.int64)), "cache_seqlens.dtype"),
    (lambda q, k, v, s: (q, k, v, s[:1]), r"cache_seqlens.shape"),
    (lambda q, k, v, s: (q, k, v, [20, 5]), "cache_seqlens must be"),
    (lambda q, k, v, s: (q, k, v, s.repeat(2)[::2]), "cache_seqlens .* contiguous"),
    (lambda q, k, v, s: (q[:, :3], k, v, s), "H must be a multiple of Hkv"),
    (lambda q, k, v, s: (q, k[..., :8], v[..., :8], s), "head dim"),
    (lambda q, k, v, s: (q.repeat(1, 1, 9, 1)[:, :, :17], k, v, s), "Nq=17"),
    (lambda q, k, v, s: (q, k.half(), v, s), "k_cache.dtype"),
    (lambda q, k, v, s: (q, k, v[:, :, :10], s), "v_cache.shape"),
    (lambda q, k, v, s: (q[0], k, v, s), "q must have rank 4"),
])
def test_flash_decode_rejects_bad_input_naming_the_argument(change, match):
    q, k, v, s = change(*_good())
    with pytest.raises((TypeError, ValueError), match=match):
        decode.flash_decode(q, k, v, s)


@pytest.mark.parametrize("change, match", [
    (lambda s: s * torch.tensor([1, 0], dtype=torch.int32, device=s.device), "cache_seqlens holds lengths from 0"),
    (lambda s: s + torch.tensor([1, 0], dtype=torch.int32, device=s.device), "cache_seqlens.*N_max = 20"),
    (lambda s: s - 4, "Nq=2 .* cache_seqlens"),  # [16, 1]
])
def test_bad_lengths_raise_naming_cache_seqlens_or_give_nan_with_the_check_off(change, match):
    q, k, v, s = _good()  # lengths [20, 5], N_max = 20, Nq = 2
    bad = change(s)
    with pytest.raises(ValueError, match=match):
        decode.check_lengths(q, k, bad)
    decode.flash_decode(q, k, v, s)  # a good call of this kind first: the next ones take the fast path
    for _ in range(2):  # the first checked call, then the fast path
        with pytest.raises(ValueError, match=match):
            decode.flash_decode(q, k, v, bad)
    o, lse = decode.flash_decode(q, k, v, bad, return_lse=True, check_lengths=False)
    ok = (bad >= 2) & (bad <= 20)  # (B,) lengths the kernel accepts
    assert ok.any() and not ok.all()
    assert o[~ok].isnan().all() and lse[~ok].isnan().all(), "a bad length must give NaN, not a silent answer"
    ref_o, _ = decode.decode_reference(q[ok], k[ok], v[ok], bad[ok])
    assert (o[ok].double().cpu() - ref_o).abs().max().item() < 1e-5, "good sequences are unaffected"


@pytest.mark.interpreter
def test_steady_state_call_skips_the_host_checks_and_reuses_the_plan(monkeypatch, poison):
    from flashlab.kernels import decode_plan

    decode.clear_plans()
    q, k, v, s = _good()
    decode.flash_decode(q, k, v, s, return_lse=True)  # checked, then planned
    plans = dict(decode_plan._PLANS)

    def checks_again(*args):
        raise AssertionError("the host checks ran again")

    monkeypatch.setattr(decode, "_check_decode_inputs", checks_again)
    q2, k2, v2, s2 = _inputs(2, 4, 2, 2, 20, 16, torch.float32, [7, 20], seed=31)  # same shapes, new values
    o, lse = decode.flash_decode(q2, k2, v2, s2, return_lse=True)
    assert decode_plan._PLANS == plans, "a known shape made a new plan"
    ref_o, ref_lse = decode.decode_reference(q2, k2, v2, s2)
    assert (o.double().cpu() - ref_o).abs().max().item() < 1e-5, "the reused plan (and its scratch) gave a wrong o"
    assert (lse.double().cpu() - ref_lse).abs().max().item() < 1e-5
    with pytest.raises(AssertionError, match="checks ran again"):  # another kind of call is checked
        decode.flash_decode(q2.half(), k2.half(), v2.half(), s2)


@pytest.mark.parametrize("kwargs, match", [
    ({"num_splits": 0}, "num_splits"), ({"num_splits": 1000}, "num_splits"), ({"scale": -1.0}, "scale"),
    ({"return_lse": 1}, "return_lse"), ({"check_lengths": 0}, "check_lengths"),
])
def test_flash_decode_rejects_bad_options(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        decode.flash_decode(*_good(), **kwargs)


def test_flash_decode_rejects_more_queries_than_keys_without_seqlens():
    q, k, v, _ = _inputs(1, 2, 2, 4, 3, 16, torch.float32, None, seed=2)
    with pytest.raises(ValueError, match="N_max=3"):
        decode.flash_decode(q, k, v)


def test_flash_attention_rejects_bad_causal_align_and_too_many_queries():
    from flashlab import flash_attention

    q, k, v = torch.randn(3, 1, 2, 5, 16).to(DEVICE).unbind(0)
    with pytest.raises(ValueError, match="causal_align"):
        flash_attention(q, k, v, causal=True, causal_align="bottom")
    with pytest.raises(TypeError, match="return_lse"):
        flash_attention(q, k, v, return_lse="yes")
    with pytest.raises(ValueError, match="bottom_right"):
        flash_attention(q, k[:, :, :3], v[:, :, :3], causal=True, causal_align="bottom_right")


# ----------------------------------------------------------------------------------- on a GPU

GPU_CASES = [  # B, H, Hkv, Nq, N_max, ragged
    (1, 32, 32, 1, 4096, False), (4, 32, 8, 1, 20000, True), (3, 32, 1, 4, 9000, True),
    (2, 16, 4, 16, 3000, True), (16, 32, 8, 2, 1024, True), (1, 8, 8, 1, 1, False),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(GPU_DTYPES.values()), ids=list(GPU_DTYPES))
@pytest.mark.parametrize("case", GPU_CASES, ids=[f"case{i}" for i in range(len(GPU_CASES))])
def test_flash_decode_on_gpu_within_twice_pytorch_error(case, dtype, poison):
    from flashlab.kernels.attention import allowed_error, max_error

    B, H, Hkv, Nq, n_max, ragged = case
    g = torch.Generator().manual_seed(sum(case[:5]))
    lengths = ([int(x) for x in torch.randint(Nq, n_max + 1, (B,), generator=g)] if ragged else [n_max] * B)
    lengths[0] = n_max if B > 1 else lengths[0]  # one sequence at N_max, the others ragged
    q, k, v, seqlens = _inputs(B, H, Hkv, Nq, n_max, 128, dtype, lengths, seed=sum(case[:5]), device="cuda")
    o, lse = decode.flash_decode(q, k, v, seqlens, return_lse=True)
    torch.cuda.synchronize()
    ref_o, ref_lse = decode.decode_reference(q, k, v, seqlens)
    same_o, _ = decode.decode_reference(q, k, v, seqlens, upcast=False)
    assert not o.isnan().any(), "NaN in o: a poisoned cache entry was read, or an element never written"
    err, allowed = max_error(o.cpu(), ref_o), allowed_error(ref_o, same_o.cpu())
    assert err <= allowed, f"o error {err:.3g} > allowed {allowed:.3g} ({case}, {dtype})"
    assert (lse.cpu().double() - ref_lse).abs().max().item() < 1e-3


@pytest.mark.gpu
def test_fused_combine_is_repeatable_on_gpu(poison):
    """The fused combine hands partial states between programs through an atomic count: a missing
    barrier or fence would show as results that change from run to run. 20 runs, bitwise equal."""
    from flashlab.kernels import decode_plan
    from flashlab.kernels import flash_decode as kernels

    q, k, v, seqlens = _inputs(8, 32, 8, 4, 30000, 128, torch.bfloat16, [30000, 4, 17, 4096, 29999, 5, 300, 12345],
                               seed=13, device="cuda")
    config = kernels.default_config(128, torch.bfloat16)
    separate = decode_plan.forward(q, k, v, seqlens, 128 ** -0.5, True, 64,
                               kernels.DecodeConfig(config.block_n, config.num_warps, config.num_stages, False))
    first = decode_plan.forward(q, k, v, seqlens, 128 ** -0.5, True, 64, config)
    for _ in range(20):
        o, lse = decode_plan.forward(q, k, v, seqlens, 128 ** -0.5, True, 64, config)
        assert torch.equal(o, first[0]) and torch.equal(lse, first[1]), "fused combine changed between runs"
    assert (first[0].float() - separate[0].float()).abs().max().item() < 1e-2
    assert (first[1] - separate[1]).abs().max().item() < 1e-5


@pytest.mark.interpreter
@pytest.mark.parametrize("splits", [1, 3])
def test_evict_first_loads_give_the_same_answer(splits, poison):
    """The L2 hint changes where K/V lines go, never the arithmetic: the same bits, both ways."""
    from flashlab.kernels import decode_plan
    from flashlab.kernels import flash_decode as kernels

    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    q, k, v, seqlens = _inputs(3, 32 if DEVICE == "cuda" else 4, 8 if DEVICE == "cuda" else 2, 1,
                               5000 if DEVICE == "cuda" else 60, 128 if DEVICE == "cuda" else 16, dtype,
                               [5000, 77, 4096] if DEVICE == "cuda" else [60, 7, 33], seed=47)
    d = q.shape[-1]
    for wide in (False, True):
        config = kernels.config_for(d, dtype, wide)
        plain, hinted = (decode_plan.forward(q, k, v, seqlens, d ** -0.5, False, splits,
                                             dataclasses.replace(config, evict_first=e)) for e in (False, True))
        assert torch.equal(plain[0], hinted[0]) and torch.equal(plain[1], hinted[1]), \
            f"evict_first changed the output (splits={splits}, wide={wide})"
        ref_o, _ = decode.decode_reference(q, k, v, seqlens, scale=d ** -0.5)
        assert (hinted[0].double().cpu() - ref_o).abs().max().item() < 2e-2, "evict_first output off the reference"


@pytest.mark.interpreter
@pytest.mark.parametrize("splits", [1, 3])
def test_staggered_walk_gives_the_reference(splits, poison):
    """Starting each program part-way through its chunk reorders the online softmax's blocks only:
    ragged lengths, NaN past them, bottom-right causal and splits give the reference's answer, and a
    paged cache (always walked from the start) the unpaged one's."""
    from flashlab.kernels import decode_plan
    from flashlab.kernels import flash_decode as kernels

    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    d = 128 if DEVICE == "cuda" else 16
    n_max = 5000 if DEVICE == "cuda" else 70
    lengths = [5000, 77, 4096, 1000] if DEVICE == "cuda" else [70, 7, 33, 50]
    q, k, v, seqlens = _inputs(4, 8, 2, 3, n_max, d, dtype, lengths, seed=53)
    ref_o, ref_lse = decode.decode_reference(q, k, v, seqlens, scale=d ** -0.5)
    base = kernels.config_for(d, dtype, DEVICE == "cuda")
    for stagger in (0, 2, 3):
        o, lse = decode_plan.forward(q, k, v, seqlens, d ** -0.5, True, splits, dataclasses.replace(base, stagger=stagger))
        assert (o.double().cpu() - ref_o).abs().max().item() < 2e-2, f"stagger={stagger}, splits={splits}: o off"
        assert (lse.double().cpu() - ref_lse).abs().max().item() < 1e-3, f"stagger={stagger}, splits={splits}: lse off"
    q, k, v, table, seqlens = _paged_inputs(3, 4, 2, 2, 32, 16, 5, 20, [80, 17, 33], seed=59)
    small = kernels.default_config(32, torch.float32)
    walked, plain = (decode_plan.forward(q, k, v, seqlens, 32 ** -0.5, True, splits, dataclasses.replace(small, stagger=s),
                                         block_table=table) for s in (2, 0))
    assert torch.equal(walked[0], plain[0]) and torch.equal(walked[1], plain[1]), "a paged cache was not walked from the start"


def test_flat_walk_programs_divide_the_ranges_evenly_over_most_sms():
    assert decode.flat_programs(512, 132, 4096) == 128  # 4 ranges each
    assert decode.flat_programs(264, 132, 4096) == 132
    assert decode.flat_programs(2048, 132, 4096) == 128
    assert decode.flat_programs(512, 132, 4097) == 0  # longer ranges: the waves (measured slower at 32k)
    assert decode.flat_programs(512, 132, 32768) == 0
    assert decode.flat_programs(128, 132, 4096) == 0  # one wave: the waves' kernel
    assert decode.flat_programs(132, 132, 4096) == 0
    assert decode.flat_programs(263, 132, 4096) == 0  # a prime: no even division
    assert decode.flat_programs(250, 132, 4096) == 0  # 125 < 0.95 x 132 SMs
    assert decode.flat_programs(6, 3, 40) == 3 and decode.flat_programs(6, 1, 40) == 1
    assert decode.flat_programs(10, 4, 40) == 0
    with pytest.raises(ValueError, match="lanes"):
        decode.flat_programs(0, 132, 4096)


def _attention64(q, k, v, causal):
    """(o, lse) in float64 on the CPU, every key valid; ``causal``: bottom-right."""
    group = q.shape[1] // k.shape[1]
    kk, vv = (t.double().cpu().repeat_interleave(group, 1) for t in (k, v))  # (B, H, N, d)
    s = q.double().cpu() @ kk.transpose(-1, -2) * q.shape[-1] ** -0.5  # (B, H, Nq, N)
    if causal:
        nq, n = q.shape[-2], k.shape[-2]
        s = s.masked_fill(torch.arange(n)[None, :] > torch.arange(n - nq, n)[:, None], float("-inf"))
    return torch.softmax(s, -1) @ vv, torch.logsumexp(s, -1)


@pytest.mark.interpreter
@pytest.mark.parametrize("sms", [1, 3, 4])
def test_flat_walk_gives_the_reference_and_keeps_ranges_apart(sms, monkeypatch, poison):
    """One program walking several (sequence, kv head) ranges in one loop: every range's o and
    lse as the reference's, causal or not, either walk order, a head dim the tile pads (a group of 72 rows keeps
    the waves); a NaN in one
    sequence's valid keys reaches that range's rows as NaN (not 0, with either kernel) and no other range's
    (the flat walk's state is not carried into the next range)."""
    from flashlab.kernels import decode_plan
    from flashlab.kernels import flash_decode as kernels

    monkeypatch.setattr(decode_plan, "sm_count_of", lambda tensor: sms)
    decode_plan.clear_plans()  # plans are kept per shape, not per SM count
    dtype = torch.bfloat16 if DEVICE == "cuda" else torch.float32
    d, d_part = (128, 96) if DEVICE == "cuda" else (16, 24)  # d_part: a head dim its tile pads (to 128, 32)
    n = 300 if DEVICE == "cuda" else 37
    tol = 2e-2 if DEVICE == "cuda" else 1e-5
    flat_seen = 0
    for n_case, (B, H, Hkv, Nq, d) in enumerate([(3, 4, 2, 1, d), (3, 16, 2, 9, d), (5, 2, 2, 1, d), (2, 8, 8, 3, d),
                                                 (3, 8, 2, 4, d), (3, 4, 2, 1, d_part)]):
        q, k, v, _ = _inputs(B, H, Hkv, Nq, n, d, dtype, None, seed=83 + n_case)
        base = dataclasses.replace(kernels.config_for(kernels.head_dim_padded(d), dtype, DEVICE == "cuda"), flat=True)
        rows = (H // Hkv) * Nq
        lanes = B * Hkv
        programs = decode.flat_programs(lanes, sms, n) if kernels.block_m_for(rows) <= decode_plan.FLAT_MAX_BLOCK_M else 0
        flat_seen += programs > 0
        for causal in (False, True):
            ref_o, ref_lse = _attention64(q, k, v, causal)
            for stagger in (0, 2):
                config = dataclasses.replace(base, stagger=stagger)
                plan = decode_plan.plan_for(q, k, v, None, None, causal, 1, config)
                assert plan.grid == ((programs, 1, 1) if programs else (1, B * Hkv, -(-rows // kernels.block_m_for(rows)))), plan.grid
                o, lse = plan(q, k, v, None, None, d ** -0.5, True)
                what = f"B={B} H={H} Hkv={Hkv} Nq={Nq} sms={sms} programs={programs} causal={causal} stagger={stagger}"
                assert (o.double().cpu() - ref_o).abs().max().item() < tol, f"{what}: o off"
                assert (lse.double().cpu() - ref_lse).abs().max().item() < 1e-3, f"{what}: lse off"
        k[0, 0, n // 2, 0] = float("nan")  # one key of sequence 0, kv head 0
        o, lse = decode_plan.forward(q, k, v, None, d ** -0.5, False, 1, base)
        group = H // Hkv
        assert torch.isnan(o[0, :group]).all(), "the poisoned range's rows should be NaN"
        o[0, :group] = 0.0
        assert not torch.isnan(o).any(), f"a NaN reached another range's rows (B={B} H={H} Hkv={Hkv} sms={sms})"
    decode_plan.clear_plans()
    assert flat_seen or sms == 4, "no case took the flat walk"


@pytest.mark.gpu
def test_the_rule_walks_many_waves_of_wide_programs_flat():
    """At 512 (sequence, kv head) ranges of 1000 keys the wide config runs as one program per SM walking 4
    ranges (on an H200's 132 SMs: 128 programs); with cache_seqlens, or ranges of 32k keys, the waves."""
    from flashlab.kernels import decode_plan

    q, k, v, _ = _inputs(16, 32, 32, 1, 1000, 128, torch.bfloat16, None, seed=89, device="cuda")
    choice = decode.choice_for(q, k)
    programs = decode.flat_programs(16 * 32, decode.sm_count_of(q), 1000)
    plan = decode_plan.plan_for(q, k, v, None, None, True, choice.splits, decode.config_of(q, choice))
    assert choice.splits == 1 and choice.wide and programs and plan.grid == (programs, 1, 1), (choice, plan.grid)
    lens = torch.full((16,), 1000, dtype=torch.int32, device="cuda")
    assert decode_plan.plan_for(q, k, v, lens, None, True, 1, decode.config_of(q, choice)).grid == (1, 512, 1)
    long_k = torch.empty(16, 32, 32768, 128, dtype=torch.bfloat16, device="cuda")  # 4 GiB with v (never launched)
    assert decode_plan.plan_for(q, long_k, long_k, None, None, True, 1, decode.config_of(q, choice)).grid == (1, 512, 1)
    ref_o, ref_lse = decode.decode_reference(q, k, v, None, scale=128 ** -0.5)
    o, lse = decode.flash_decode(q, k, v, return_lse=True)
    assert (o.double().cpu() - ref_o).abs().max().item() < 2e-2 and (lse.double().cpu() - ref_lse).abs().max().item() < 1e-3
    again = decode.flash_decode(q, k, v, return_lse=True)  # the plan's direct launch of the compiled flat kernel
    assert plan.args is not None and torch.equal(again[0], o) and torch.equal(again[1], lse)


@pytest.mark.gpu
def test_direct_launch_matches_triton_launch_and_never_syncs(monkeypatch):
    """The steady-state call launches the kept CompiledKernel itself: it must give the JIT launch's
    result bit for bit, and no call (first or later) may synchronise with the GPU."""
    from flashlab.kernels import decode_plan
    from flashlab.kernels.attention import allowed_error, max_error

    decode.clear_plans()
    q, k, v, s = _inputs(4, 32, 8, 1, 5000, 128, torch.bfloat16, [5000, 17, 4096, 1], seed=41, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")  # a .item(), a host copy or a sync raises
    try:
        # check_lengths=False: the sync-free step (the default reads the lengths: one sync)
        first = decode.flash_decode(q, k, v, s, return_lse=True, check_lengths=False)  # planned, JIT launch
        (plan, _), = decode._CALLS.values()
        assert plan.args is not None, "the plan kept no compiled kernel: every call would go through the JIT"
        direct = decode.flash_decode(q, k, v, s, return_lse=True, check_lengths=False)  # the fast path
        with pytest.raises(RuntimeError, match="synchroniz"):  # the default check syncs, once
            decode.flash_decode(q, k, v, s)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    monkeypatch.setattr(decode_plan, "DIRECT_LAUNCH", False)
    jit = decode.flash_decode(q, k, v, s, return_lse=True)
    for name, got in (("first", first), ("direct", direct)):
        assert torch.equal(got[0], jit[0]) and torch.equal(got[1], jit[1]), f"{name} launch differs from the JIT's"
    ref_o, _ = decode.decode_reference(q, k, v, s)
    same_o, _ = decode.decode_reference(q, k, v, s, upcast=False)
    assert max_error(direct[0].cpu(), ref_o) <= allowed_error(ref_o, same_o.cpu())


@pytest.mark.gpu
def test_combine_kernel_direct_launch_matches_triton_launch(monkeypatch):
    """The two-kernel path: after the first call the plan launches both compiled kernels itself."""
    from flashlab.kernels import decode_plan
    from flashlab.kernels import flash_decode as kernels

    decode.clear_plans()
    q, k, v, s = _inputs(2, 32, 8, 1, 9000, 128, torch.bfloat16, [9000, 333], seed=45, device="cuda")
    config = dataclasses.replace(kernels.default_config(128, torch.bfloat16), fused_combine=False)
    first = decode_plan.forward(q, k, v, s, 128 ** -0.5, True, 24, config)
    plan = decode_plan.plan_for(q, k, v, s, None, True, 24, config)
    assert plan.args is not None and plan.combine_args is not None, "the plan kept no compiled combine"
    direct = decode_plan.forward(q, k, v, s, 128 ** -0.5, True, 24, config)
    monkeypatch.setattr(decode_plan, "DIRECT_LAUNCH", False)
    jit = decode_plan.forward(q, k, v, s, 128 ** -0.5, True, 24, config)
    for name, got in (("first", first), ("direct", direct)):
        assert torch.equal(got[0], jit[0]) and torch.equal(got[1], jit[1]), f"{name} launch differs from the JIT's"
    ref_o, ref_lse = decode.decode_reference(q, k, v, s)
    assert (direct[1].cpu().double() - ref_lse).abs().max().item() < 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("warm", [True, False], ids=["planned-before-capture", "planned-in-capture"])
def test_flash_decode_replays_in_a_cuda_graph(warm):
    q, k, v, s = _inputs(2, 32, 8, 1, 3000, 128, torch.bfloat16, [3000, 1234], seed=43, device="cuda")
    decode.flash_decode(q, k, v, s)  # compiles the kernel outside any capture
    decode.clear_plans()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        if warm:
            decode.flash_decode(q, k, v, s)  # the capture stream's plan, made before the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            o = decode.flash_decode(q, k, v, s)  # (B, H, 1, d), rewritten by every replay
    torch.cuda.current_stream().wait_stream(stream)
    g = torch.Generator(device="cuda").manual_seed(44)
    for lengths in ([2000, 1234], [5, 77]):
        q.copy_(torch.randn(q.shape, generator=g, device="cuda", dtype=q.dtype))  # new values, same buffers
        s.copy_(torch.tensor(lengths, dtype=torch.int32))
        graph.replay()
        eager = decode.flash_decode(q, k, v, s)
        torch.cuda.synchronize()
        assert not o.isnan().any() and torch.equal(o, eager), f"replay differs from an eager call at {lengths}"


def test_results_table_shows_ratio_host_and_graph_columns():
    row = {"B": 1, "H": 32, "Hkv": 8, "Nk": 4096, "num_splits": 16, "results": {
        "flash_decode": {"us": 20.0, "tb_s": 0.8, "host_us": 18.0, "graph_us": 14.0},
        "sdpa_default": {"us": 16.0, "host_us": 25.0, "graph_us": 10.0}}}
    table = decode_results.results_table({"environment": {"device": "GPU", "date_utc": "2026-11-30"},
                                  "rows": [row, {"B": 64, "H": 32, "Hkv": 32, "Nk": 131072, "skipped": "too big"}]})
    line = next(line for line in table.splitlines() if line.startswith("  1  32   8"))
    assert "1.250x" in line and "18.0/25.0" in line and "14.0/10.0" in line, line
    assert all(len(line) <= 100 for line in table.splitlines() if not line.startswith(" ")), table  # the caption
    assert "skipped: too big" in table
    assert "no benchmarks/results" in decode_results.results_table({"rows": []})


def _unwrapped(text: str) -> str:
    """The summary's sentences one per line again (``course.wrap_prose`` continues them two columns in)."""
    return text.replace("\n  ", " ")


def test_results_summary_counts_rows_at_or_under_sdpa_and_bandwidth_at_long_caches():
    def row(B, nk, ours, sdpa, tb_s):
        return {"B": B, "H": 32, "Hkv": 8, "Nk": nk, "kv_bytes": B * nk, "results": {
            "flash_decode": {"us": ours, "tb_s": tb_s, "issue_us": 15.0, "host_us": ours},
            "sdpa_default": {"us": sdpa, "issue_us": 30.0, "host_us": sdpa}}}

    text = _unwrapped(decode_results.results_summary({"rows": [row(1, 4096, 20.0, 16.0, 0.9),
                                                               row(4, 32768, 99.0, 100.0, 4.0),
                                                               row(16, 131072, 101.0, 100.0, 3.0)]}))
    assert "on 1 of 3 rows, within 1.02x on 2" in text and "B=1 H=32 Hkv=8 Nk=4096 1.250x" in text, text
    assert ">= 3.5 TB/s on 1 of 2 rows" in text and "flash_decode 15-15 us, SDPA default 30-30 us" in text, text
    assert "flash_decode 20.0 us, SDPA default 16.0 us" in text, text


def test_repeat_summary_sorts_rows_by_the_sign_test_of_their_rounds():
    """decode_results.repeat_summary: rows flash_decode won or lost significantly more rounds of, named
    with their ratio, and the rows with no winner."""
    def row(B, wins, decided, p, ratio):
        return {"B": B, "H": 32, "Hkv": 8, "Nk": 4096, "rounds_flash_decode_faster": wins, "rounds_decided": decided,
                "sign_test_p": p, "ratio_of_medians": ratio}

    text = _unwrapped(decode_results.repeat_summary({"rounds": 12, "environment": {"device": "H200"}, "rows": [
        row(1, 12, 12, 0.0005, 0.96), row(4, 0, 12, 0.0005, 1.0046), row(16, 6, 12, 1.0, 1.0006),
        row(64, 1, 12, 0.006, 1.0013)]}))
    assert "faster in most rounds at 1 of 4 rows, slower at 2: (4,32,8,4k) 1.0046x, (64,32,8,4k) 1.0013x" in text
    assert "no winner (sign test p >= 0.05) at 1: (16,32,8,4k) 1.0006x" in text, text
    assert "no benchmarks/results" in decode_results.repeat_summary({"rows": []})


def test_results_summary_names_rows_over_the_spread_and_the_read_roofline():
    def row(B, ours, sdpa, spread, read_us):
        return {"B": B, "H": 32, "Hkv": 8, "Nk": 4096, "kv_bytes": B * 2**29, "read_ceiling": {"us": read_us},
                "vs_sdpa_default": {"ratio": ours / sdpa, "spread": spread, "within_spread": abs(ours / sdpa - 1) <= spread},
                "results": {"flash_decode": {"us": ours, "tb_s": 4.0}, "sdpa_default": {"us": sdpa}}}

    text = _unwrapped(decode_results.results_summary({"rows": [row(1, 101.0, 100.0, 0.02, 50.0),
                                                               row(4, 103.0, 100.0, 0.01, 100.0),
                                                               row(16, 99.0, 100.0, 0.01, 99.0)]}))
    assert "of the 2 rows over SDPA default, 1 differ" in text, text
    assert "the other 1 by more: B=4 H=32 Hkv=8 Nk=4096 1.030x" in text, text
    assert "B=1" not in text.split("by more:")[1].splitlines()[0], text  # within its spread
    assert "smallest row (B=1 H=32 Hkv=8 Nk=4096, pure read 50.0 us) flash_decode 2.02x, SDPA default 2.00x" in text, text
    assert "from 2 GiB of K and V up flash_decode 1.00-1.03x" in text, text
