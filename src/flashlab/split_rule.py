"""The split rule of decode attention: how a decode step is cut across the GPU.

A decode step streams each sequence's KV cache once. ``flashlab.kernels.flash_decode`` cuts the
key range into chunks (splits) so that batch x kv heads x splits programs fill the SMs, then merges
the chunks' partial states. :func:`split_rule` picks the number of splits, the tile config and who
merges (pure, no torch, tested as a function); :func:`choice_for` applies it to tensors, with the
device's SM count. ``flashlab.decode`` (``flash_decode``) uses it on every call, through a cache.
"""
from __future__ import annotations

import functools
import math
import numbers
from typing import NamedTuple

MAX_SPLITS = 128  # most chunks the cache is cut into
MIN_KEYS_PER_SPLIT = 256  # fewer keys per chunk than this: the combine costs more than it gains
ONE_WAVE_FILL = 0.95  # a grid that fills the SMs (or the slots) to this fraction counts as full
MANY_WAVES = 7  # a grid of at least this many waves of the default config runs unsplit, as it is
PARTIAL_WAVE_FILL = 0.7  # a small grid whose one-per-SM split would spill into a second wave runs
# in one partial wave instead when it keeps this fraction of the SMs busy (call 7: 96 of 132 SMs read
# within 0.2-2.5 %; call 12's probe: 124 programs cut in 2 splits ran 1.7 % over SDPA default)
SECOND_PER_SM_MAX_SPLITS = 16  # a second program per SM is worth at most this many splits
FUSED_MAX_SPLITS = 16  # the last split combines up to this many splits; more: the combine kernel
INTERPRETER_SMS = 1  # the SM count the rule assumes in Triton's CPU interpreter
FLAT_MAX_KEYS = 4096  # the flat walk for ranges of at most this many keys: measured 0.99x the waves at 4k, 0.999x at
# 8k (within the rounds' spread), 1.008x at 16k and 1.02-1.03x at 32k (benchmarks/results/decode_flat_library*.json)


class SplitChoice(NamedTuple):
    """What the split rule decides for one shape of decode step."""

    splits: int  # chunks each sequence's key range is cut into
    wide: bool  # the wide config: twice the K/V tile, one program per SM (``kernels.flash_decode.config_for``)
    fused: bool  # the last split of a tile merges the partials (one launch); False: the combine kernel


def wave_efficiency(programs: int, slots: int) -> float:
    """Busy fraction of the waves: programs / (slots * waves), waves = ceil(programs / slots)."""
    return programs / (slots * -(-programs // slots))


def _check_sizes(**sizes) -> None:
    for name, value in sizes.items():
        if type(value) is not int and (isinstance(value, bool) or not isinstance(value, numbers.Integral)) \
                or value < 1:
            raise ValueError(f"{name}={value!r} must be an int >= 1")


def split_rule(batch: int, kv_heads: int, row_blocks: int, max_len: int, sms: int,
               programs_per_sm: int = 2, has_wide: bool = True) -> SplitChoice:
    """How to cut a decode step across the GPU: splits, tile config and combine (the split rule).

    The grid has ``programs = batch * kv_heads * row_blocks`` programs per split (``row_blocks``:
    query tiles per kv group, 1 unless GROUP * Nq > 64); ``sms`` SMs hold ``programs_per_sm`` of
    the default config's programs each (``kernels.flash_decode.programs_per_sm``): ``slots``.
    ``has_wide``: whether the *wide* config exists for this head dim and dtype (128-key tiles,
    3 stages, 192 KB of shared memory: one program per SM with as many bytes in flight as two
    default ones, odd programs starting halfway through their chunks; 16-bit, d = 128,
    ``kernels.flash_decode.has_wide_config``).
    Decode is memory-bound and every program streams the same number of keys; what costs time is
    an idle tail (a partly filled last wave, late programs finishing alone) and, per split, the
    merge of the partial states. Measured on an H200 (benchmarks/NOTES.md, decode, calls 1-7):

    * **large grid** (``programs >= MANY_WAVES * slots``): no split, default config.
    * **the grid fills every SM once** (``programs >= ONE_WAVE_FILL * sms``): no split, wide
      config. Call 5: 128 programs 75.6 us vs 78.4 (default, 2 splits; SDPA 76.5) at 4k keys,
      486 vs 492 us at 32k; 512 programs 254 vs 261 us (SDPA 255).
      Refuted for these grids (benchmarks/NOTES.md, decode): 64-key tiles with 6 stages (call 10:
      1.2-2.4 % slower; in commit 790d0ac as ``deep``), a balanced grid of one wide program
      per SM on equal runs of key blocks (calls 19-20: 1.0008-1.086x the rule's time), and K/V
      tiles by TMA (calls 23-28: 0.99-1.03x the cp.async loads' time, machine to machine; in
      commit 0dd6b8e), and L2 qualifiers on the K/V copies, which Triton cannot ask for (the
      kernel's PTX patched, ``benchmarks/decode_ptx_probe.py``: ``.L2::128B`` within the spread,
      ``.L2::256B`` 5-8 % slower), and pipelines of other depths (``benchmarks/decode_flush_probe.py``:
      4 stages 0.4-1.7 % slower, 2 stages or 64-key tiles 4-26 % slower), and a load schedule
      written by hand (the warp-specialised Gluon forward, ``benchmarks/decode_gluon_probe.py``: within
      0.3 % of SDPA on either side, as flash_decode), and short tail chunks launched after every
      range's head for the SMs that finish first (``benchmarks/decode_tail_probe.py``, commit bd5b111:
      0.996-1.38x the rule's time). cuDNN's kernel there issues the same copies from the same grid
      (``benchmarks/decode_ncu_compare.py``).
    * **small grid**: split, so that every SM runs one wide program: the fewest splits that fill
      ``ONE_WAVE_FILL`` of the SMs (8 programs: 16 splits; 32 programs: 4); where those splits
      would spill into a second wave (124 programs: 2 splits, 248 programs for 132 SMs), the most
      splits that stay in one wave if they keep ``PARTIAL_WAVE_FILL`` of the SMs busy (124: 1,
      unsplit). Call 7, 128k keys:
      138.3 us vs 140.7 for the default config at 16 splits (8 programs), 490.9 / 490.4 vs
      493.5 / 494.2 at 8 (32 programs); at 32k 0.9-1.6% faster, at 4k within the rounds' spread;
      fewer wide splits (96 programs) 0.2-2.5% slower at 32k / 128k, two waves of them 0.6-8%
      slower there and 13-17% at 4k.
      Without a wide config: two default programs per SM (the most splits that fill ``slots``)
      if that takes at most ``SECOND_PER_SM_MAX_SPLITS`` splits, else one per SM (call 5).

    Splits are capped so that each chunk keeps at least ``MIN_KEYS_PER_SPLIT`` keys of ``max_len``
    and at most ``MAX_SPLITS``. The combine: fused (the last split to finish merges, one launch)
    up to ``FUSED_MAX_SPLITS`` splits, else the second kernel (one program per query row, which
    spreads a long merge; call 5 at 33 splits: 17.2 vs 19.0 us). Examples on an H200 (132 SMs,
    2 default programs each): 8 programs -> 16 splits, wide; 32 -> 4, wide; 128 -> 1, wide;
    512 -> 1, wide (with every length N_max <= 4k keys, walked flat by 128 programs: :func:`flat_programs`);
    2048 -> 1, default.
    """
    _check_sizes(batch=batch, kv_heads=kv_heads, row_blocks=row_blocks, max_len=max_len, sms=sms,
                 programs_per_sm=programs_per_sm)
    if not isinstance(has_wide, bool):
        raise ValueError(f"has_wide={has_wide!r} must be True or False")
    programs = batch * kv_heads * row_blocks
    slots = sms * programs_per_sm
    if programs >= MANY_WAVES * slots:
        return SplitChoice(1, False, True)
    if programs >= ONE_WAVE_FILL * sms:
        return SplitChoice(1, has_wide, True)
    cap = max(1, min(MAX_SPLITS, max_len // MIN_KEYS_PER_SPLIT))
    one_per_sm = -(-int(math.ceil(ONE_WAVE_FILL * sms)) // programs)
    in_one_wave = sms // programs  # the most splits with one program per SM and no second wave
    if programs * one_per_sm > sms and in_one_wave >= 1 and programs * in_one_wave >= PARTIAL_WAVE_FILL * sms:
        one_per_sm = in_one_wave
    two_per_sm = slots // programs
    if has_wide:
        splits = one_per_sm
    elif programs * two_per_sm >= ONE_WAVE_FILL * slots and two_per_sm <= SECOND_PER_SM_MAX_SPLITS:
        splits = two_per_sm
    else:
        splits = one_per_sm
    splits = max(1, min(splits, cap))
    return SplitChoice(splits, has_wide, splits <= FUSED_MAX_SPLITS)


def num_splits(batch: int, kv_heads: int, row_blocks: int, max_len: int, sms: int, programs_per_sm: int = 2,
               has_wide: bool = True) -> int:
    """The number of splits of :func:`split_rule`."""
    return split_rule(batch, kv_heads, row_blocks, max_len, sms, programs_per_sm, has_wide).splits


@functools.lru_cache(maxsize=None)
def _sm_count(device_index: int) -> int:
    import torch

    return torch.cuda.get_device_properties(device_index).multi_processor_count


def flat_programs(lanes: int, sms: int, max_len: int) -> int:
    """Programs of the flat walk (``kernels.flash_decode._decode_flat``) for ``lanes`` unsplit ranges of
    ``max_len`` keys, one wide program each, on ``sms`` SMs; or 0 for waves of one program per range.
    Flat where the ranges fill more than one wave, divide evenly among at least ``ONE_WAVE_FILL`` of the
    SMs (every program walks the same number: 512 ranges on 132 SMs, 128 programs of 4), and hold at most
    ``FLAT_MAX_KEYS`` keys. Measured on an H200 (``benchmarks/decode_flat_probe.py --library``,
    benchmarks/NOTES.md, decode, session 22): at 512 ranges of 4k keys 0.8-0.9 % faster than the waves
    and than SDPA's default; at 32k and 128k keys slower and unsteady (rounds 1885-2094 us against the
    waves' 1896-1902 us at 32k), where the waves' scheduler hands each new range to the SM that is free
    and a fixed walk waits for its slowest SM."""
    _check_sizes(lanes=lanes, sms=sms, max_len=max_len)
    if lanes <= sms or max_len > FLAT_MAX_KEYS:
        return 0
    programs = max(p for p in range(1, sms + 1) if lanes % p == 0)
    return programs if programs >= ONE_WAVE_FILL * sms else 0


def sm_count_of(tensor) -> int:
    """SMs of the tensor's GPU; ``INTERPRETER_SMS`` for a CPU tensor (the interpreter)."""
    if tensor.device.type != "cuda":
        return INTERPRETER_SMS
    import torch

    index = tensor.device.index if tensor.device.index is not None else torch.cuda.current_device()
    return _sm_count(index)


@functools.lru_cache(maxsize=4096)
def _rule_for(B: int, H: int, Nq: int, d: int, Hkv: int, n_max: int, itemsize: int, is_fp32: bool,
              sms: int) -> SplitChoice:
    import torch

    from .kernels.flash_decode import block_m_for, default_config, has_wide_config, head_dim_padded, programs_per_sm

    rows = (H // Hkv) * Nq
    row_blocks = -(-rows // block_m_for(rows))
    head_dim = head_dim_padded(d)
    dtype = torch.float32 if is_fp32 else torch.float16  # the configs depend on the item size only
    config = default_config(head_dim, dtype)
    return split_rule(B, Hkv, row_blocks, n_max, sms, programs_per_sm(config, head_dim, itemsize),
                      has_wide_config(head_dim, dtype))


def choice_for(q, k, num_splits_arg=None, n_max: int | None = None) -> SplitChoice:
    """The :class:`SplitChoice` for q (B, H, Nq, d) against a cache of kv heads k.shape[1] and
    ``n_max`` keys (default k.shape[2]): :func:`split_rule` of the shape, the device's SM count
    and the default config's programs per SM (cached per shape); with ``num_splits_arg`` given,
    that many splits, the default config, and the combine as the rule would pick it."""
    if num_splits_arg is not None:
        return SplitChoice(num_splits_arg, False, num_splits_arg <= FUSED_MAX_SPLITS)
    B, H, Nq, d = q.shape
    return _rule_for(B, H, Nq, d, k.shape[1], k.shape[2] if n_max is None else n_max, q.element_size(),
                     q.element_size() == 4, sm_count_of(q))


def splits_for(q, k, num_splits_arg=None) -> int:
    """The number of splits of :func:`choice_for`."""
    return choice_for(q, k, num_splits_arg).splits


def config_of(q, choice: SplitChoice):
    """The kernel config (``kernels.flash_decode.DecodeConfig``) a :class:`SplitChoice` asks for."""
    from .kernels.flash_decode import config_for, head_dim_padded

    return config_for(head_dim_padded(q.shape[-1]), q.dtype, choice.wide, choice.fused)
