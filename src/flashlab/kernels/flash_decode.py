"""Split-KV decode attention in Triton (Flash-Decoding): few new queries against a long KV cache.

At decode a sequence brings ``Nq`` new queries (1 up to 16) and attends to its whole cache. The
FlashAttention-2 grid (one program per query block and (batch, head)) then has ``B * H`` programs:
at batch 1 and 32 heads, 32 programs for an H200's 132 SMs, each streaming the whole cache alone.
Two changes fill the GPU and read each K/V byte once:

* **GQA packing.** The ``GROUP = H // Hkv`` query heads that share one kv head, times the ``Nq``
  new queries, are the rows of one query tile: row ``r`` is query ``i = r % Nq`` of head
  ``h = hkv * GROUP + r // Nq``. One K/V tile loaded from HBM serves the whole group (the kernels of
  notebook 06 load the kv head once per query head instead).
* **Split-KV.** The key range ``[0, L_b)`` of sequence b is cut into ``NUM_SPLITS`` chunks of whole
  ``BLOCK_N`` blocks; the grid is ``(NUM_SPLITS, B * Hkv, row blocks)``. Each program runs the
  online softmax (FlashAttention-2 Algorithm 1, inner loop) over its chunk and writes a partial
  ``(o_s, lse_s)`` in fp32, merged exactly as ``flashlab.softmax.combine_states`` does with the
  state ``(m, l, acc) = (lse_s, 1, o_s)``: ``lse = logsumexp_s(lse_s)``,
  ``o = sum_s exp(lse_s - lse) o_s``. Who merges (``DecodeConfig.fused_combine``, chosen by the
  split rule): the last program of a tile to finish, which it learns from an atomic count of
  finished splits (one launch), loading ``combine_step`` splits' partials at a time so that
  their latencies overlap; or a second kernel, ``_combine_splits``, one program per query row
  (above 16 splits, where one program per tile merging them all became the step's tail,
  benchmarks/NOTES.md). With one split the first kernel writes ``o`` and ``lse`` itself.

A grid of several waves of wide programs (more (batch x kv head) ranges than SMs, unsplit, contiguous,
every length N_max, at most 4k keys: ``DecodeConfig.flat`` and ``flashlab.split_rule.flat_programs``) runs
as kernel 3,
``_decode_flat``: one program per SM walks the ranges p, p + programs, ... in one loop over all their
key blocks, so the software pipeline loads the next range's first tiles while the current range's last
ones are in use, instead of an SM waiting for a new program's first loads between waves.

Masks: keys at or past ``L_b`` (``cache_seqlens[b]``) are never loaded (masked loads, so a cache
poisoned with NaN past the length cannot leak in). With ``CAUSAL`` the alignment is bottom-right:
query i sees keys ``j <= L_b - Nq + i``. A row whose chunk holds no visible key keeps
``m_i = -inf, l_i = 0`` and writes ``lse_s = -inf, o_s = 0``, which the combine weighs by 0.

Walk order (``DecodeConfig.stagger``): the online softmax does not care in which order a chunk's
blocks come, so with ``stagger = s`` program p starts at block ``(p mod s) * blocks // s`` of its
chunk and wraps round to the blocks before it. Programs that stream at the same time then read
different offsets of their caches instead of the same offset of caches laid out one after another;
the wide config walks so with s = 2 (benchmarks/NOTES.md, decode, "walk order").

Paged cache (``PAGED``, as vLLM's PagedAttention): K and V are (num_blocks, Hkv, PAGE_SIZE, d)
and a block table (B, max_blocks) maps sequence b's logical block i to a physical block. Where
BLOCK_N divides PAGE_SIZE each K/V tile lies in one page: one table look-up per tile; smaller
pages (16 keys, say) keep the config's BLOCK_N and look a page up per key row (a gather). The
loop reads the next tile's entries one step ahead (``DecodeConfig.page_prefetch``): a look-up in
the same step delayed that step's K/V loads by a dependent global read (benchmarks/NOTES.md,
decode, call 7: 1.2-1.4x the contiguous cache's time at one program per SM).

Checked in the kernel too (``flashlab.decode.flash_decode`` raises on them by default, at the
cost of a host sync; with ``check_lengths=False`` only this check remains): a length outside
``Nq..N_max``, or a used table entry outside ``0..num_blocks - 1``, is never used to address
memory; that sequence's ``o`` and ``lse`` become NaN (a split passes NaN in its partial
``lse_s``, and the combine passes any NaN on).

Outputs: ``o`` (B, H, Nq, d) in q's dtype and ``lse`` (B, H, Nq) float32, natural log. Inputs are
assumed validated (``flashlab.decode``); the number of splits and the config (default or wide,
``config_for``) come from ``flashlab.split_rule.split_rule``. The launch plans that keep what
repeats between calls of one shape, and ``forward``, are in ``flashlab.kernels.decode_plan``.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from . import _mode
from .flash_fwd import _dot, head_dim_padded  # noqa: F401  (head_dim_padded: for flashlab.split_rule)

triton = _mode.triton()
import torch  # noqa: E402
import triton.language as tl  # noqa: E402

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
MAX_BLOCK_M = 64  # rows of one query tile; a larger group is cut into row blocks (grid axis 2)


@dataclass(frozen=True)
class DecodeConfig:
    """Launch configuration of the split-KV kernel (``block_m`` follows from the group, not here)."""

    block_n: int = 64  # key/value rows per inner step
    num_warps: int = 4
    num_stages: int = 3  # software-pipeline depth of the K/V loads
    fused_combine: bool = True  # the last split of a group combines (one launch); False: a second kernel
    combine_step: int = 8  # fused combine: splits whose partials it loads per step (a power of two)
    page_prefetch: bool = True  # paged cache: read the next tile's block-table entries a step ahead
    evict_first: bool = False  # K/V loads marked first to leave L2 (read once: keep L2's other lines)
    stagger: int = 0  # s > 1: program p starts its chunk at block (p mod s) * blocks // s and walks round
    # to it, so that programs streaming at once read different offsets of their caches; 0 or 1: every
    # program from its chunk's start. A paged cache is always walked from the start
    flat: bool = False  # unsplit, contiguous, every length N_max <= 4k, more (sequence, kv head) ranges than SMs:
    # one program per SM walks several ranges in one pipelined loop (``_decode_flat``) instead of waves of
    # one program per range, when the ranges divide evenly (``flashlab.split_rule.flat_programs``)


INTERPRETER_DECODE_CONFIG = DecodeConfig(block_n=16, num_warps=1, num_stages=1, combine_step=2)
SMEM_PER_SM = 228 * 1024  # shared memory of one H100/H200 SM, shared by the programs resident on it


def default_config(head_dim: int, dtype: torch.dtype) -> DecodeConfig:
    """The config used unless one is given: small tiles in the interpreter, else by head dim/dtype
    (bf16, d = 128: BLOCK_N = 64, 4 warps, 3 stages, measured on an H200, benchmarks/NOTES.md)."""
    if _mode.is_interpreter():
        return INTERPRETER_DECODE_CONFIG
    if head_dim > 128:
        return DecodeConfig(block_n=32, num_warps=4, num_stages=2)
    if dtype == torch.float32:
        return DecodeConfig(block_n=32, num_warps=4, num_stages=3)
    return DecodeConfig(block_n=64, num_warps=4, num_stages=3)


def has_wide_config(head_dim: int, dtype: torch.dtype) -> bool:
    """Whether ``config_for(..., wide=True)`` differs from the default: 16-bit, d = 128, compiled.
    Other head dims and fp32 keep the default (not measured; fp32 would not fit), and so does the
    interpreter."""
    return head_dim == 128 and dtype.itemsize == 2 and not _mode.is_interpreter()


def config_for(head_dim: int, dtype: torch.dtype, wide: bool = False, fused_combine: bool = True) -> DecodeConfig:
    """The config the split rule asks for (``flashlab.split_rule.split_rule``): the default, or with
    ``wide`` twice its K/V tile where :func:`has_wide_config`: BLOCK_N = 128 with 3 stages, 192 KB
    of shared memory, one program per SM with as many bytes in flight as two default ones
    (measured on an H200, benchmarks/NOTES.md, calls 5-7), odd programs starting halfway through
    their chunks (``stagger=2``: at most 0.5 % faster than all starting at the first block, faster at
    49 of 54 timings in three runs, ``benchmarks/decode_flush_probe.py --variants stagger``), and
    ``flat``: a grid of several waves of short ranges walked by one program per SM
    (``benchmarks/decode_flat_probe.py --library``: 0.8-0.9 % faster than the waves at 512 ranges of 4k
    keys; where it applies: ``flashlab.split_rule.flat_programs``)."""
    config = default_config(head_dim, dtype)
    if wide and has_wide_config(head_dim, dtype):
        config = dataclasses.replace(config, block_n=2 * config.block_n, stagger=2, flat=True)
    return config if fused_combine else dataclasses.replace(config, fused_combine=False)


def programs_per_sm(config: DecodeConfig, head_dim: int, itemsize: int) -> int:
    """How many split-KV programs fit on one SM at once, from the K/V pipeline's shared memory
    (num_stages x (K tile + V tile)) and the 64-warp limit. The split rule counts waves with it."""
    smem = config.num_stages * 2 * config.block_n * head_dim * itemsize
    return max(1, min(SMEM_PER_SM // max(1, smem), 64 // config.num_warps))


def block_m_for(rows: int) -> int:
    """BLOCK_M for a group of ``rows = GROUP * Nq`` query rows: a power of two in [16, MAX_BLOCK_M]
    (16: the smallest tile ``tl.dot`` takes)."""
    return min(MAX_BLOCK_M, max(16, triton.next_power_of_2(rows)))


def combine_step_for(config: DecodeConfig, block_m: int, head_dim: int) -> int:
    """Splits the fused combine loads per step: ``config.combine_step``, lowered (by powers of two)
    until its (BLOCK_M, step, HEAD_DIM) fp32 tile takes at most 128 registers per thread."""
    step = max(1, config.combine_step)
    while step > 1 and block_m * step * head_dim > 128 * 32 * config.num_warps:
        step //= 2
    return step


@triton.jit
def _table_entries(table_row, start, hi, stride_bb, PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr):
    """Block-table entries of the keys [start, start + BLOCK_N) of one sequence: one scalar where
    the tile lies in one page, else one per key row (BLOCK_N,); 0 for keys at or past hi (unread)."""
    if PAGE_SIZE >= BLOCK_N:
        entries = tl.load(table_row + (start // PAGE_SIZE) * stride_bb, mask=start < hi, other=0)
    else:
        offs = start + tl.arange(0, BLOCK_N)
        entries = tl.load(table_row + (offs // PAGE_SIZE) * stride_bb, mask=offs < hi, other=0)
    return entries


# --------------------------------------------------------------------------------------------
# Kernel 1: one program per (split, batch x kv head, row block)
# --------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["H_KV", "GROUP", "N_Q", "N_MAX", "NUM_SPLITS", "NUM_BLOCKS"])
def _decode_split_kv(
    Q, K, V, SeqLens, BlockTable, Out, LSE, OPart, LSEPart, Counters, sm_scale,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_oz, stride_oh, stride_om, stride_ok,
    stride_bz, stride_bb,
    H_KV, GROUP, N_Q, N_MAX, NUM_SPLITS, NUM_BLOCKS,
    HEAD_DIM: tl.constexpr, D_HEAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    PAGED: tl.constexpr, PAGE_SIZE: tl.constexpr, PAGE_PREFETCH: tl.constexpr, EVICT_FIRST: tl.constexpr, STAGGER: tl.constexpr, HAS_SEQLENS: tl.constexpr, CAUSAL: tl.constexpr, SPLIT: tl.constexpr, FUSED_COMBINE: tl.constexpr,
    COMBINE_STEP: tl.constexpr,
    DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    # -- which chunk of the cache, which (batch, kv head), which rows of the group
    split = tl.program_id(0)
    off_zh = tl.program_id(1)
    off_z = (off_zh // H_KV).to(tl.int64)
    off_hkv = (off_zh % H_KV).to(tl.int64)
    if HAS_SEQLENS:
        seqlen = tl.load(SeqLens + off_z).to(tl.int32)  # L_b: valid keys of this sequence
        # -- checked here, not on the host (no device sync): a length outside N_Q..N_MAX reads
        #    nothing and turns this sequence's outputs into NaN
        bad = (seqlen < N_Q) | (seqlen > N_MAX)
        seqlen = tl.where(bad, 0, seqlen)
    else:
        seqlen = N_MAX
        bad = N_MAX < 0  # False, as a tensor
    # -- GQA packing: row r of the tile is query i = r % N_Q of head h = hkv * GROUP + r // N_Q
    offs_r = tl.program_id(2) * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    row_ok = offs_r < GROUP * N_Q
    off_i = offs_r % N_Q
    off_h = off_hkv * GROUP + offs_r // N_Q  # (BLOCK_M,)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + off_z * stride_qz + off_h[:, None] * stride_qh + off_i[:, None] * stride_qm + offs_d[None, :] * stride_qk
    q = tl.load(q_ptrs, mask=row_ok[:, None] & (offs_d[None, :] < D_HEAD), other=0.0)  # (BLOCK_M, HEAD_DIM)
    # -- this split's keys: [lo, hi), whole BLOCK_N blocks except at the sequence's end
    per_split = tl.cdiv(tl.cdiv(seqlen, NUM_SPLITS), BLOCK_N) * BLOCK_N
    lo = split * per_split
    hi = tl.minimum(lo + per_split, seqlen)
    last_key = seqlen - N_Q + off_i  # (BLOCK_M,) bottom-right causal: query i sees keys j <= last_key
    if PAGED:  # K, V: (num_blocks, Hkv, PAGE_SIZE, d); stride_kz steps one physical block
        k_base = K + off_hkv * stride_kh
        v_base = V + off_hkv * stride_vh
    else:
        k_base = K + off_z * stride_kz + off_hkv * stride_kh
        v_base = V + off_z * stride_vz + off_hkv * stride_vh
    # -- m_i, l_i, acc of the online softmax (line 5); scores in log2 units
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    bad_pages = tl.full([], 0, tl.int32)  # paged: table entries of this chunk that name no block
    if PAGED:
        # -- the first tile's table entries; with PAGE_PREFETCH the loop reads each next tile's one
        #    step ahead, so the table read's latency overlaps a tile of work instead of holding up
        #    that tile's K/V loads (a program alone on its SM has nothing else to hide it behind)
        table_row = BlockTable + off_z * stride_bz
        page_next = _table_entries(table_row, lo, hi, stride_bb, PAGE_SIZE, BLOCK_N)
    # -- walk order: from block (program mod STAGGER) * blocks // STAGGER of the chunk, round to it
    span = tl.cdiv(hi - lo, BLOCK_N) * BLOCK_N  # the chunk's keys, in whole blocks
    if STAGGER > 1:
        rot = (off_zh % STAGGER) * (span // BLOCK_N // STAGGER) * BLOCK_N
    else:
        rot = 0
    for step_n in range(lo, hi, BLOCK_N):  # line 6
        start_n = step_n + rot
        if STAGGER > 1:
            start_n = tl.where(start_n >= lo + span, start_n - span, start_n)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        key_ok = offs_n < hi  # never load at or past L_b
        if PAGED:
            if PAGE_PREFETCH:
                page = page_next
                page_next = _table_entries(table_row, step_n + BLOCK_N, hi, stride_bb, PAGE_SIZE, BLOCK_N)
            else:
                page = _table_entries(table_row, step_n, hi, stride_bb, PAGE_SIZE, BLOCK_N)
            page = page.to(tl.int64)
        if PAGED and PAGE_SIZE >= BLOCK_N:
            # -- paged cache, the tile within one page (BLOCK_N divides PAGE_SIZE): one entry
            page_bad = (page < 0) | (page >= NUM_BLOCKS)  # checked here, not on the host: NaN outputs
            bad_pages += page_bad.to(tl.int32)
            page = tl.where(page_bad, 0, page)
            offs_row = start_n % PAGE_SIZE + tl.arange(0, BLOCK_N)  # rows inside the physical block
            k_tile = k_base + page * stride_kz + offs_row[:, None] * stride_kn
            v_tile = v_base + page * stride_vz + offs_row[:, None] * stride_vn
        elif PAGED:
            # -- paged cache, the tile across BLOCK_N // PAGE_SIZE pages: an entry per key row (a
            #    gather of whole rows); entries at or past hi are never read
            page_bad = key_ok & ((page < 0) | (page >= NUM_BLOCKS))  # (BLOCK_N,)
            bad_pages += tl.sum(page_bad.to(tl.int32), 0)
            page = tl.where(page_bad, 0, page)
            offs_row = offs_n % PAGE_SIZE  # (BLOCK_N,) rows inside their physical blocks
            k_tile = k_base + page[:, None] * stride_kz + offs_row[:, None] * stride_kn
            v_tile = v_base + page[:, None] * stride_vz + offs_row[:, None] * stride_vn
        else:
            k_tile = k_base + offs_n[:, None] * stride_kn
            v_tile = v_base + offs_n[:, None] * stride_vn
        # -- load K_j, V_j (line 7): one load serves every row of the group; with EVICT_FIRST the
        #    lines are the first L2 gives up, so the stream replaces its own lines, not L2's others
        k = tl.load(k_tile + offs_d[None, :] * stride_kk, mask=key_ok[:, None] & (offs_d[None, :] < D_HEAD),
                    other=0.0, eviction_policy="evict_first" if EVICT_FIRST else "")  # (BLOCK_N, HEAD_DIM)
        v = tl.load(v_tile + offs_d[None, :] * stride_vk, mask=key_ok[:, None] & (offs_d[None, :] < D_HEAD),
                    other=0.0, eviction_policy="evict_first" if EVICT_FIRST else "")  # (BLOCK_N, HEAD_DIM)
        # -- S_ij (line 8), masked past hi and (causal) past each row's last key
        qk = _dot(q, tl.trans(k), DOT_F32, DOT_PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N)
        visible = key_ok[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= last_key[:, None])
        qk = tl.where(visible, qk, float("-inf"))
        # -- m_ij, P_ij, l_i (line 9); a row with nothing visible yet keeps m = -inf, p = 0
        m_ij = tl.maximum(m_i, tl.max(qk, 1))  # (BLOCK_M,)
        m_safe = tl.where(m_ij == float("-inf"), 0.0, m_ij)
        p = tl.math.exp2(qk - m_safe[:, None])  # (BLOCK_M, BLOCK_N)
        alpha = tl.math.exp2(m_i - m_safe)  # (BLOCK_M,)
        l_i = l_i * alpha + tl.sum(p, 1)
        # -- acc = diag(alpha) acc + P_ij V_j (line 10)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, DOT_F32, DOT_PRECISION)
        m_i = m_ij
    # -- o = acc / l_i, lse = m_i + log(l_i) in natural log (lines 12-13); empty rows: o = 0, lse = -inf.
    #    A NaN in the cache's valid keys makes l_i NaN: not empty, so o and lse pass the NaN on
    empty = l_i == 0.0
    o = tl.where(empty[:, None], 0.0, acc / tl.where(empty, 1.0, l_i)[:, None])  # (BLOCK_M, HEAD_DIM)
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(tl.where(empty, 1.0, l_i))) * 0.6931471805599453)
    # -- a bad length or page: NaN in this split's o and lse (a combine passes NaN on)
    bad = bad | (bad_pages > 0)
    o = tl.where(bad, float("nan"), o)
    lse = tl.where(bad, float("nan"), lse)
    row = (off_z * H_KV * GROUP + off_h) * N_Q + off_i  # (BLOCK_M,) flat (b, h, i) index
    d_ok = offs_d[None, :] < D_HEAD
    o_ptrs = Out + off_z * stride_oz + off_h[:, None] * stride_oh + off_i[:, None] * stride_om + offs_d[None, :] * stride_ok
    if SPLIT:
        # -- partial state of this split, fp32: OPart (B*H*Nq, NUM_SPLITS, D_HEAD), LSEPart (B*H*Nq, NUM_SPLITS)
        tl.store(LSEPart + row * NUM_SPLITS + split, lse, mask=row_ok)
        tl.store(OPart + (row * NUM_SPLITS + split)[:, None] * D_HEAD + offs_d[None, :], o,
                 mask=row_ok[:, None] & d_ok)
        if FUSED_COMBINE:
            # -- count finished splits of this tile; the last one to finish combines them all.
            #    barrier: every thread's stores above come before the release of the count
            tl.debug_barrier()
            tile = off_zh * tl.num_programs(2) + tl.program_id(2)
            done = tl.atomic_add(Counters + tile, 1, sem="acq_rel", scope="gpu")
            if done == NUM_SPLITS - 1:
                # -- combine_states over the splits, state (m, l, acc) = (lse_s, 1, o_s), read from L2
                #    (.cg), COMBINE_STEP splits per step: their loads are independent, so their
                #    latencies overlap instead of adding up split after split
                m_c = tl.full([BLOCK_M], float("-inf"), tl.float32)
                l_c = tl.zeros([BLOCK_M], tl.float32)
                acc_c = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
                nan_c = tl.zeros([BLOCK_M], tl.int32)  # splits that flagged a bad length or page
                offs_t = tl.arange(0, COMBINE_STEP)
                for s0 in range(0, NUM_SPLITS, COMBINE_STEP):
                    offs_s = s0 + offs_t  # (COMBINE_STEP,)
                    ok = row_ok[:, None] & (offs_s[None, :] < NUM_SPLITS)  # (BLOCK_M, COMBINE_STEP)
                    part = row[:, None] * NUM_SPLITS + offs_s[None, :]  # (BLOCK_M, COMBINE_STEP)
                    lse_s = tl.load(LSEPart + part, mask=ok, other=float("-inf"),
                                    cache_modifier=".cg")  # (BLOCK_M, COMBINE_STEP)
                    o_s = tl.load(OPart + part[:, :, None] * D_HEAD + offs_d[None, None, :],
                                  mask=ok[:, :, None] & (offs_d[None, None, :] < D_HEAD), other=0.0,
                                  cache_modifier=".cg")  # (BLOCK_M, COMBINE_STEP, HEAD_DIM)
                    flagged = lse_s != lse_s  # (BLOCK_M, COMBINE_STEP) NaN: a bad length or page
                    nan_c += tl.sum(flagged.to(tl.int32), 1)
                    lse_s = tl.where(flagged, float("-inf"), lse_s)  # weighed 0 here; NaN set at the end
                    m_new = tl.maximum(m_c, tl.max(lse_s, 1))  # (BLOCK_M,)
                    m_new_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
                    alpha = tl.exp(m_c - m_new_safe)  # rescale of the state so far
                    w = tl.exp(lse_s - m_new_safe[:, None])  # (BLOCK_M, COMBINE_STEP) weights; 0 for empty splits
                    l_c = l_c * alpha + tl.sum(w, 1)
                    acc_c = acc_c * alpha[:, None] + tl.sum(w[:, :, None] * o_s, 1)
                    m_c = m_new
                l_c = tl.where(row_ok, l_c, 1.0)  # padding rows (never stored) saw nothing
                lse_c = tl.where(nan_c > 0, float("nan"), m_c + tl.log(l_c))
                o_c = tl.where(nan_c[:, None] > 0, float("nan"), acc_c / l_c[:, None])
                tl.store(LSE + row, lse_c, mask=row_ok)
                tl.store(o_ptrs, o_c.to(Out.dtype.element_ty), mask=row_ok[:, None] & d_ok)
                tl.atomic_xchg(Counters + tile, 0)  # leave the count at 0 (tidy; each call zeroes its own)
    else:
        tl.store(LSE + row, lse, mask=row_ok)
        tl.store(o_ptrs, o.to(Out.dtype.element_ty), mask=row_ok[:, None] & d_ok)


# --------------------------------------------------------------------------------------------
# Kernel 3: one program per SM walking several (batch x kv head) ranges, unsplit
# --------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["H_KV", "GROUP", "N_Q", "N_MAX", "LANES"])
def _decode_flat(
    Q, K, V, Out, LSE, sm_scale,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_oz, stride_oh, stride_om, stride_ok,
    H_KV, GROUP, N_Q, N_MAX, LANES,
    HEAD_DIM: tl.constexpr, D_HEAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    STAGGER: tl.constexpr, CAUSAL: tl.constexpr, DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    # -- program p takes the ranges (lanes) p, p + programs, ... of the B x Hkv (batch, kv head) pairs, every
    #    key valid (no cache_seqlens), the group's rows in one tile (GROUP * N_Q <= BLOCK_M). One loop runs
    #    over all its lanes' blocks end to end, so the software pipeline loads the next lane's first tiles
    #    while this lane's last ones are in use
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    blocks = tl.cdiv(N_MAX, BLOCK_N)  # key blocks of a lane
    mine = tl.cdiv(LANES - pid, programs)
    qk_scale = sm_scale * 1.4426950408889634
    # -- GQA packing, as kernel 1: row r is query i = r % N_Q of head hkv * GROUP + r // N_Q; the same rows
    #    for every lane (worked out once: per step, a vector division cost ~5 % of the step's time)
    offs_r = tl.arange(0, BLOCK_M)
    row_ok = offs_r < GROUP * N_Q
    off_i = offs_r % N_Q
    head_in_group = offs_r // N_Q
    last_key = N_MAX - N_Q + off_i  # (BLOCK_M,) bottom-right causal: query i sees keys j <= last_key
    offs_d = tl.arange(0, HEAD_DIM)
    d_ok = offs_d[None, :] < D_HEAD
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    for it in range(0, mine * blocks):
        step = it % blocks  # this lane's step
        lane = pid + (it // blocks) * programs
        off_z = (lane // H_KV).to(tl.int64)
        off_hkv = (lane % H_KV).to(tl.int64)
        off_h = off_hkv * GROUP + head_in_group  # (BLOCK_M,)
        if STAGGER > 1:  # walk order, as kernel 1: from block (lane mod s) * blocks // s, round to it
            block = step + (lane % STAGGER) * (blocks // STAGGER)
            block = tl.where(block >= blocks, block - blocks, block)
        else:
            block = step
        offs_n = block * BLOCK_N + tl.arange(0, BLOCK_N)
        key_ok = offs_n < N_MAX
        q = tl.load(Q + off_z * stride_qz + off_h[:, None] * stride_qh + off_i[:, None] * stride_qm
                    + offs_d[None, :] * stride_qk, mask=row_ok[:, None] & d_ok, other=0.0)  # (BLOCK_M, HEAD_DIM)
        k = tl.load(K + off_z * stride_kz + off_hkv * stride_kh + offs_n[:, None] * stride_kn
                    + offs_d[None, :] * stride_kk, mask=key_ok[:, None] & d_ok, other=0.0)  # (BLOCK_N, HEAD_DIM)
        v = tl.load(V + off_z * stride_vz + off_hkv * stride_vh + offs_n[:, None] * stride_vn
                    + offs_d[None, :] * stride_vk, mask=key_ok[:, None] & d_ok, other=0.0)  # (BLOCK_N, HEAD_DIM)
        qk = _dot(q, tl.trans(k), DOT_F32, DOT_PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N), log2 units
        visible = key_ok[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= last_key[:, None])
        qk = tl.where(visible, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        m_safe = tl.where(m_ij == float("-inf"), 0.0, m_ij)
        p = tl.math.exp2(qk - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, DOT_F32, DOT_PRECISION)
        m_i = m_ij
        last = step == blocks - 1
        if last:  # the lane's o and lse (every row saw a key: N_MAX >= N_Q)
            row = (off_z * H_KV * GROUP + off_h) * N_Q + off_i
            tl.store(LSE + row, (m_i + tl.math.log2(l_i)) * 0.6931471805599453, mask=row_ok)
            tl.store(Out + off_z * stride_oz + off_h[:, None] * stride_oh + off_i[:, None] * stride_om
                     + offs_d[None, :] * stride_ok, (acc / l_i[:, None]).to(Out.dtype.element_ty),
                     mask=row_ok[:, None] & d_ok)
        # -- the next lane starts afresh; l_i and acc selected to 0, not scaled by exp2(-inf) = 0: a NaN in one
        #    sequence's cache must not reach the next lane's output through 0 * NaN
        m_i = tl.where(last, float("-inf"), m_i)
        l_i = tl.where(last, 0.0, l_i)
        acc = tl.where(last, 0.0, acc)


# --------------------------------------------------------------------------------------------
# Kernel 2: combine the splits' partial states, one program per (b, h, i) row
# --------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["H", "N_Q", "NUM_SPLITS"])
def _combine_splits(
    OPart, LSEPart, Out, LSE,
    stride_oz, stride_oh, stride_om, stride_ok,
    H, N_Q, NUM_SPLITS,
    HEAD_DIM: tl.constexpr, D_HEAD: tl.constexpr, BLOCK_S: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # flat (b, h, i)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_DIM)
    s_ok = offs_s < NUM_SPLITS
    # -- combine_states over the splits, each the state (m, l, acc) = (lse_s, 1, o_s)
    lse_s = tl.load(LSEPart + row * NUM_SPLITS + offs_s, mask=s_ok, other=float("-inf"))  # (BLOCK_S,)
    m = tl.max(lse_s, 0)  # finite: every row sees at least one key in some split
    w = tl.exp(lse_s - m)  # (BLOCK_S,) exp(lse_s - m); 0 for empty splits
    l = tl.sum(w, 0)
    o_s = tl.load(OPart + (row * NUM_SPLITS + offs_s)[:, None] * D_HEAD + offs_d[None, :],
                  mask=s_ok[:, None] & (offs_d[None, :] < D_HEAD), other=0.0)  # (BLOCK_S, HEAD_DIM)
    o = tl.sum(w[:, None] * o_s, 0) / l  # (HEAD_DIM,)
    bad = tl.sum((lse_s != lse_s).to(tl.int32), 0) > 0  # a split flagged a bad length or page
    o = tl.where(bad, float("nan"), o)
    tl.store(LSE + row, tl.where(bad, float("nan"), m + tl.log(l)))
    off_i = row % N_Q
    off_h = (row // N_Q) % H
    off_z = row // (N_Q * H)
    tl.store(Out + off_z * stride_oz + off_h * stride_oh + off_i * stride_om + offs_d * stride_ok,
             o.to(Out.dtype.element_ty), mask=offs_d < D_HEAD)
