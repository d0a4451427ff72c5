"""The warp-specialised Hopper rung (``v5_gluon_ws``): FlashAttention forward written in Gluon.

Same mathematics as every other rung (FlashAttention-2, Algorithm 1: online softmax in log2
units, the unmasked-then-masked loop), but the schedule is written by hand instead of left to
Triton's compiler. Gluon (``triton.experimental.gluon``, shipped with triton 3.6) is Triton's
lower-level language: the kernel names its register layouts, allocates its shared memory,
issues the tensor-core instructions (``warpgroup_mma``, Hopper's asynchronous ``wgmma``) and the
bulk copies (TMA) itself, and synchronises them with ``mbarrier`` objects. That is what the
schedule below needs and what ``tl.dot`` cannot express (benchmarks/NOTES.md, calls 1, 6, 7, 10).

One program (CTA) owns ``BLOCK_M = 128`` query rows of one (batch, head) and runs three
partitions of warps at once (``gl.warp_specialize``):

* **producer** (1 warp, few registers): loads the two halves of Q once, then walks the key
  blocks, copying K_j and V_j into a ring of ``NBUF`` shared-memory slots with TMA. Each slot has
  a *ready* barrier (the copy landed) and an *empty* barrier (both consumers are done with it).
* **two consumers** (one warpgroup of 4 warps each, most registers): consumer c owns query rows
  ``c*64 .. c*64+63`` of the block. Both read the same K/V slots. Each overlaps its own work in
  the FlashAttention-3 order: it issues ``S_j = Q K_j^T`` and ``O += P_{j-1} V_{j-1}`` on the
  tensor cores, waits only for S_j, computes the softmax of S_j while the P V product still runs,
  then waits for it and rescales O. The two consumers are not forced to take turns (FA3 orders
  them with named barriers, "ping-pong"); the warp schedulers interleave them, so while one is in
  its softmax the other's products can use the tensor cores. Measured on an H200: 1.16x to 1.25x
  the v4_hopper rung at d = 128, N >= 4096 (benchmarks/NOTES.md, call 12).

The program's work is a list of *tiles* (a query block of one head), numbered head group by head
group and, when causal, heaviest query block first (``_tile``). By default the grid has one
program per tile. ``GluonConfig(persistent=1)`` launches one program per SM instead, each looping
over tiles p, p + programs, ...: the producer loads the next tile's Q (once each consumer is done
with its half) and K/V (as ring slots free up) while the consumers finish the current tile, so
the prologue and the O store of one tile overlap the next tile's loads. Causal, a consumer whose
64 rows end before the diagonal's last key block (64-key blocks: consumer 0's half of every
diagonal block) skips that block and only releases its slot.

Layout and masking as the ``v4_hopper`` rung (``flash_fwd_hopper.py``): q is viewed as
(B*H, Nq, d) and k, v as (B*Hkv, Nk, d), one 3-D tensor descriptor each with a (1, rows, d) box;
the copy engine zero-fills a tile past the end of a head (never the next head's rows), those key
columns are masked to a large negative score and those query rows are never stored, so any Nq, Nk
works. Grouped-query attention (Hkv < H): query head h reads kv head h // (H // Hkv), indexed in
the kernel; k and v are never expanded.
Which keys a query sees is an :class:`flashlab.attnspec.AttnSpec`: dense, causal with either
alignment (``causal_align``), a sliding ``window`` (``SUPPORTED_OPTIONS``). The loop bounds and
the mask are those of every other rung: the kernel calls the Triton functions
``kernels.visible.kv_bounds`` and ``kernels.visible.visible`` (Gluon's front end compiles a
``@triton.jit`` function called from a ``@gluon.jit`` one with its own semantics; they use only
scalar arithmetic and comparisons, which mean the same in both), so one formula decides which
key blocks each query block loads, masked or not; keys outside that range are never loaded.
A ``mask_mod`` it refuses: its block lists are built for the launch's block sizes on the host
(``kernels.visible.block_lists``), which this rung's fixed pipeline does not read.

Gluon has no CPU interpreter: this rung runs only on a CUDA sm90 GPU. On a machine without one
it can still be compiled for sm90 (``tests/test_flash_fwd_gluon.py`` does, to check that it
builds and does not spill); its numbers are checked on the GPU (``benchmarks/gluon_probe.py
check``, ``benchmarks/gpu_sweep.py``, the GPU tests in ``tests/test_flash_fwd_gluon.py``).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

LN2 = math.log(2.0)
LOG2E = 1.0 / LN2
SUPPORTED_HEAD_DIMS = (64, 128)
SUPPORTED_OPTIONS = ("window", "causal_align")  # AttnSpec options beyond causal top-left (kernels.visible)
BLOCK_M = 128  # query rows per program: two consumer warpgroups of 64 rows


@dataclass(frozen=True)
class GluonConfig:
    """Launch configuration of the warp-specialised kernel."""

    block_n: int = 128  # key rows per step
    num_buffers: int = 2  # K/V ring depth in shared memory
    consumer_regs: int = 240  # registers per thread of a consumer warpgroup (setmaxnreg)
    producer_regs: int = 24  # registers per thread of the producer warp
    persistent: int = 0  # 1: one program per SM looping over (head, query block) tiles; 0: one per tile
    group_heads: int = 1  # tile order: groups of this many heads, each group's heaviest query blocks first

    def __post_init__(self):
        if self.block_n not in (64, 128):
            raise ValueError(f"block_n={self.block_n} must be 64 or 128 (a divisor of BLOCK_M={BLOCK_M})")
        if not 1 <= self.num_buffers <= 4:
            raise ValueError(f"num_buffers={self.num_buffers} must be 1..4")
        for name in ("consumer_regs", "producer_regs"):
            regs = getattr(self, name)
            if not 24 <= regs <= 256 or regs % 8:
                raise ValueError(f"{name}={regs} must be a multiple of 8 in 24..256 (setmaxnreg)")
        if self.persistent not in (0, 1):
            raise ValueError(f"persistent={self.persistent} must be 0 or 1")
        if self.group_heads < 1:
            raise ValueError(f"group_heads={self.group_heads} must be >= 1")

    def smem_bytes(self, head_dim: int, itemsize: int = 2) -> int:
        """Shared memory the kernel allocates: Q (two halves) and the K and V rings."""
        return (BLOCK_M + 2 * self.num_buffers * self.block_n) * head_dim * itemsize


# GluonConfig()'s defaults are the measured choice (benchmarks/NOTES.md, call 12,
# results/gluon_time_configs.json): at d = 128, N >= 4096 on an H200, 128-key blocks in a ring of
# two were the fastest of four configs on 11 of 12 rows and within 1 % on the twelfth. Entries here
# override it per (head dim, causal); none is needed so far.
DEFAULT_CONFIGS: dict[tuple[int, bool], GluonConfig] = {}

# Where flash_attention prefers this rung to v4_hopper: d = 128 and at least this many query rows
# and keys (causal or not). Measured in call 12: at d = 128 the Gluon rung is ahead from N = 1024
# (non-causal) and N = 2048 (causal); at N = 512, and at d = 64, the Hopper rung is as fast or faster.
PREFERRED_HEAD_DIMS = (128,)
PREFERRED_MIN_N = {False: 1024, True: 2048}
# ... and at least this many forward FLOPs (4*B*H*Nq*Nk*d, halved when causal). This rung's host
# launch path (Gluon descriptors, ~120 us per call on the H200's host) is ~50 us longer than
# v4's (~70 us): on GQA (B = 1, H = 32, Hkv = 8) causal rows v4 was faster in the median at
# N = 2048 (3.4e10 FLOP, a ~0.1 ms kernel, launch-bound: 0.112 vs 0.200 ms) and v5 from N = 4096
# (1.4e11 FLOP: 0.272 vs 0.319 ms); every MHA row of the protocol where the shape rule picks v5
# has >= 1.4e11 (benchmarks/results/bench_backward_call4_gqa.json, NOTES.md "Backward and GQA")
PREFERRED_MIN_FLOPS = 1e11

# The short causal rows, below PREFERRED_MIN_N[True]: d = 128, causal, 1024 <= min(Nq, Nk) < 2048,
# run with a persistent grid (one program per SM, tiles in groups of 4 heads, heaviest first) and
# consumer warpgroups capped at 232 registers, the producer given 40. Measured at N = 1024, B = 16,
# H = 16 on an H200, 9 interleaved rounds beside cuDNN and the config shipped before (groups of 8,
# 240 / 24 registers; benchmarks/NOTES.md, "Session 7, the short causal config",
# results/bench_fwd_short_s7d.json): 378 / 369 TFLOP/s bf16 / fp16, 0.91x / 0.92x cuDNN, faster
# than groups of 8 in 16 of 18 rounds; v4, the library's path before the persistent grid, 0.81-0.83x.
# That row is 6.9e10 FLOP (a 0.19 ms kernel against this rung's ~0.13 ms host launch path); a
# causal row of half that work stays on v4 (the launch-bound GQA row at N = 2048 above).
SHORT_CAUSAL_MIN_N = 1024
SHORT_CAUSAL_MIN_FLOPS = 6e10
SHORT_CAUSAL_CONFIG = GluonConfig(consumer_regs=232, producer_regs=40, persistent=1, group_heads=4)


def default_config(head_dim: int, causal: bool, n_q: int | None = None, n_k: int | None = None) -> GluonConfig:
    """The config used when none is given: SHORT_CAUSAL_CONFIG on the short causal rows (when
    n_q and n_k are given), else DEFAULT_CONFIGS' entry, else GluonConfig()."""
    if n_q is not None and n_k is not None and short_causal(head_dim, n_q, n_k, causal):
        return SHORT_CAUSAL_CONFIG
    return DEFAULT_CONFIGS.get((head_dim, causal), GluonConfig())


def short_causal(head_dim: int, n_q: int, n_k: int, causal: bool) -> bool:
    """The short causal rows: causal, d in PREFERRED_HEAD_DIMS, SHORT_CAUSAL_MIN_N <= min(Nq, Nk) < PREFERRED_MIN_N[True]."""
    return bool(causal) and head_dim in PREFERRED_HEAD_DIMS and SHORT_CAUSAL_MIN_N <= min(n_q, n_k) < PREFERRED_MIN_N[True]


@functools.lru_cache(maxsize=None)
def _kernels():
    """Define the Gluon kernels on first use: ``import flashlab`` must not need triton."""
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import (
        mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

    from .visible import kv_bounds, visible  # Triton functions: Gluon's front end compiles them too

    @gluon.jit
    def _tile(tile, N_M, BH, GROUP_HEADS, N_Q, N_KV, DIAG, WINDOW, BLOCK: gl.constexpr, BLOCK_N: gl.constexpr,
              CAUSAL: gl.constexpr, HAS_WINDOW: gl.constexpr):
        """Tile -> (query block start_m, head off_hz, key range): heads in groups of GROUP_HEADS,
        inside a group query block by query block (the heaviest first when causal), head by head.
        Returns (start_m, off_hz, lo, n_masked_lo, n_unmasked_hi, n_blocks)."""
        per_group = GROUP_HEADS * N_M
        group = tile // per_group
        r = tile % per_group
        heads = gl.minimum(GROUP_HEADS, BH - group * GROUP_HEADS)  # the last group may be short
        if CAUSAL:
            start_m = N_M - 1 - r // heads
        else:
            start_m = r // heads
        off_hz = group * GROUP_HEADS + r % heads
        # -- the key range of this query block from the shared rule (kernels.visible.kv_bounds, the
        #    same Triton function every other rung calls, compiled here by Gluon's front end):
        #    masked [lo, full_lo), unmasked [full_lo, full_hi), masked [full_hi, hi); keys outside
        #    [lo, hi) are never loaded. Counted in visited blocks from lo.
        lo, full_lo, full_hi, hi = kv_bounds(start_m, N_Q, N_KV, DIAG, WINDOW, None, BLOCK, BLOCK_N,
                                             CAUSAL, HAS_WINDOW, False)
        n_masked_lo = (full_lo - lo) // BLOCK_N
        n_unmasked_hi = (full_hi - lo) // BLOCK_N
        n_blocks = (hi - lo + BLOCK_N - 1) // BLOCK_N
        return start_m, off_hz, lo, n_masked_lo, n_unmasked_hi, n_blocks

    @gluon.jit
    def _producer(desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, k_empty, v_ready,
                  v_empty, N_TILES, N_M, BH, GROUP_HEADS, GROUP, N_Q, N_KV, DIAG, WINDOW,
                  HALF_M: gl.constexpr, BLOCK_N: gl.constexpr, NBUF: gl.constexpr, HEAD_DIM: gl.constexpr,
                  CAUSAL: gl.constexpr, HAS_WINDOW: gl.constexpr):
        # 3-D descriptors (head, row, column) with a (1, rows, d) box: a copy past the end of a
        # head is zero-filled, never read from the next head. The shared-memory tiles are 2-D
        # (rows, d) for the tensor cores; the copy writes them through a (1, rows, d) view.
        # it counts visited key blocks over all tiles of this program (ring slots), j the tiles
        it = 0
        j = 0
        for tile in range(gl.program_id(0), N_TILES, gl.num_programs(0)):
            start_m, off_hz, kv_lo, _, _, n_blocks = _tile(tile, N_M, BH, GROUP_HEADS, N_Q, N_KV, DIAG, WINDOW,
                                                           2 * HALF_M, BLOCK_N, CAUSAL, HAS_WINDOW)
            # grouped-query attention: query head h of batch z reads kv head h // GROUP, and
            # (z * H + h) // GROUP = z * Hkv + h // GROUP is that head's index in the (B*Hkv, Nk, d) view
            off_kv = off_hz // GROUP
            first_row = start_m * 2 * HALF_M
            for c in gl.static_range(2):  # the two consumers' halves of Q_i, once consumer c is done with the last
                mbarrier.wait(q_empty.index(c), (j & 1) ^ 1)
                mbarrier.expect(q_bar.index(c), desc_q.block_type.nbytes)
                tma.async_copy_global_to_shared(desc_q, [off_hz, first_row + c * HALF_M, 0], q_bar.index(c),
                                                q_smem.index(c).reshape([1, HALF_M, HEAD_DIM]))
            for t in range(n_blocks):
                slot = (it + t) % NBUF
                phase = ((it + t) // NBUF) & 1
                # a slot is free once both consumers arrived on its empty barrier; the first pass
                # waits on the phase before the barrier's first one, which counts as completed
                mbarrier.wait(k_empty.index(slot), phase ^ 1)
                mbarrier.expect(k_ready.index(slot), desc_k.block_type.nbytes)
                tma.async_copy_global_to_shared(desc_k, [off_kv, kv_lo + t * BLOCK_N, 0], k_ready.index(slot),
                                                k_smem.index(slot).reshape([1, BLOCK_N, HEAD_DIM]))
                mbarrier.wait(v_empty.index(slot), phase ^ 1)
                mbarrier.expect(v_ready.index(slot), desc_v.block_type.nbytes)
                tma.async_copy_global_to_shared(desc_v, [off_kv, kv_lo + t * BLOCK_N, 0], v_ready.index(slot),
                                                v_smem.index(slot).reshape([1, BLOCK_N, HEAD_DIM]))
            it += n_blocks
            j += 1

    @gluon.jit
    def _softmax(s, m_i, l_i, offs_m, col0, qk_scale, N_KV, DIAG, WINDOW,
                 BLOCK_N: gl.constexpr, MASKED: gl.constexpr, CAUSAL: gl.constexpr, HAS_WINDOW: gl.constexpr):
        """One online-softmax update in log2 units: (P_j, alpha, m_new, l_new) from S_j = Q K_j^T,
        the tile's keys starting at column col0."""
        if MASKED:
            cols = col0 + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, s.type.layout))
            # the rule and the ragged tail of K/V: kernels.visible.visible, as every other rung
            keep = visible(offs_m[:, None], cols[None, :], N_KV, DIAG, WINDOW, CAUSAL, HAS_WINDOW, None, False)
            # a large negative score, not -inf: a row that sees no key of this tile (a window's
            # lower edge) then has a finite m_new, and its next visible key rescales the
            # meaningless partial sums by alpha = 2^(about -1e6) = 0
            s = s * qk_scale + gl.where(keep, 0.0, -1.0e6)
            m_new = gl.maximum(m_i, gl.max(s, 1))
            s = s - m_new[:, None]
        else:
            m_new = gl.maximum(m_i, gl.max(s, 1) * qk_scale)
            s = s * qk_scale - m_new[:, None]
        p = gl.exp2(s)
        alpha = gl.exp2(m_i - m_new)
        l_new = l_i * alpha + gl.sum(p, 1)
        return p, alpha, m_new, l_new

    @gluon.jit
    def _step(t, base, col_lo, q, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty, zero_s, acc, p, m_i, l_i,
              offs_m, qk_scale, N_KV, DIAG, WINDOW,
              BLOCK_N: gl.constexpr, NBUF: gl.constexpr, MASKED: gl.constexpr, CAUSAL: gl.constexpr,
              HAS_WINDOW: gl.constexpr):
        """Visited key block t of the tile (keys from col_lo + t * BLOCK_N; ring use base + t):
        S_t = Q K_t^T and O += P_{t-1} V_{t-1} in flight together; softmax of S_t while the second
        runs; then O is rescaled. Returns the new (acc, p, m_i, l_i)."""
        o_rows: gl.constexpr = gl.SliceLayout(1, acc.type.layout)
        slot = (base + t) % NBUF
        mbarrier.wait(k_ready.index(slot), ((base + t) // NBUF) & 1)
        s_tok = warpgroup_mma(q, k_smem.index(slot).permute((1, 0)), zero_s, use_acc=False, is_async=True)
        prev = (base + t - 1) % NBUF
        mbarrier.wait(v_ready.index(prev), ((base + t - 1) // NBUF) & 1)
        acc_tok = warpgroup_mma(p, v_smem.index(prev), acc, is_async=True)
        s = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))  # S_t done; P_{t-1} V_{t-1} may run on
        mbarrier.arrive(k_empty.index(slot), count=1)
        p_f32, alpha, m_i, l_i = _softmax(s, m_i, l_i, offs_m, col_lo + t * BLOCK_N, qk_scale, N_KV, DIAG, WINDOW,
                                          BLOCK_N, MASKED, CAUSAL, HAS_WINDOW)
        p_next = gl.convert_layout(p_f32.to(p.dtype), p.type.layout)
        acc, p = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok, p))
        mbarrier.arrive(v_empty.index(prev), count=1)
        acc = acc * gl.convert_layout(alpha, o_rows)[:, None]
        return acc, p_next, m_i, l_i

    @gluon.jit
    def _consumer(q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, k_empty, v_ready, v_empty, Out, Lse,
                  qk_scale, N_TILES, N_M, BH, GROUP_HEADS, N_Q, N_KV, DIAG, WINDOW,
                  C: gl.constexpr, HALF_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                  NBUF: gl.constexpr, CAUSAL: gl.constexpr, HAS_WINDOW: gl.constexpr):
        dtype: gl.constexpr = q_smem.dtype
        s_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, BLOCK_N, 16])
        o_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                           instr_shape=[16, HEAD_DIM, 16])
        p_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=o_layout, k_width=2)
        s_rows: gl.constexpr = gl.SliceLayout(1, s_layout)
        o_rows: gl.constexpr = gl.SliceLayout(1, o_layout)
        zero_s = gl.zeros([HALF_M, BLOCK_N], gl.float32, s_layout)
        q = q_smem.index(C)
        it = 0  # visited key blocks of this program so far, over all its tiles (ring uses)
        j = 0  # tiles of this program so far (phase of q_bar)
        for tile in range(gl.program_id(0), N_TILES, gl.num_programs(0)):
            start_m, off_hz, col_lo, n_masked_lo, n_unmasked_hi, n_blocks = _tile(
                tile, N_M, BH, GROUP_HEADS, N_Q, N_KV, DIAG, WINDOW, 2 * HALF_M, BLOCK_N, CAUSAL, HAS_WINDOW)
            first_row = start_m * 2 * HALF_M
            row0 = off_hz * N_Q  # this head's first row of O (B*H*Nq, d rows) and lse
            # the key blocks this consumer's 64 rows see: causal, consumer 0 stops before the
            # diagonal's last block when it lies wholly past its last row (64-key blocks); the
            # producer still loads it for consumer 1, so it is only released (below)
            n_mine = n_blocks
            if CAUSAL:
                last_row = gl.minimum(first_row + C * HALF_M + HALF_M, N_Q) - 1
                hi_mine = gl.maximum(gl.minimum(N_KV, last_row + DIAG + 1), col_lo + 1)
                n_mine = gl.minimum(gl.maximum((hi_mine - col_lo + BLOCK_N - 1) // BLOCK_N, 1), n_blocks)

            offs_m = first_row + C * HALF_M + gl.arange(0, HALF_M, layout=s_rows)  # query rows (this head)
            acc = gl.zeros([HALF_M, HEAD_DIM], gl.float32, o_layout)
            m_i = gl.full([HALF_M], float("-inf"), gl.float32, s_rows)
            l_i = gl.zeros([HALF_M], gl.float32, s_rows)
            mbarrier.wait(q_bar.index(C), j & 1)

            # visited key block 0: S_0 alone (nothing to overlap yet); masked, since it may be the only block
            slot0 = it % NBUF
            mbarrier.wait(k_ready.index(slot0), (it // NBUF) & 1)
            s = warpgroup_mma(q, k_smem.index(slot0).permute((1, 0)), zero_s, use_acc=False, is_async=True)
            s = warpgroup_mma_wait(num_outstanding=0, deps=(s,))
            mbarrier.arrive(k_empty.index(slot0), count=1)
            p_f32, alpha, m_i, l_i = _softmax(s, m_i, l_i, offs_m, col_lo, qk_scale, N_KV, DIAG, WINDOW,
                                              BLOCK_N, True, CAUSAL, HAS_WINDOW)
            p = gl.convert_layout(p_f32.to(dtype), p_layout)

            # the three stages of kernels.visible.kv_bounds, counted in visited blocks: the window's
            # lower edge (masked), blocks no mask touches, the diagonal band and ragged tail (masked)
            for t in range(1, gl.minimum(n_masked_lo, n_mine)):
                acc, p, m_i, l_i = _step(t, it, col_lo, q, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty,
                                         zero_s, acc, p, m_i, l_i, offs_m, qk_scale, N_KV, DIAG, WINDOW,
                                         BLOCK_N, NBUF, True, CAUSAL, HAS_WINDOW)
            for t in range(gl.maximum(n_masked_lo, 1), gl.minimum(n_unmasked_hi, n_mine)):
                acc, p, m_i, l_i = _step(t, it, col_lo, q, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty,
                                         zero_s, acc, p, m_i, l_i, offs_m, qk_scale, N_KV, DIAG, WINDOW,
                                         BLOCK_N, NBUF, False, CAUSAL, HAS_WINDOW)
            for t in range(gl.maximum(n_unmasked_hi, 1), n_mine):
                acc, p, m_i, l_i = _step(t, it, col_lo, q, k_smem, v_smem, k_ready, k_empty, v_ready, v_empty,
                                         zero_s, acc, p, m_i, l_i, offs_m, qk_scale, N_KV, DIAG, WINDOW,
                                         BLOCK_N, NBUF, True, CAUSAL, HAS_WINDOW)
            # every S product of this tile is done: the producer may load the next tile's Q half
            mbarrier.arrive(q_empty.index(C), count=1)

            # the last P V product
            last = (it + n_mine - 1) % NBUF
            mbarrier.wait(v_ready.index(last), ((it + n_mine - 1) // NBUF) & 1)
            acc_tok = warpgroup_mma(p, v_smem.index(last), acc, is_async=True)
            acc, p = warpgroup_mma_wait(num_outstanding=0, deps=(acc_tok, p))
            mbarrier.arrive(v_empty.index(last), count=1)
            # blocks this consumer skips: released once they landed (an early arrival could
            # complete the slot's previous use for the other consumer)
            for t in range(n_mine, n_blocks):
                slot = (it + t) % NBUF
                phase = ((it + t) // NBUF) & 1
                mbarrier.wait(k_ready.index(slot), phase)
                mbarrier.arrive(k_empty.index(slot), count=1)
                mbarrier.wait(v_ready.index(slot), phase)
                mbarrier.arrive(v_empty.index(slot), count=1)

            # epilogue (paper lines 12-13): O_i = acc / l_i, lse_i = m_i + log(l_i) (natural log)
            acc = acc / gl.convert_layout(l_i, o_rows)[:, None]
            lse = (m_i + gl.log2(l_i)) * 0.6931471805599453
            gl.store(Lse + row0 + offs_m, lse, mask=offs_m < N_Q)
            rows_o = first_row + C * HALF_M + gl.arange(0, HALF_M, layout=o_rows)
            cols_o = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, o_layout))
            ptrs = Out + (row0 + rows_o).to(gl.int64)[:, None] * HEAD_DIM + cols_o[None, :]
            gl.store(ptrs, acc.to(dtype), mask=(rows_o < N_Q)[:, None])
            it += n_blocks
            j += 1

    @gluon.jit
    def flash_fwd_ws_kernel(desc_q, desc_k, desc_v, Out, Lse, qk_scale, N_Q, N_KV, GROUP, DIAG, WINDOW,
                            N_TILES, N_M, BH, GROUP_HEADS,
                            HEAD_DIM: gl.constexpr, HALF_M: gl.constexpr, BLOCK_N: gl.constexpr,
                            NBUF: gl.constexpr, CAUSAL: gl.constexpr, HAS_WINDOW: gl.constexpr,
                            CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
        # tiles (query block of BLOCK_M = 2 * HALF_M rows, head) numbered by _tile; program p runs
        # tiles p, p + programs, ...: one tile each when the grid has N_TILES programs, a loop
        # over several when it has one per SM (persistent), the next tile's Q and K/V then loading
        # while the consumers finish the current one
        # 2-D tiles for the tensor cores, swizzled as the descriptors' (1, rows, d) boxes are
        q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([HALF_M, HEAD_DIM], desc_q.dtype)
        kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_DIM], desc_k.dtype)
        q_smem = gl.allocate_shared_memory(desc_q.dtype, [2, HALF_M, HEAD_DIM], q_layout)
        k_smem = gl.allocate_shared_memory(desc_k.dtype, [NBUF, BLOCK_N, HEAD_DIM], kv_layout)
        v_smem = gl.allocate_shared_memory(desc_v.dtype, [NBUF, BLOCK_N, HEAD_DIM], kv_layout)
        q_bar = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        q_empty = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
        k_ready = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
        k_empty = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
        v_ready = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
        v_empty = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
        for c in gl.static_range(2):
            mbarrier.init(q_bar.index(c), count=1)
            mbarrier.init(q_empty.index(c), count=1)  # consumer c is done with its half of Q
        for i in gl.static_range(NBUF):
            mbarrier.init(k_ready.index(i), count=1)
            mbarrier.init(v_ready.index(i), count=1)
            mbarrier.init(k_empty.index(i), count=2)  # one arrival per consumer
            mbarrier.init(v_empty.index(i), count=2)

        # (the argument tuples are written out: a tuple built with + would lose its constexprs)
        gl.warp_specialize([
            (_consumer, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, k_empty, v_ready, v_empty, Out, Lse,
                         qk_scale, N_TILES, N_M, BH, GROUP_HEADS, N_Q, N_KV, DIAG, WINDOW,
                         0, HALF_M, BLOCK_N, HEAD_DIM, NBUF, CAUSAL, HAS_WINDOW)),
            (_consumer, (q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, k_empty, v_ready, v_empty, Out, Lse,
                         qk_scale, N_TILES, N_M, BH, GROUP_HEADS, N_Q, N_KV, DIAG, WINDOW,
                         1, HALF_M, BLOCK_N, HEAD_DIM, NBUF, CAUSAL, HAS_WINDOW)),
            (_producer, (desc_q, desc_k, desc_v, q_smem, k_smem, v_smem, q_bar, q_empty, k_ready, k_empty, v_ready,
                         v_empty, N_TILES, N_M, BH, GROUP_HEADS, GROUP, N_Q, N_KV, DIAG, WINDOW,
                         HALF_M, BLOCK_N, NBUF, HEAD_DIM, CAUSAL, HAS_WINDOW)),
        ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])

    return flash_fwd_ws_kernel


@functools.lru_cache(maxsize=None)
def _layouts(dtype: str, d: int, block_n: int):
    """(Q's shared layout, K's and V's) for a dtype name, head dim and key block: built once (``NVMMASharedLayout.get_default_for`` costs tens of microseconds per call)."""
    from triton.experimental.gluon import language as gl

    gl_dtype = {"torch.float16": gl.float16, "torch.bfloat16": gl.bfloat16}[dtype]
    half = [1, BLOCK_M // 2, d]
    kv = [1, block_n, d]
    return (gl.NVMMASharedLayout.get_default_for(half, gl_dtype), gl.NVMMASharedLayout.get_default_for(kv, gl_dtype))


KERNEL_TENSORS = ("desc_q", "desc_k", "desc_v", "Out", "Lse")  # per call: contiguous q, k, v; o, lse


def kernel_launch(q, k, v, spec, cfg: GluonConfig):
    """The launch of the kernel for inputs shaped as q (B, H, Nq, d), k and v (B, Hkv, Nk, d) as
    a :class:`flashlab.kernels.launch_plan.KernelLaunch`, called with the contiguous q, k, v and
    the outputs o, lse (``KERNEL_TENSORS``); descriptors over the per-head views, their
    layouts built once (``_layouts``). A launch plan keeps it."""
    import triton
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from .launch_plan import KernelLaunch, current_stream

    B, H, n_q, d = q.shape  # (B, H, Nq, d)
    h_kv, n_kv = k.shape[1], k.shape[2]
    rule = spec.kernel_args(n_q, n_kv)  # DIAG, WINDOW, CAUSAL, HAS_WINDOW (flashlab.attnspec)
    q_layout, kv_layout = _layouts(str(q.dtype), d, cfg.block_n)
    n_m = triton.cdiv(n_q, BLOCK_M)
    n_tiles = n_m * B * H  # (query block, head) tiles, ordered by the kernel's _tile
    programs = min(n_tiles, _sm_count(q.device)) if cfg.persistent else n_tiles
    static = dict(qk_scale=spec.resolved_scale(d) * LOG2E, N_Q=n_q, N_KV=n_kv, GROUP=H // h_kv,
                  DIAG=rule["DIAG"], WINDOW=rule["WINDOW"], N_TILES=n_tiles, N_M=n_m, BH=B * H,
                  GROUP_HEADS=min(cfg.group_heads, B * H), HEAD_DIM=d, HALF_M=BLOCK_M // 2, BLOCK_N=cfg.block_n,
                  NBUF=cfg.num_buffers, CAUSAL=spec.causal, HAS_WINDOW=rule["HAS_WINDOW"],
                  CONSUMER_REGS=cfg.consumer_regs, PRODUCER_REGS=cfg.producer_regs)
    builders = dict(  # over q3 (B*H, Nq, d) and k3, v3 (B*Hkv, Nk, d)
        desc_q=lambda t: TensorDescriptor.from_tensor(t.view(B * H, n_q, d), [1, BLOCK_M // 2, d], q_layout),
        desc_k=lambda t: TensorDescriptor.from_tensor(t.view(B * h_kv, n_kv, d), [1, cfg.block_n, d], kv_layout),
        desc_v=lambda t: TensorDescriptor.from_tensor(t.view(B * h_kv, n_kv, d), [1, cfg.block_n, d], kv_layout))
    return KernelLaunch(_kernels(), (programs,), static, KERNEL_TENSORS,
                        dict(num_warps=4), current_stream(q.device), q.is_cuda, builders)


def launch(q, k, v, causal: bool = False, scale: float | None = None,
           config: GluonConfig | None = None, checked: bool = False, warmup: bool = False):
    """Run the kernel; return ``(o, lse, compiled)``.

    ``warmup=True`` compiles without launching (``compiled`` then carries the PTX, the cubin and
    the resource report; ``o`` and ``lse`` are unwritten). ``checked=True`` skips the input checks.
    """
    from .flash_fwd_hopper import new_outputs
    from .visible import as_spec

    if not checked:
        _check_inputs(q, k, v, causal, scale, warmup)
    spec = as_spec(causal, scale)  # dense, causal (either alignment), sliding window
    cfg = config or default_config(q.shape[3], spec.causal, q.shape[2], k.shape[2])
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o, lse = new_outputs(q)
    plan = kernel_launch(q, k, v, spec, cfg)
    if warmup:
        return o, lse, plan.fn.warmup(**plan.jit_values((q, k, v, o, lse)), grid=plan.grid, **plan.options)
    return o, lse, plan(q, k, v, o, lse)


def forward(q, k, v, causal: bool = False, scale: float | None = None,
            config: GluonConfig | None = None, checked: bool = False):
    """Warp-specialised FlashAttention forward on Hopper.

    q (B, H, Nq, d), k and v (B, Hkv, Nk, d) with Hkv dividing H (query head h reads kv head
    h // (H // Hkv)): CUDA float16/bfloat16 tensors, d in (64, 128).
    Returns ``o`` (B, H, Nq, d) in q's dtype and ``lse`` (B, H, Nq) float32 (natural log).
    """
    o, lse, _ = launch(q, k, v, causal, scale, config, checked)
    return o, lse


def supports(q, k, v, causal: bool = False) -> bool:
    """True where this rung runs and has been verified: CUDA sm90, fp16/bf16, d in (64, 128),
    a number of kv heads Hkv that divides H, and Triton with Gluon. Never in the CPU interpreter."""
    try:
        _check_inputs(q, k, v, causal, None)
    except (TypeError, ValueError):
        return False
    return _runs_here(q)


def preferred(q, k, causal: bool) -> bool:
    """True where ``flash_attention`` uses this rung: it is supported and measured faster there
    than v4_hopper (PREFERRED_HEAD_DIMS, PREFERRED_MIN_N, PREFERRED_MIN_FLOPS; the short causal rows:
    SHORT_CAUSAL_MIN_N, SHORT_CAUSAL_MIN_FLOPS). Inputs must have passed
    ``attention.check_inputs``; only what that leaves open is tested (this runs on every call)."""
    import torch

    # any Nk: a short last key tile is zero-filled by the copy engine (per-head descriptors), and
    # grouped-query attention (Hkv < H) is indexed in the kernel, so neither needs a check here
    B, H, n_q, d = q.shape
    return (prefers_work(d, n_q, k.shape[2], causal, B * H)
            and q.dtype in (torch.float16, torch.bfloat16) and _runs_here(q))


def prefers_work(head_dim: int, n_q: int, n_k: int, causal: bool, heads: int) -> bool:
    """The shape and work half of :func:`preferred` for ``heads`` = B * H query heads: the long rows
    (``prefers_shape``, PREFERRED_MIN_FLOPS) or the short causal ones (SHORT_CAUSAL_MIN_FLOPS)."""
    flops = 4.0 * heads * n_q * n_k * head_dim / (2 if causal else 1)
    return ((prefers_shape(head_dim, n_q, n_k, causal) and flops >= PREFERRED_MIN_FLOPS)
            or (short_causal(head_dim, n_q, n_k, causal) and flops >= SHORT_CAUSAL_MIN_FLOPS))


def prefers_shape(head_dim: int, n_q: int, n_k: int, causal: bool) -> bool:
    """The shape half of :func:`preferred`: d in PREFERRED_HEAD_DIMS and min(Nq, Nk) >= PREFERRED_MIN_N."""
    return head_dim in PREFERRED_HEAD_DIMS and min(n_q, n_k) >= PREFERRED_MIN_N[bool(causal)]


def _runs_here(q) -> bool:
    """The device half of :func:`supports`: a CUDA sm90 tensor, Triton compiled (not interpreted), Gluon present."""
    from . import _mode

    if q.device.type != "cuda" or _mode.is_interpreter() or not _gluon_available():
        return False
    from .flash_fwd_hopper import _capability
    import torch

    return _capability(q.device.index if q.device.index is not None else torch.cuda.current_device())[0] == 9


@functools.lru_cache(maxsize=None)
def _sm_count(device) -> int:
    """Streaming multiprocessors of a CUDA device (a persistent grid's size); 132, an H100/H200's, off a GPU."""
    import torch

    if device.type != "cuda":
        return 132
    return torch.cuda.get_device_properties(device).multi_processor_count


@functools.lru_cache(maxsize=None)
def _gluon_available() -> bool:
    try:
        from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma  # noqa: F401
    except ImportError:
        return False
    return True


def _check_inputs(q, k, v, causal, scale, compile_only: bool = False):
    from .flash_fwd_hopper import check_rung_inputs

    check_rung_inputs(q, k, v, causal, scale, "the Gluon rung", SUPPORTED_HEAD_DIMS, SUPPORTED_OPTIONS,
                      grouped=True)
    if q.device.type != "cuda" and not compile_only:
        raise ValueError(f"q is on {q.device}; the Gluon rung runs on a CUDA sm90 (Hopper) GPU only "
                         "(flashlab.flash_attention picks a rung that runs here)")
