"""The warp-specialised Hopper backward (``bwd_gluon_ws``): FlashAttention backward in one pass, in Gluon.

FlashAttention-2, Algorithm 2, with the five matrix products of a (key block, query block) tile
done once (the two-pass backward of :mod:`flashlab.kernels.flash_bwd` does seven: S and dP twice),
scheduled by hand as the Gluon forward (:mod:`flashlab.kernels.flash_fwd_gluon`) is:

* **producer** (1 warp): copies K_j and V_j (``BLOCK_N = 128`` keys) once with TMA, then streams
  Q_i and dO_i (``BLOCK_M = 64`` query rows) of every query block that sees this key block, for
  every query head of the kv head (grouped-query attention), through a ring of ``NBUF`` slots
  (a *ready* barrier per slot: the copies landed; an *empty* one: both consumers are done).
* **two consumers** (one warpgroup each): consumer c owns keys ``c*64 .. c*64+63`` of the block
  and, for each query block (lines 8-17 of Algorithm 2, transposed so the key rows are the
  wgmma's M dimension):

      S^T = K_c Q_i^T,  dP^T = V_c dO_i^T               (both issued at once on the tensor cores)
      P^T = exp2(S^T * scale * log2(e) - lse_i * log2(e))   (while dP^T still runs)
      dV_c += P^T dO_i                                   (P^T as a register operand)
      dS^T = P^T * (dP^T - D_i),  dK_c += dS^T Q_i
      dQ_i += scale * dS_i K_j                           (line 15: this key block's share)

  dS^T goes to shared memory for the last product. With ``dq_split="d"`` (the default schedule)
  the two consumers exchange their halves of dS^T through shared memory (barriers *ds_ready* and
  *ds_empty*) and consumer c computes dQ_i's columns ``c*d/2 ..`` over all 128 keys (at d = 64 a
  32-column slice of the 128-byte-swizzled K tile, which the wgmma reads correctly: GPU tests and
  the bench's checks); with ``"keys"`` each consumer computes dQ_i's partial sum over its own
  64 keys (twice the reduce bytes). Either way each consumer stages its (64, cols) fp32
  piece in shared memory and the copy engine adds it into a (B*H, Nq, d) fp32 buffer
  (``cp.reduce.async.bulk.tensor`` add, issued by one thread and not waited for until the staging
  buffer is reused a step later: the reduction runs while the next products do). Where this
  Triton's Gluon has no binding for the tile reduce, ``dq_reduce="atomic"`` adds from registers
  with relaxed per-element atomics. The fp32 buffer is cast to the input dtype at the end.

Schedules (``GluonBwdConfig``; ``default_config`` picks per shape what was measured fastest):
``lag_dq`` (d = 128) issues, at step t, the dQ product of step t - 1 from a second dS^T buffer, so
a consumer meets the other's dS^T half a step after it was written instead of waiting for it: the
two warpgroups drift out of phase and one's exp2/dS^T arithmetic runs beside the other's products
(15-18 % faster dense at d = 128 on an H200); ``heavy_first`` launches every head's first key block
first (faster on causal GQA, slower on MHA, where a head's key blocks running side by side share its
Q, dO rows in L2); ``head_group`` does the same within groups of heads that about fill the SMs (causal
MHA: the long key blocks start first, and the CTAs that run together are still a few heads' blocks,
sharing their rows: 4 % faster at d = 128, N = 4096 against the plain order in one run);
``early_dq`` queues dQ's product behind dK's and dV's instead of after their wait;
``rows_in_smem`` has the producer put lse_i and D_i in the ring slot beside Q_i, dO_i, so a consumer
reads them where they are used instead of holding 32 registers from the start of a step (d = 128:
ptxas's spill frame 216 -> 104 bytes dense); ``one_loop`` runs the masked and unmasked steps in one
loop with the mask under a run-time branch (with ``rows_in_smem``, the causal kernel's spill frame
248 -> 40 bytes: the separate masked loop is what kept the causal hot loop spilling).
Measured on an H200, bf16, forward+backward against cuDNN in the same run, ``default_config``'s
schedules (``rows_in_smem`` everywhere, the exchange at d = 64 too; see its docstring): d = 128
1.03-1.04x dense and 0.95-1.05x causal (benchmarks/NOTES.md, "Session 6, the last call",
results/bench_backward_s6c_d128.json); d = 64 0.95-1.03x dense and 0.97-0.98x causal, causal GQA
(H = 32, Hkv = 8, d = 128, N = 8192 and 32768) 0.99-1.00x ("Session 7 (branch bwd6)",
results/bench_backward_s7_call1_*.json). Through ``flash_attention`` (autograd) on the protocol
rows d 64 and 128, N 2048-16384, causal and not, bf16 and fp16: 0.91-1.12x cuDNN, causal GQA
0.98-1.00x (NOTES "Session 7", call 2, results/bench_backward_s7_call2_{matrix,gqa}.json).

D_i comes from the two-pass backward's preprocessing (``flash_bwd.preprocess``: the diagonal of
O dO^T for fp16/bf16, so rows that see one key cancel exactly). The query range of each key block
and the mask are the shared rule's (``kernels.visible.q_bounds``, ``visible``), so dense, causal
(either alignment) and sliding windows follow the same loop bounds as every other rung. Tiles are
read through per-head 3-D descriptors (``(B*H, Nq, d)``, ``(B*Hkv, Nk, d)``, a ``(1, rows, d)``
box): past a head's end the copy engine reads zeros, so a short last tile never reads the next
head, rows past Nq add nothing (q = dO = 0), and keys past Nk have K = V = 0 (their dK, dV rows
are not stored; their dS column meets K = 0 in dQ). Atomic and tile-reduce sums are not bitwise
reproducible from run to run (the order of the additions varies).

Gluon has no CPU interpreter: this backward runs on a CUDA sm90 GPU only; ``supports`` says no
elsewhere and ``ladder.resolve_backward`` then runs ``bwd_two_pass``. On a machine without a GPU
it can still be compiled for sm90 (``tests/test_flash_bwd_gluon.py``, ``tests/sm90_compile_bwd.py``).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

LOG2E = 1.0 / math.log(2.0)
SUPPORTED_HEAD_DIMS = (64, 128)
SUPPORTED_OPTIONS = ("window", "causal_align")  # AttnSpec options beyond causal top-left
BLOCK_M = 64  # query rows per step (the wgmma N of S^T)
BLOCK_N = 128  # key rows per program: two consumer warpgroups of 64


@dataclass(frozen=True)
class GluonBwdConfig:
    """Launch configuration of the warp-specialised backward."""

    num_buffers: int = 2  # Q/dO ring depth in shared memory
    dq_split: str = ""  # "d": consumers exchange dS and split dQ's columns; "keys": each its own keys; "": per d
    dq_reduce: str = "tma"  # "tma": the copy engine's tile reduce; "atomic": per-element atomics
    consumer_regs: int = 240  # registers per thread of a consumer warpgroup (setmaxnreg)
    producer_regs: int = 24  # registers per thread of the producer warp
    early_dq: bool = True  # issue dQ's product before waiting for dK's and dV's (else after)
    lag_dq: bool = False  # dq_split "d": each step adds the previous step's dQ share (two dS^T buffers)
    heavy_first: bool = False  # causal: launch every head's key block 0 (the most query rows) first
    head_group: int = 1  # launch key blocks heaviest first across groups of this many heads; 0: as fill the SMs
    rows_in_smem: bool = False  # the producer stages lse_i, D_i in shared memory (fewer live registers)
    one_loop: bool = False  # masked and unmasked steps in one loop, the mask under a run-time branch

    def __post_init__(self):
        if not 1 <= self.num_buffers <= 4:
            raise ValueError(f"num_buffers={self.num_buffers} must be 1..4")
        if self.dq_split not in ("", "d", "keys"):
            raise ValueError(f"dq_split={self.dq_split!r} must be 'd', 'keys' or '' (per head dim)")
        if self.dq_reduce not in ("tma", "atomic"):
            raise ValueError(f"dq_reduce={self.dq_reduce!r} must be 'tma' or 'atomic'")
        for name in ("consumer_regs", "producer_regs"):
            regs = getattr(self, name)
            if not 24 <= regs <= 256 or regs % 8:
                raise ValueError(f"{name}={regs} must be a multiple of 8 in 24..256 (setmaxnreg)")
        if self.head_group < 0:
            raise ValueError(f"head_group={self.head_group} must be >= 0 (0: as many heads as fill the SMs)")

    def heads_per_group(self, heads: int, key_blocks: int, sms: int = 132) -> int:
        """How many (batch, kv head) pairs are launched interleaved, each one's key block 0 first, then
        block 1, ...: all with ``heavy_first``, else ``head_group`` (0: the number of heads whose
        ``key_blocks`` CTAs come closest to filling ``sms`` multiprocessors, at least one)."""
        if self.heavy_first:
            return heads
        if self.head_group == 0:
            return max(1, min(heads, round(sms / key_blocks)))
        return min(heads, self.head_group)

    def split(self, head_dim: int) -> str:
        """The dQ split used at this head dim: the field, or "d" at d = 128 and "keys" at d = 64."""
        return self.dq_split or ("d" if head_dim >= 128 else "keys")

    def smem_bytes(self, head_dim: int, itemsize: int = 2) -> int:
        """Shared memory the kernel allocates: K, V, the Q/dO ring, dS^T and (tile reduce) the fp32 dQ staging."""
        dq_cols = head_dim // 2 if self.split(head_dim) == "d" else head_dim
        staging = 2 * BLOCK_M * dq_cols * 4 if self.dq_reduce == "tma" else 0
        ds_bufs = 2 if self.lag_dq and self.split(head_dim) == "d" else 1
        rows = 2 * self.num_buffers * BLOCK_M * 4 if self.rows_in_smem else 0  # lse_i, D_i per ring slot
        return ((2 * BLOCK_N + 2 * self.num_buffers * BLOCK_M) * head_dim * itemsize
                + ds_bufs * BLOCK_N * BLOCK_M * itemsize + staging + rows)


def default_config(head_dim: int, causal: bool = False, group: int = 1) -> GluonBwdConfig:
    """The config used when none is given, for this head dim, causality and GQA group size (H // Hkv).

    The tile reduce where this Triton has it (atomics otherwise). Every schedule below was the fastest
    of those timed side by side on an H200 (bf16, forward+backward against cuDNN in the same run):

    * lse_i, D_i staged in shared memory by the producer (``rows_in_smem``) everywhere, and the
      consumers exchanging dS^T halves (``dq_split="d"``) at d = 64 too: at d = 64 together
      0.80-0.88x -> 0.95-1.03x cuDNN dense, 0.84-0.90x -> 0.97-0.98x causal, N = 2048-16384
      (benchmarks/NOTES.md, "Session 7 (branch bwd6)", results/bench_backward_s7_call1_d64*.json);
      at d = 128 ``rows_in_smem`` took 0.92-0.94x -> 1.03-1.04x dense ("Session 6, the last call",
      results/bench_backward_s6c_d128.json).
    * dQ a step behind (``lag_dq``) at d = 128 (+15-18 % dense in bwd4's call 3); not at d = 64,
      where it was 1-5 % slower with the exchange (NOTES "Session 7").
    * causal: one loop with the mask under a run-time branch (``one_loop``; d = 128 causal 0.84 ->
      1.05x at N = 4096 with ``rows_in_smem``) and the launch order: heaviest key blocks first within
      groups of heads that fill the SMs for MHA (``head_group=0``, +4 % at d = 128, N = 4096), every
      head's first for GQA (``heavy_first``). On the causal GQA rows (H = 32, Hkv = 8, d = 128,
      N = 8192 and 32768) ``lag_dq`` + ``heavy_first`` + ``rows_in_smem`` + ``one_loop`` ran
      0.99-1.00x cuDNN against 0.82-0.83x for ``heavy_first`` alone (NOTES "Session 7").
    GQA without the causal mask, and GQA at d = 64, take the same schedule by analogy (not timed).
    """
    reduce = "tma" if tma_reduce_available() else "atomic"
    causal, mha = bool(causal), group == 1
    return GluonBwdConfig(dq_reduce=reduce, dq_split="d", lag_dq=head_dim == 128, heavy_first=causal and not mha,
                          head_group=0 if causal and mha else 1, rows_in_smem=True, one_loop=causal)


@functools.lru_cache(maxsize=None)
def tma_reduce_available() -> bool:
    """True when this Triton's Gluon builder can emit the copy engine's tile reduce."""
    try:
        from triton._C.libtriton import gluon_ir
    except ImportError:
        return False
    return hasattr(gluon_ir.GluonOpBuilder, "create_async_tma_reduce")


@functools.lru_cache(maxsize=None)
def _kernels():
    """Define the Gluon kernel on first use: ``import flashlab`` must not need triton."""
    from triton._C.libtriton import ir
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language._core import builtin
    from triton.experimental.gluon.language.nvidia.hopper import (
        fence_async_shared, mbarrier, tma, warpgroup_mma, warpgroup_mma_wait)

    from .visible import q_bounds, visible  # Triton functions: Gluon's front end compiles them too

    sync_partition = getattr(gl, "thread_barrier", None) or gl.barrier  # bar.sync of this partition's warps

    @builtin
    def tma_reduce_add(tensor_desc, coord, src, _semantic=None):
        # global[box at coord] += shared src, by the copy engine; completes like a TMA store (store_wait)
        coord = _semantic._convert_to_ir_values(coord, require_i64=False)
        _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord,
                                                  src.handle)

    @gluon.jit
    def _producer(desc_q, desc_do, desc_k, desc_v, k_smem, v_smem, q_smem, do_smem, kv_bar, ready, empty,
                  off_kv, start_n, lo, hi, GROUP, Lse, Delta, lse_smem, d_smem, N_Q,
                  BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, HEAD_DIM: gl.constexpr, NBUF: gl.constexpr,
                  ROWS_SMEM: gl.constexpr):
        gl.static_assert(NBUF >= 1)  # (also makes gl a name this function uses: its annotations need it)
        # K_j, V_j once (line 6); the shared tiles are 2-D, the copies write them through (1, rows, d) views
        mbarrier.expect(kv_bar, 2 * desc_k.block_type.nbytes)
        tma.async_copy_global_to_shared(desc_k, [off_kv, start_n, 0], kv_bar,
                                        k_smem.reshape([1, BLOCK_N, HEAD_DIM]))
        tma.async_copy_global_to_shared(desc_v, [off_kv, start_n, 0], kv_bar,
                                        v_smem.reshape([1, BLOCK_N, HEAD_DIM]))
        # Q_i, dO_i of every visited query block of every query head of this kv head (line 9)
        it = 0
        for g in range(GROUP):
            off_q = off_kv * GROUP + g  # z * H + h in the (B*H, Nq, d) view
            for start_m in range(lo, hi, BLOCK_M):
                slot = it % NBUF
                # a slot is free once both consumers arrived on its empty barrier; the first pass
                # waits on the phase before the barrier's first one, which counts as completed
                mbarrier.wait(empty.index(slot), ((it // NBUF) & 1) ^ 1)
                mbarrier.expect(ready.index(slot), 2 * desc_q.block_type.nbytes)
                tma.async_copy_global_to_shared(desc_q, [off_q, start_m, 0], ready.index(slot),
                                                q_smem.index(slot).reshape([1, BLOCK_M, HEAD_DIM]))
                tma.async_copy_global_to_shared(desc_do, [off_q, start_m, 0], ready.index(slot),
                                                do_smem.index(slot).reshape([1, BLOCK_M, HEAD_DIM]))
                if ROWS_SMEM:  # lse_i, D_i into the slot too (rows past N_Q: 0); the slot's second arrival
                    row_layout: gl.constexpr = gl.BlockedLayout([BLOCK_M // 32], [32], [1], [0])
                    offs_m = start_m + gl.arange(0, BLOCK_M, layout=row_layout)
                    row_ok = offs_m < N_Q
                    row0 = off_q.to(gl.int64) * N_Q
                    lse_smem.index(slot).store(gl.load(Lse + row0 + offs_m, mask=row_ok, other=0.0))
                    d_smem.index(slot).store(gl.load(Delta + row0 + offs_m, mask=row_ok, other=0.0))
                    sync_partition()
                    mbarrier.arrive(ready.index(slot), count=1)
                it += 1

    @gluon.jit
    def _add_dq(dq, off_q, start_m, col0, dq_smem, desc_dq, DQ, N_Q, BLOCK_M: gl.constexpr, HEAD_DIM: gl.constexpr,
                DQ_COLS: gl.constexpr, TMA_REDUCE: gl.constexpr):
        """Add a (BLOCK_M, DQ_COLS) fp32 share of dQ at rows start_m.., columns col0.. of query head off_q."""
        if TMA_REDUCE:
            # the previous reduce must have read the staging tile before it is overwritten
            tma.store_wait(0)
            sync_partition()
            dq_smem.store(dq)
            fence_async_shared()
            sync_partition()
            tma_reduce_add(desc_dq, [off_q, start_m, col0], dq_smem.reshape([1, BLOCK_M, DQ_COLS]))
        else:
            rows = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, dq.type.layout))
            cols = col0 + gl.arange(0, DQ_COLS, layout=gl.SliceLayout(0, dq.type.layout))
            ptrs = DQ + (off_q.to(gl.int64) * N_Q + rows)[:, None] * HEAD_DIM + cols[None, :]
            gl.atomic_add(ptrs, dq, mask=(rows < N_Q)[:, None], sem="relaxed")

    @gluon.jit
    def _step(it, start_m, off_q, prev_m, prev_q, k_smem, k_c, v_c, q_smem, do_smem, ds_smem, dq_smem, ready, empty, ds_ready,
              ds_empty, desc_dq, DQ, Lse, Delta, lse_smem, d_smem, dk, dv, offs_n, qk_scale, sm_scale, N_Q, N_K,
              DIAG, WINDOW, full_lo, full_hi,
              C: gl.constexpr, BLOCK_M: gl.constexpr, HALF_N: gl.constexpr, HEAD_DIM: gl.constexpr,
              DQ_COLS: gl.constexpr, NBUF: gl.constexpr, SPLIT_D: gl.constexpr, TMA_REDUCE: gl.constexpr,
              EARLY_DQ: gl.constexpr, LAG_DQ: gl.constexpr, DS_BUFS: gl.constexpr, ROWS_SMEM: gl.constexpr,
              ONE_LOOP: gl.constexpr, MASKED: gl.constexpr, CAUSAL: gl.constexpr, HAS_WINDOW: gl.constexpr):
        """Query block start_m of query head off_q against this consumer's 64 keys: the five products.
        Returns the new (dk, dv)."""
        dtype: gl.constexpr = q_smem.dtype
        st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, BLOCK_M, 16])
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                             instr_shape=[16, HEAD_DIM, 16])
        dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, DQ_COLS, 16])
        a_layout: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=acc_layout, k_width=2)
        slot = it % NBUF
        # -- lse_i, D_i (line 9): loaded before the wait, so the loads overlap it; rows past N_Q: 0
        #    (ROWS_SMEM: read from the ring slot where each is used, so neither holds 16 registers a step)
        offs_m = start_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(0, st_layout))  # query rows: S^T's columns
        row_ok = offs_m < N_Q
        if not ROWS_SMEM:
            lse2 = gl.load(Lse + off_q.to(gl.int64) * N_Q + offs_m, mask=row_ok, other=0.0) * 1.4426950408889634
            Di = gl.load(Delta + off_q.to(gl.int64) * N_Q + offs_m, mask=row_ok, other=0.0)
        mbarrier.wait(ready.index(slot), (it // NBUF) & 1)
        if ROWS_SMEM:
            lse2 = lse_smem.index(slot).load(gl.SliceLayout(0, st_layout)) * 1.4426950408889634
        q = q_smem.index(slot)  # (BLOCK_M, d)
        do = do_smem.index(slot)  # (BLOCK_M, d)
        # -- S^T = K_c Q_i^T and dP^T = V_c dO_i^T (lines 10, 13), both in flight
        zero_st = gl.zeros([HALF_N, BLOCK_M], gl.float32, st_layout)
        s_tok = warpgroup_mma(k_c, q.permute((1, 0)), zero_st, use_acc=False, is_async=True)
        dp_tok = warpgroup_mma(v_c, do.permute((1, 0)), zero_st, use_acc=False, is_async=True)
        sT = warpgroup_mma_wait(num_outstanding=1, deps=(s_tok,))
        # -- P^T = exp2(S^T - lse_i) (line 11) while dP^T runs; rows past N_Q have q = dO = 0
        pT = gl.exp2(sT * qk_scale - lse2[None, :])  # (64 keys, BLOCK_M)
        if MASKED:
            if ONE_LOOP:
                if (start_m < full_lo) | (start_m >= full_hi):  # a step of the diagonal band or the far edge
                    keep = visible(offs_m[None, :], offs_n[:, None], N_K, DIAG, WINDOW, CAUSAL, HAS_WINDOW, None,
                                   False)
                    pT = gl.where(keep, pT, 0.0)
            else:
                keep = visible(offs_m[None, :], offs_n[:, None], N_K, DIAG, WINDOW, CAUSAL, HAS_WINDOW, None, False)
                pT = gl.where(keep, pT, 0.0)
        # -- dV_c += P^T dO_i (line 12), P^T from registers
        p_op = gl.convert_layout(pT.to(dtype), a_layout)
        dv = warpgroup_mma(p_op, do, dv, is_async=True)
        dpT = warpgroup_mma_wait(num_outstanding=1, deps=(dp_tok,))
        # -- dS^T = P^T (dP^T - D_i) (line 14); dK_c += dS^T Q_i (line 16; scaled once at the end)
        if ROWS_SMEM:
            Di = d_smem.index(slot).load(gl.SliceLayout(0, st_layout))
        dsT = (pT * (dpT - Di[None, :])).to(dtype)  # (64 keys, BLOCK_M)
        ds_op = gl.convert_layout(dsT, a_layout)
        dk = warpgroup_mma(ds_op, q, dk, is_async=True)
        # -- dS^T to shared memory for dQ (written while dV and dK run); with SPLIT_D the other
        #    consumer reads it too: wait until both are done with this buffer's last use
        dsb = it % DS_BUFS
        if SPLIT_D:
            mbarrier.wait(ds_empty.index(dsb), ((it // DS_BUFS) & 1) ^ 1)
        ds_smem.index(dsb).slice(C * HALF_N, HALF_N, dim=0).store(dsT)
        fence_async_shared()
        sync_partition()
        if SPLIT_D:
            mbarrier.arrive(ds_ready.index(dsb), count=1)
        # -- dQ_i += scale * dS_i K_j (line 15)
        zero_dq = gl.zeros([BLOCK_M, DQ_COLS], gl.float32, dq_layout)
        if LAG_DQ:
            # the previous step's dQ share: both halves of its dS^T were written a step ago, so the two
            # consumers need not run in lockstep (one's softmax can overlap the other's products)
            # (at step 0 there is none: the product reads a buffer no one wrote and is discarded; the
            # ready barrier's parity for "step -1" is that of a wait that returns at once)
            pb = (it + 1) % DS_BUFS  # the buffer of step it - 1
            mbarrier.wait(ds_ready.index(pb), ((it + 1) // DS_BUFS - 1) & 1)
            dq_tok = warpgroup_mma(ds_smem.index(pb).permute((1, 0)), k_smem.slice(C * DQ_COLS, DQ_COLS, dim=1),
                                   zero_dq, use_acc=False, is_async=True)
            dv, dk, dq, p_op, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dk, dq_tok, p_op, ds_op))
            mbarrier.arrive(empty.index(slot), count=1)  # Q_i, dO_i no longer needed: the producer may refill
            if it > 0:
                mbarrier.arrive(ds_empty.index(pb), count=1)
                _add_dq(dq * sm_scale, prev_q, prev_m, C * DQ_COLS, dq_smem, desc_dq, DQ, N_Q,
                        BLOCK_M, HEAD_DIM, DQ_COLS, TMA_REDUCE)
        else:
            if not EARLY_DQ:  # dK and dV done before dQ's product is issued
                dv, dk, p_op, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dk, p_op, ds_op))
                mbarrier.arrive(empty.index(slot), count=1)  # Q_i, dO_i no longer needed: the producer may refill
            if SPLIT_D:  # columns C*DQ_COLS.. of dQ_i over all BLOCK_N keys
                mbarrier.wait(ds_ready.index(dsb), (it // DS_BUFS) & 1)
                dq_tok = warpgroup_mma(ds_smem.index(dsb).permute((1, 0)), k_smem.slice(C * DQ_COLS, DQ_COLS, dim=1),
                                       zero_dq, use_acc=False, is_async=True)
            else:  # all columns over this consumer's keys
                dq_tok = warpgroup_mma(ds_smem.index(dsb).slice(C * HALF_N, HALF_N, dim=0).permute((1, 0)), k_c,
                                       zero_dq, use_acc=False, is_async=True)
            if EARLY_DQ:  # queued behind dV's and dK's products
                dv, dk, dq, p_op, ds_op = warpgroup_mma_wait(num_outstanding=0, deps=(dv, dk, dq_tok, p_op, ds_op))
                mbarrier.arrive(empty.index(slot), count=1)
            else:
                dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok,))
            if SPLIT_D:
                mbarrier.arrive(ds_empty.index(dsb), count=1)
            _add_dq(dq * sm_scale, off_q, start_m, C * DQ_COLS if SPLIT_D else 0, dq_smem, desc_dq, DQ, N_Q,
                    BLOCK_M, HEAD_DIM, DQ_COLS, TMA_REDUCE)
        return dk, dv

    @gluon.jit
    def _consumer(k_smem, v_smem, q_smem, do_smem, ds_smem, dq_stage, kv_bar, ready, empty, ds_ready, ds_empty,
                  desc_dq, DQ, Lse, Delta, lse_smem, d_smem, DK, DV, off_kv, start_n, lo, full_lo, full_hi, hi, GROUP,
                  sm_scale, qk_scale, N_Q, N_K, DIAG, WINDOW,
                  C: gl.constexpr, BLOCK_M: gl.constexpr, HALF_N: gl.constexpr, HEAD_DIM: gl.constexpr,
                  DQ_COLS: gl.constexpr, NBUF: gl.constexpr, SPLIT_D: gl.constexpr, TMA_REDUCE: gl.constexpr,
                  EARLY_DQ: gl.constexpr, LAG_DQ: gl.constexpr, DS_BUFS: gl.constexpr, ROWS_SMEM: gl.constexpr,
                  ONE_LOOP: gl.constexpr, CAUSAL: gl.constexpr, HAS_WINDOW: gl.constexpr):
        dtype: gl.constexpr = k_smem.dtype
        st_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                            instr_shape=[16, BLOCK_M, 16])
        acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                             instr_shape=[16, HEAD_DIM, 16])
        offs_n = start_n + C * HALF_N + gl.arange(0, HALF_N, layout=gl.SliceLayout(1, st_layout))  # this consumer's keys
        k_c = k_smem.slice(C * HALF_N, HALF_N, dim=0)  # (64, d)
        v_c = v_smem.slice(C * HALF_N, HALF_N, dim=0)
        dq_smem = dq_stage.index(C)  # (BLOCK_M, DQ_COLS) fp32
        dk = gl.zeros([HALF_N, HEAD_DIM], gl.float32, acc_layout)  # line 7
        dv = gl.zeros([HALF_N, HEAD_DIM], gl.float32, acc_layout)
        mbarrier.wait(kv_bar, 0)
        it = 0
        prev_m = lo  # LAG_DQ: the query block and head of the step whose dQ share is still to be added
        prev_q = off_kv * GROUP
        for g in range(GROUP):  # grouped-query attention: dK_c, dV_c summed over the query heads in registers
            off_q = off_kv * GROUP + g
            if ONE_LOOP:  # every visited block in one loop; _step masks those outside [full_lo, full_hi)
                for start_m in range(lo, hi, BLOCK_M):
                    dk, dv = _step(it, start_m, off_q, prev_m, prev_q, k_smem, k_c, v_c, q_smem, do_smem, ds_smem,
                                   dq_smem, ready, empty, ds_ready, ds_empty, desc_dq, DQ, Lse, Delta, lse_smem, d_smem,
                                   dk, dv, offs_n, qk_scale, sm_scale, N_Q, N_K, DIAG, WINDOW, full_lo, full_hi, C,
                                   BLOCK_M, HALF_N, HEAD_DIM, DQ_COLS, NBUF, SPLIT_D, TMA_REDUCE, EARLY_DQ, LAG_DQ,
                                   DS_BUFS, ROWS_SMEM, True, CAUSAL or HAS_WINDOW, CAUSAL, HAS_WINDOW)
                    prev_m = start_m
                    prev_q = off_q
                    it += 1
            else:
                # the three stages of kernels.visible.q_bounds: the diagonal band (masked), rows that see
                # every key of the block (unmasked), the window's far edge (masked)
                for start_m in range(lo, full_lo, BLOCK_M):
                    dk, dv = _step(it, start_m, off_q, prev_m, prev_q, k_smem, k_c, v_c, q_smem, do_smem, ds_smem,
                                   dq_smem, ready, empty, ds_ready, ds_empty, desc_dq, DQ, Lse, Delta, lse_smem, d_smem,
                                   dk, dv, offs_n, qk_scale, sm_scale, N_Q, N_K, DIAG, WINDOW, full_lo, full_hi, C,
                                   BLOCK_M, HALF_N, HEAD_DIM, DQ_COLS, NBUF, SPLIT_D, TMA_REDUCE, EARLY_DQ, LAG_DQ,
                                   DS_BUFS, ROWS_SMEM, False, True, CAUSAL, HAS_WINDOW)
                    prev_m = start_m
                    prev_q = off_q
                    it += 1
                for start_m in range(full_lo, full_hi, BLOCK_M):
                    dk, dv = _step(it, start_m, off_q, prev_m, prev_q, k_smem, k_c, v_c, q_smem, do_smem, ds_smem,
                                   dq_smem, ready, empty, ds_ready, ds_empty, desc_dq, DQ, Lse, Delta, lse_smem, d_smem,
                                   dk, dv, offs_n, qk_scale, sm_scale, N_Q, N_K, DIAG, WINDOW, full_lo, full_hi, C,
                                   BLOCK_M, HALF_N, HEAD_DIM, DQ_COLS, NBUF, SPLIT_D, TMA_REDUCE, EARLY_DQ, LAG_DQ,
                                   DS_BUFS, ROWS_SMEM, False, False, CAUSAL, HAS_WINDOW)
                    prev_m = start_m
                    prev_q = off_q
                    it += 1
                for start_m in range(full_hi, hi, BLOCK_M):
                    dk, dv = _step(it, start_m, off_q, prev_m, prev_q, k_smem, k_c, v_c, q_smem, do_smem, ds_smem,
                                   dq_smem, ready, empty, ds_ready, ds_empty, desc_dq, DQ, Lse, Delta, lse_smem, d_smem,
                                   dk, dv, offs_n, qk_scale, sm_scale, N_Q, N_K, DIAG, WINDOW, full_lo, full_hi, C,
                                   BLOCK_M, HALF_N, HEAD_DIM, DQ_COLS, NBUF, SPLIT_D, TMA_REDUCE, EARLY_DQ, LAG_DQ,
                                   DS_BUFS, ROWS_SMEM, False, True, CAUSAL, HAS_WINDOW)
                    prev_m = start_m
                    prev_q = off_q
                    it += 1
        if LAG_DQ:
            if it > 0:  # the last step's dQ share
                dq_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                                    instr_shape=[16, DQ_COLS, 16])
                pb = (it - 1) % DS_BUFS
                mbarrier.wait(ds_ready.index(pb), ((it - 1) // DS_BUFS) & 1)
                dq_tok = warpgroup_mma(ds_smem.index(pb).permute((1, 0)), k_smem.slice(C * DQ_COLS, DQ_COLS, dim=1),
                                       gl.zeros([BLOCK_M, DQ_COLS], gl.float32, dq_layout), use_acc=False,
                                       is_async=True)
                dq = warpgroup_mma_wait(num_outstanding=0, deps=(dq_tok,))
                _add_dq(dq * sm_scale, prev_q, prev_m, C * DQ_COLS, dq_smem, desc_dq, DQ, N_Q,
                        BLOCK_M, HEAD_DIM, DQ_COLS, TMA_REDUCE)
        if TMA_REDUCE:
            tma.store_wait(0)  # the last reduce has read its staging tile before the CTA's shared memory goes
        # -- write dK_c (scaled once here), dV_c (line 18); key rows past N_K are not stored
        rows = start_n + C * HALF_N + gl.arange(0, HALF_N, layout=gl.SliceLayout(1, acc_layout))
        cols = gl.arange(0, HEAD_DIM, layout=gl.SliceLayout(0, acc_layout))
        offs = (off_kv.to(gl.int64) * N_K + rows)[:, None] * HEAD_DIM + cols[None, :]
        row_ok = (rows < N_K)[:, None]
        gl.store(DK + offs, (dk * sm_scale).to(dtype), mask=row_ok)
        gl.store(DV + offs, dv.to(dtype), mask=row_ok)

    @gluon.jit
    def flash_bwd_ws_kernel(desc_q, desc_do, desc_k, desc_v, desc_dq, DQ, Lse, Delta, DK, DV, sm_scale,
                            N_Q, N_K, GROUP, DIAG, WINDOW, HEADS, HEAD_GROUP,
                            HEAD_DIM: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                            DQ_COLS: gl.constexpr, NBUF: gl.constexpr, SPLIT_D: gl.constexpr,
                            TMA_REDUCE: gl.constexpr, EARLY_DQ: gl.constexpr, LAG_DQ: gl.constexpr, ROWS_SMEM: gl.constexpr,
                            ONE_LOOP: gl.constexpr,
                            CAUSAL: gl.constexpr, HAS_WINDOW: gl.constexpr,
                            CONSUMER_REGS: gl.constexpr, PRODUCER_REGS: gl.constexpr):
        HALF_N: gl.constexpr = BLOCK_N // 2
        DS_BUFS: gl.constexpr = 2 if LAG_DQ else 1  # dS^T buffers: LAG_DQ reads step t-1's while t's is written
        # -- key block j and (batch, kv head) of this program (line 5). Programs start about in id order:
        #    the HEADS (batch, kv head) pairs come in groups of HEAD_GROUP, and a group's programs are
        #    key block 0 of each of its heads, then block 1, ... (causal: block 0 sees the most query
        #    rows, so the longest programs start first). HEAD_GROUP = 1: a head's blocks side by side
        #    (they share its Q, dO rows in L2); HEAD_GROUP = HEADS: every head's block 0 first
        n_blocks = gl.cdiv(N_K, BLOCK_N)
        pid = gl.program_id(0)
        first_head = pid // (HEAD_GROUP * n_blocks) * HEAD_GROUP
        in_group = gl.minimum(HEAD_GROUP, HEADS - first_head)  # the last group may have fewer heads
        rank = pid - first_head * n_blocks  # this program's place in its group
        pid_n = rank // in_group
        off_kv = first_head + rank % in_group  # z * Hkv + kv head: its index in the (B*Hkv, Nk, d) view
        start_n = pid_n * BLOCK_N
        # -- the query rows that see this key block (kernels.visible.q_bounds, the rule every rung
        #    shares): masked [lo, full_lo), unmasked [full_lo, full_hi), masked [full_hi, hi)
        lo, full_lo, full_hi, hi = q_bounds(pid_n, N_Q, N_K, DIAG, WINDOW, None, BLOCK_M, BLOCK_N,
                                            CAUSAL, HAS_WINDOW, False)
        qk_scale = sm_scale * 1.4426950408889634

        kv_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, HEAD_DIM], desc_k.dtype)
        q_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, HEAD_DIM], desc_q.dtype)
        ds_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_N, BLOCK_M], desc_q.dtype)
        dq_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, DQ_COLS], gl.float32)
        k_smem = gl.allocate_shared_memory(desc_k.dtype, [BLOCK_N, HEAD_DIM], kv_layout)
        v_smem = gl.allocate_shared_memory(desc_v.dtype, [BLOCK_N, HEAD_DIM], kv_layout)
        q_smem = gl.allocate_shared_memory(desc_q.dtype, [NBUF, BLOCK_M, HEAD_DIM], q_layout)
        do_smem = gl.allocate_shared_memory(desc_do.dtype, [NBUF, BLOCK_M, HEAD_DIM], q_layout)
        ds_smem = gl.allocate_shared_memory(desc_q.dtype, [DS_BUFS, BLOCK_N, BLOCK_M], ds_layout)  # dS^T, both consumers
        dq_stage = gl.allocate_shared_memory(gl.float32, [2, BLOCK_M, DQ_COLS], dq_layout)  # one per consumer
        kv_bar = gl.allocate_shared_memory(gl.int64, [1], mbarrier.MBarrierLayout())
        ROW_SLOTS: gl.constexpr = NBUF if ROWS_SMEM else 1  # lse_i, D_i per ring slot (ROWS_SMEM)
        ROW_LEN: gl.constexpr = BLOCK_M if ROWS_SMEM else 1
        row_smem: gl.constexpr = gl.SwizzledSharedLayout(vec=1, per_phase=1, max_phase=1, order=[0])
        lse_smem = gl.allocate_shared_memory(gl.float32, [ROW_SLOTS, ROW_LEN], row_smem)
        d_smem = gl.allocate_shared_memory(gl.float32, [ROW_SLOTS, ROW_LEN], row_smem)
        ready = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
        empty = gl.allocate_shared_memory(gl.int64, [NBUF, 1], mbarrier.MBarrierLayout())
        ds_ready = gl.allocate_shared_memory(gl.int64, [DS_BUFS, 1], mbarrier.MBarrierLayout())
        ds_empty = gl.allocate_shared_memory(gl.int64, [DS_BUFS, 1], mbarrier.MBarrierLayout())
        mbarrier.init(kv_bar, count=1)
        for i in gl.static_range(DS_BUFS):
            mbarrier.init(ds_ready.index(i), count=2)  # one arrival per consumer
            mbarrier.init(ds_empty.index(i), count=2)
        for i in gl.static_range(NBUF):
            mbarrier.init(ready.index(i), count=2 if ROWS_SMEM else 1)  # the copies' expect-tx (+ the rows)
            mbarrier.init(empty.index(i), count=2)

        # (the argument tuples are written out: a tuple built with + would lose its constexprs)
        gl.warp_specialize([
            (_consumer, (k_smem, v_smem, q_smem, do_smem, ds_smem, dq_stage, kv_bar, ready, empty, ds_ready,
                         ds_empty, desc_dq, DQ, Lse, Delta, lse_smem, d_smem, DK, DV, off_kv, start_n, lo, full_lo,
                         full_hi, hi,
                         GROUP, sm_scale, qk_scale, N_Q, N_K, DIAG, WINDOW, 0, BLOCK_M, HALF_N, HEAD_DIM,
                         DQ_COLS, NBUF, SPLIT_D, TMA_REDUCE, EARLY_DQ, LAG_DQ, DS_BUFS, ROWS_SMEM, ONE_LOOP,
                         CAUSAL, HAS_WINDOW)),
            (_consumer, (k_smem, v_smem, q_smem, do_smem, ds_smem, dq_stage, kv_bar, ready, empty, ds_ready,
                         ds_empty, desc_dq, DQ, Lse, Delta, lse_smem, d_smem, DK, DV, off_kv, start_n, lo, full_lo,
                         full_hi, hi,
                         GROUP, sm_scale, qk_scale, N_Q, N_K, DIAG, WINDOW, 1, BLOCK_M, HALF_N, HEAD_DIM,
                         DQ_COLS, NBUF, SPLIT_D, TMA_REDUCE, EARLY_DQ, LAG_DQ, DS_BUFS, ROWS_SMEM, ONE_LOOP,
                         CAUSAL, HAS_WINDOW)),
            (_producer, (desc_q, desc_do, desc_k, desc_v, k_smem, v_smem, q_smem, do_smem, kv_bar, ready, empty,
                         off_kv, start_n, lo, hi, GROUP, Lse, Delta, lse_smem, d_smem, N_Q, BLOCK_M, BLOCK_N,
                         HEAD_DIM, NBUF, ROWS_SMEM)),
        ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])

    return flash_bwd_ws_kernel


def launch(q, k, v, o, lse, do, causal, scale: float | None = None, config: GluonBwdConfig | None = None,
           warmup: bool = False):
    """Run the kernel; return ``(dq, dk, dv, compiled)``.

    ``warmup=True`` compiles without launching (no GPU needed: D_i is not computed, the outputs
    are unwritten, ``compiled`` carries the PTX, the cubin and the resource report).
    """
    import torch
    import triton
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from .flash_fwd import new_output
    from .visible import as_spec

    B, H, n_q, d = q.shape  # (B, H, Nq, d)
    h_kv, n_k = k.shape[1], k.shape[2]
    spec = as_spec(causal, scale)
    sm_scale = spec.resolved_scale(d)
    rule = spec.kernel_args(n_q, n_k)  # DIAG, WINDOW, CAUSAL, HAS_WINDOW (flashlab.attnspec)
    cfg = config or default_config(d, spec.causal, H // h_kv)
    split_d = cfg.split(d) == "d"
    tma_reduce = cfg.dq_reduce == "tma"
    if tma_reduce and not tma_reduce_available():
        raise ValueError("dq_reduce='tma' needs Gluon's tile reduce (GluonOpBuilder.create_async_tma_reduce), "
                         "which this Triton lacks; use dq_reduce='atomic'")
    dq_cols = d // 2 if split_d else d
    n_blocks = triton.cdiv(n_k, BLOCK_N)
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count if q.is_cuda else 132
    head_group = cfg.heads_per_group(B * h_kv, n_blocks, sms)
    if warmup:
        delta = torch.zeros((B, H, n_q), dtype=torch.float32, device=q.device)
    else:
        from .flash_bwd import preprocess

        delta = preprocess(o, do)  # (B, H, Nq) float32, D_i (line 4)
    q3 = q.contiguous().view(B * H, n_q, d)  # (B*H, Nq, d)
    do3 = do.contiguous().view(B * H, n_q, d)  # (B*H, Nq, d)
    k3 = k.contiguous().view(B * h_kv, n_k, d)  # (B*Hkv, Nk, d)
    v3 = v.contiguous().view(B * h_kv, n_k, d)  # (B*Hkv, Nk, d)
    dq_acc = torch.zeros((B * H, n_q, d), dtype=torch.float32, device=q.device)  # (B*H, Nq, d): reduced into
    dk = new_output((B, h_kv, n_k, d), k.dtype, k.device)  # (B, Hkv, Nk, d)
    dv = new_output((B, h_kv, n_k, d), v.dtype, v.device)  # (B, Hkv, Nk, d)
    gl_dtype = {torch.float16: gl.float16, torch.bfloat16: gl.bfloat16}[q.dtype]
    box_m, box_n, box_dq = [1, BLOCK_M, d], [1, BLOCK_N, d], [1, BLOCK_M, dq_cols]

    def desc(t, box, dtype):
        return TensorDescriptor.from_tensor(t, box, gl.NVMMASharedLayout.get_default_for(box, dtype))

    args = (desc(q3, box_m, gl_dtype), desc(do3, box_m, gl_dtype), desc(k3, box_n, gl_dtype),
            desc(v3, box_n, gl_dtype), desc(dq_acc, box_dq, gl.float32), dq_acc, lse.contiguous(), delta, dk, dv,
            sm_scale, n_q, n_k, H // h_kv, rule["DIAG"], rule["WINDOW"], B * h_kv, head_group)
    meta = dict(HEAD_DIM=d, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, DQ_COLS=dq_cols, NBUF=cfg.num_buffers,
                SPLIT_D=split_d, TMA_REDUCE=tma_reduce, EARLY_DQ=cfg.early_dq, LAG_DQ=split_d and cfg.lag_dq,
                ROWS_SMEM=cfg.rows_in_smem, ONE_LOOP=cfg.one_loop,
                CAUSAL=rule["CAUSAL"], HAS_WINDOW=rule["HAS_WINDOW"],
                CONSUMER_REGS=cfg.consumer_regs, PRODUCER_REGS=cfg.producer_regs, num_warps=4)
    grid = (n_blocks * B * h_kv,)  # (key block, head) from the program id: see the kernel's launch order
    kernel = _kernels()
    if warmup:
        return None, dk, dv, kernel.warmup(*args, grid=grid, **meta)
    compiled = kernel[grid](*args, **meta)
    dq = dq_acc.view(B, H, n_q, d).to(q.dtype)  # (B, H, Nq, d)
    return dq, dk, dv, compiled


def backward(q, k, v, o, lse, do, causal, scale: float | None = None, config: GluonBwdConfig | None = None):
    """Gradients of attention in one warp-specialised pass over the key blocks.

    q, o, do: (B, H, Nq, d); k, v: (B, Hkv, Nk, d) with Hkv dividing H; lse: (B, H, Nq) float32,
    natural log; ``causal`` a bool or the forward's AttnSpec. Returns dq (B, H, Nq, d), dk and dv
    (B, Hkv, Nk, d) in the inputs' dtype (dk, dv summed over each kv head's query heads).
    Inputs must be ones :func:`supports` accepts.
    """
    dq, dk, dv, _ = launch(q, k, v, o, lse, do, causal, scale, config)
    return dq, dk, dv


def supports(q, k, spec) -> bool:
    """True where this backward runs and has been verified: CUDA sm90 (compiled Triton with Gluon,
    never the interpreter), fp16/bf16, d in (64, 128), no AttnSpec option beyond ``SUPPORTED_OPTIONS``."""
    import torch

    from .visible import as_spec

    if q.dtype not in (torch.float16, torch.bfloat16) or q.shape[3] not in SUPPORTED_HEAD_DIMS:
        return False
    if not as_spec(spec).features() <= set(SUPPORTED_OPTIONS):
        return False
    from .flash_fwd_gluon import _runs_here

    return _runs_here(q)
