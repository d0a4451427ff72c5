"""FlashAttention forward in Triton: the course's ladder of rungs (FlashAttention-2, Algorithm 1).

Read each kernel beside ``flashlab.tiled.tiled_attention``: the same state ``m_i`` (running row
maximum), ``l_i`` (running row sum), ``acc`` (unnormalised output), ``alpha`` (rescale factor),
``lse`` (log-sum-exp), and the same loop: one program owns a query block ``Q_i`` (``BLOCK_M`` rows)
and walks over key/value blocks ``K_j, V_j`` (``BLOCK_N`` rows). Comments ``(line n)`` point to
FlashAttention-2 Algorithm 1 (Dao, 2023, arXiv:2307.08691).

Names, NumPy (``tiled_attention`` and ``flashlab.softmax.online_update``) -> kernel: ``q_i`` -> ``q``,
``k_j`` -> ``k`` (loaded transposed, ``(HEAD_DIM, BLOCK_N)``), ``v_j`` -> ``v``, ``s`` -> ``qk``,
``m_new`` -> ``m_ij``, ``block_q``/``block_k`` -> ``BLOCK_M``/``BLOCK_N``, the loop index ``i`` ->
``start_m``; ``m_i``, ``l_i``, ``acc``, ``alpha``, ``p`` and ``lse`` keep their names. The kernel
side follows Triton's fused-attention tutorial, as exercises 07 and 08 do.

Rungs (every one returns ``(o, lse)``: o ``(B, H, Nq, d)`` in q's dtype, lse ``(B, H, Nq)`` float32,
natural log):

* ``forward_minimal`` — notebook 06's teaching kernel: v1's grid and loop with only dense and
  causal top-left attention (ragged lengths, strides, padded head dims and GQA included); not a rung.
* ``forward_v0`` — grid over (batch, head) only; each program loops over ALL query blocks.
* ``forward_v1`` — grid over (query block, batch*head) as FA2; natural ``exp``; masks everywhere;
  ``_fwd_minimal``'s loop with every AttnSpec option through the helpers of ``kernels/visible.py``.
* ``forward_v2`` — ``exp2`` with log2(e) folded into the scale; the key loop in three stages
  from ``visible.kv_bounds`` (masked blocks at a sliding window's lower edge, blocks every row
  sees in full without masks, then the diagonal band and ragged tail with the mask).
* ``forward_v3`` — v2 with ``triton.autotune`` over block sizes, warps and stages.

Shapes are general: any Nq, Nk >= 1 (ragged last tiles are masked); head dims that are not powers
of two are padded to ``HEAD_DIM`` (the next power of two) with masked loads, ``D_HEAD`` being the
real one; grouped-query attention reads kv head ``h // GROUP`` for query head ``h``. Which keys a query
sees is an :class:`flashlab.attnspec.AttnSpec` (``causal`` may be a bool or one): causal top-left
(query i sees keys j <= i) or bottom-right, a sliding window, a ``mask_mod``; every kernel gets its
loop bounds and mask from :mod:`flashlab.kernels.visible`, and tiles no query sees are never loaded.
With a ``mask_mod`` the key loop walks per-query-block lists of partial and full tiles
(``visible.block_lists``, built for the launch's block sizes); v2 runs the full ones unmasked.
A padded batch with per-sequence lengths (``seqlens_q`` / ``seqlens_k``) reads each sequence's
(Nq_b, Nk_b) in the kernel (``visible.seq_lengths``): keys past Nk_b are never loaded and rows
past Nq_b are written as o = 0, lse = -inf.

Sequence lengths, head counts and the group size are not specialised on (``do_not_specialize``):
one compiled kernel serves every length, so a sweep over lengths does not recompile per length.

Inputs are assumed validated (``flashlab.kernels.attention.check_inputs``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from ..attnspec import KERNEL_FLAGS, AttnSpec
from . import _mode

triton = _mode.triton()
import torch  # noqa: E402
import triton.language as tl  # noqa: E402

from .visible import (as_spec, block_lists, finite_max, kv_offset, kv_steps, seq_lengths,  # noqa: E402
                      seq_rows, seqlens_table, stage_range, visible)

# --------------------------------------------------------------------------------------------
# Configuration as data
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FwdConfig:
    """Launch configuration of a forward kernel: tile sizes and GPU scheduling knobs."""

    block_m: int = 128  # query rows per program (Br in the paper)
    block_n: int = 64  # key/value rows per inner step (Bc in the paper)
    num_warps: int = 4
    num_stages: int = 3


INTERPRETER_FWD_CONFIG = FwdConfig(block_m=16, block_n=16, num_warps=1, num_stages=1)


def head_dim_padded(d: int) -> int:
    """HEAD_DIM: the power of two (>= 16) that a head dim ``d`` is padded to inside the kernels."""
    return max(16, triton.next_power_of_2(d))


def default_fwd_config(head_dim: int, dtype: torch.dtype) -> FwdConfig:
    """A config that compiles on an H100/H200 for this padded head dim and dtype (no tuning)."""
    if _mode.is_interpreter():
        return INTERPRETER_FWD_CONFIG
    wide = dtype == torch.float32  # 4-byte tiles need half the rows for the same shared memory
    if head_dim <= 64:
        return FwdConfig(128, 32 if wide else 64, 4, 3)
    if head_dim <= 128:
        return FwdConfig(128, 32 if wide else 64, 8, 3)
    return FwdConfig(64, 16 if wide else 32, 4, 2)


def fallback_fwd_configs(config: FwdConfig) -> list[FwdConfig]:
    """``config`` then smaller ones, tried in turn when the GPU runs out of shared memory."""
    configs = [config]
    block_m, block_n, stages = config.block_m, config.block_n, config.num_stages
    while block_n > 16 or stages > 1 or block_m > 16:
        if stages > 1:
            stages -= 1
        elif block_n > 16:
            block_n //= 2
        else:
            block_m //= 2
        configs.append(FwdConfig(block_m, block_n, config.num_warps, stages))
    return configs


def new_output(shape, dtype, device):
    """An output buffer for a kernel to fill. ``FLASHLAB_POISON=1`` fills it with NaN first, so an
    element the kernel forgot to write shows up in the tests (otherwise: ``torch.empty``)."""
    if os.environ.get("FLASHLAB_POISON") == "1":
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def dot_precision(dtype: torch.dtype) -> str:
    """fp32 dots in full precision ("ieee"), as PyTorch's default matmul; fp16/bf16 use tensor cores."""
    return "ieee" if dtype == torch.float32 else "tf32"


# --------------------------------------------------------------------------------------------
# Shared device helpers
# --------------------------------------------------------------------------------------------
@triton.jit
def _dot(a, b, DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr):
    # bf16 tl.dot is wrong in the interpreter: there DOT_F32 upcasts both operands
    if DOT_F32:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, input_precision=DOT_PRECISION)


@triton.jit
def _dot_acc(a, b, acc, DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr):
    # acc + a @ b, with the accumulator fed to the matrix instruction (no separate add)
    if DOT_F32:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    return tl.dot(a, b, acc, input_precision=DOT_PRECISION)


# --------------------------------------------------------------------------------------------
# v0: one program per (batch, head), looping over every query block
# --------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["H", "GROUP", "N_Q", "N_K", "DIAG", "WINDOW"])
def _fwd_v0_grid_bh(
    Q, K, V, Out, LSE, sm_scale,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_oz, stride_oh, stride_om, stride_ok,
    H, GROUP, N_Q, N_K, DIAG, WINDOW, BLOCKS, SEQLENS,
    HEAD_DIM: tl.constexpr, D_HEAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, MASK_MOD: tl.constexpr, HAS_MASK_MOD: tl.constexpr,
    HAS_SEQLENS: tl.constexpr, DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    # -- this program owns one (batch, head): the grid has B*H programs and no query-block axis
    off_hz = tl.program_id(0)
    off_z = (off_hz // H).to(tl.int64)
    off_h = (off_hz % H).to(tl.int64)
    off_hkv = off_h // GROUP
    n_q, n_k, diag = seq_lengths(SEQLENS, off_z, N_Q, N_K, DIAG, HAS_SEQLENS)  # this sequence's lengths
    offs_d = tl.arange(0, HEAD_DIM)
    q_base = Q + off_z * stride_qz + off_h * stride_qh
    k_base = K + off_z * stride_kz + off_hkv * stride_kh
    v_base = V + off_z * stride_vz + off_hkv * stride_vh
    o_base = Out + off_z * stride_oz + off_h * stride_oh
    for start_m in range(0, tl.cdiv(N_Q, BLOCK_M)):  # the outer loop of Algorithm 1 (line 3), serial here
        offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
        q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk,
                    mask=(offs_m[:, None] < n_q) & (offs_d[None, :] < D_HEAD), other=0.0)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        first, _, _, end = kv_steps(start_m, n_q, n_k, diag, WINDOW, BLOCKS, BLOCK_M, BLOCK_N,
                                    CAUSAL, HAS_WINDOW, HAS_MASK_MOD)
        for step in range(first, end):
            offs_n = kv_offset(step, start_m, n_k, BLOCKS, BLOCK_N, HAS_MASK_MOD) + tl.arange(0, BLOCK_N)
            k = tl.load(k_base + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kk,
                        mask=(offs_n[None, :] < n_k) & (offs_d[:, None] < D_HEAD), other=0.0)
            v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vk,
                        mask=(offs_n[:, None] < n_k) & (offs_d[None, :] < D_HEAD), other=0.0)
            qk = _dot(q, k, DOT_F32, DOT_PRECISION) * sm_scale
            mask = visible(offs_m[:, None], offs_n[None, :], n_k, diag, WINDOW,
                           CAUSAL, HAS_WINDOW, MASK_MOD, HAS_MASK_MOD)
            qk = tl.where(mask, qk, float("-inf"))
            m_ij = tl.maximum(m_i, tl.max(qk, 1))
            m_use = finite_max(m_ij, HAS_WINDOW, HAS_MASK_MOD)
            p = tl.exp(qk - m_use[:, None])
            alpha = tl.exp(m_i - m_use)
            l_i = l_i * alpha + tl.sum(p, 1)
            acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, DOT_F32, DOT_PRECISION)
            m_i = m_ij
        acc, lse = seq_rows(acc / l_i[:, None], m_i + tl.log(l_i), offs_m, n_q, HAS_SEQLENS)
        tl.store(LSE + off_hz * N_Q + offs_m, lse, mask=offs_m < N_Q)
        tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_ok,
                 acc.to(Out.dtype.element_ty), mask=(offs_m[:, None] < N_Q) & (offs_d[None, :] < D_HEAD))


# --------------------------------------------------------------------------------------------
# The minimal kernel of notebook 06: v1's loop with only dense and causal (top-left) attention
# --------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["H", "GROUP", "N_Q", "N_K"])
def _fwd_minimal(
    Q, K, V, Out, LSE, sm_scale,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_oz, stride_oh, stride_om, stride_ok,
    H, GROUP, N_Q, N_K,
    HEAD_DIM: tl.constexpr, D_HEAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    # -- which query block i and which (batch, head) this program owns (line 3: parallel over i)
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = (off_hz // H).to(tl.int64)
    off_h = (off_hz % H).to(tl.int64)
    off_hkv = off_h // GROUP  # grouped-query attention: GROUP query heads read one kv head
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) query rows
    offs_d = tl.arange(0, HEAD_DIM)  # (HEAD_DIM,) lanes, the first D_HEAD of them real
    row_ok = offs_m < N_Q  # (BLOCK_M,) a ragged last query block has rows past N_Q
    lane_ok = offs_d < D_HEAD  # (HEAD_DIM,) the head dim padded to a power of two
    q_base = Q + off_z * stride_qz + off_h * stride_qh
    k_base = K + off_z * stride_kz + off_hkv * stride_kh
    v_base = V + off_z * stride_vz + off_hkv * stride_vh
    # -- load Q_i from HBM to SRAM (line 4); rows past N_Q and lanes past D_HEAD read as 0
    q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk,
                mask=row_ok[:, None] & lane_ok[None, :], other=0.0)  # (BLOCK_M, HEAD_DIM)
    # -- initialise O_i = 0, l_i = 0, m_i = -inf (line 5)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # (BLOCK_M,)
    l_i = tl.zeros([BLOCK_M], tl.float32)  # (BLOCK_M,)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)  # (BLOCK_M, HEAD_DIM)
    # -- causal: key blocks that start past the block's last real row are never loaded
    kv_end = N_K
    if CAUSAL:
        kv_end = tl.minimum(tl.minimum(N_Q, BLOCK_M * (start_m + 1)), N_K)
    for start_n in range(0, kv_end, BLOCK_N):  # line 6
        offs_n = start_n + tl.arange(0, BLOCK_N)  # (BLOCK_N,) key rows
        key_ok = offs_n < N_K  # (BLOCK_N,) a ragged last key block has rows past N_K
        # -- load K_j (as K_j^T) and V_j from HBM to SRAM (line 7)
        k = tl.load(k_base + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kk,
                    mask=key_ok[None, :] & lane_ok[:, None], other=0.0)  # (HEAD_DIM, BLOCK_N)
        v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vk,
                    mask=key_ok[:, None] & lane_ok[None, :], other=0.0)  # (BLOCK_N, HEAD_DIM)
        # -- S_ij = Q_i K_j^T (line 8); -inf where the key is past N_K or (causal) past the row
        qk = _dot(q, k, DOT_F32, DOT_PRECISION) * sm_scale  # (BLOCK_M, BLOCK_N)
        seen = key_ok[None, :]  # (1, BLOCK_N)
        if CAUSAL:
            seen = seen & (offs_m[:, None] >= offs_n[None, :])  # (BLOCK_M, BLOCK_N)
        qk = tl.where(seen, qk, float("-inf"))  # (BLOCK_M, BLOCK_N)
        # -- m_ij = max(m_i, rowmax(S_ij)); P_ij = exp(S_ij - m_ij); l_i = e^(m_i - m_ij) l_i + rowsum(P_ij)
        #    (line 9). Key 0 is visible to every row, so m_ij is finite from the first block on
        m_ij = tl.maximum(m_i, tl.max(qk, 1))  # (BLOCK_M,)
        p = tl.exp(qk - m_ij[:, None])  # (BLOCK_M, BLOCK_N)
        alpha = tl.exp(m_i - m_ij)  # (BLOCK_M,) 0 on the first block, where m_i = -inf
        l_i = alpha * l_i + tl.sum(p, 1)  # (BLOCK_M,)
        # -- O_i = diag(alpha) O_i + P_ij V_j (line 10)
        acc = alpha[:, None] * acc + _dot(p.to(v.dtype), v, DOT_F32, DOT_PRECISION)  # (BLOCK_M, HEAD_DIM)
        m_i = m_ij
    # -- O_i = diag(l_i)^-1 O_i (line 12); L_i = m_i + log(l_i) (line 13)
    o_i = acc / l_i[:, None]  # (BLOCK_M, HEAD_DIM)
    lse_i = m_i + tl.log(l_i)  # (BLOCK_M,)
    # -- write O_i and L_i to HBM (lines 14-15): only the real rows and lanes
    tl.store(LSE + off_hz * N_Q + offs_m, lse_i, mask=row_ok)
    o_base = Out + off_z * stride_oz + off_h * stride_oh
    tl.store(o_base + offs_m[:, None] * stride_om + offs_d[None, :] * stride_ok,
             o_i.to(Out.dtype.element_ty), mask=row_ok[:, None] & lane_ok[None, :])


# --------------------------------------------------------------------------------------------
# v1: FlashAttention-2 grid; _fwd_minimal's loop with every AttnSpec option (kernels/visible.py)
# --------------------------------------------------------------------------------------------
@triton.jit(do_not_specialize=["H", "GROUP", "N_Q", "N_K", "DIAG", "WINDOW"])
def _fwd_v1_minimal(
    Q, K, V, Out, LSE, sm_scale,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_oz, stride_oh, stride_om, stride_ok,
    H, GROUP, N_Q, N_K, DIAG, WINDOW, BLOCKS, SEQLENS,
    HEAD_DIM: tl.constexpr, D_HEAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, MASK_MOD: tl.constexpr, HAS_MASK_MOD: tl.constexpr,
    HAS_SEQLENS: tl.constexpr, DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    # -- which query block i and which (batch, head) this program owns (line 3: parallel over i)
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = (off_hz // H).to(tl.int64)
    off_h = (off_hz % H).to(tl.int64)
    off_hkv = off_h // GROUP  # grouped-query attention: GROUP query heads share one kv head
    n_q, n_k, diag = seq_lengths(SEQLENS, off_z, N_Q, N_K, DIAG, HAS_SEQLENS)  # this sequence's lengths
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + off_z * stride_qz + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk
    k_base = K + off_z * stride_kz + off_hkv * stride_kh
    v_base = V + off_z * stride_vz + off_hkv * stride_vh
    # -- load Q_i from HBM to SRAM (line 4)
    q = tl.load(q_ptrs, mask=(offs_m[:, None] < n_q) & (offs_d[None, :] < D_HEAD), other=0.0)  # (BLOCK_M, HEAD_DIM)
    # -- initialise O_i = 0, l_i = 0, m_i = -inf (line 5)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)  # (BLOCK_M,)
    l_i = tl.zeros([BLOCK_M], tl.float32)  # (BLOCK_M,)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)  # (BLOCK_M, HEAD_DIM)
    # -- only key blocks some row of this block sees are visited, the rest are never loaded
    #    (visibility.TileVisibility.kv_blocks in NumPy): a range of blocks, or with a mask_mod
    #    this query block's list of partial and full tiles
    first, _, _, end = kv_steps(start_m, n_q, n_k, diag, WINDOW, BLOCKS, BLOCK_M, BLOCK_N,
                                CAUSAL, HAS_WINDOW, HAS_MASK_MOD)
    for step in range(first, end):  # line 6
        offs_n = kv_offset(step, start_m, n_k, BLOCKS, BLOCK_N, HAS_MASK_MOD) + tl.arange(0, BLOCK_N)
        # -- load K_j (as K_j^T) and V_j from HBM to SRAM (line 7)
        k = tl.load(k_base + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kk,
                    mask=(offs_n[None, :] < n_k) & (offs_d[:, None] < D_HEAD), other=0.0)  # (HEAD_DIM, BLOCK_N)
        v = tl.load(v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vk,
                    mask=(offs_n[:, None] < n_k) & (offs_d[None, :] < D_HEAD), other=0.0)  # (BLOCK_N, HEAD_DIM)
        # -- S_ij = Q_i K_j^T (line 8), masked where j is past N_K or not visible to the row
        #    (tiled.py: s = _masked_scores(q_i, k_j, ...))
        qk = _dot(q, k, DOT_F32, DOT_PRECISION) * sm_scale  # (BLOCK_M, BLOCK_N)
        mask = visible(offs_m[:, None], offs_n[None, :], n_k, diag, WINDOW,
                       CAUSAL, HAS_WINDOW, MASK_MOD, HAS_MASK_MOD)
        qk = tl.where(mask, qk, float("-inf"))  # (BLOCK_M, BLOCK_N)
        # -- m_ij = max(m_i, rowmax(S_ij)); P_ij = exp(S_ij - m_ij); l_i = e^(m_i - m_ij) l_i + rowsum(P_ij) (line 9)
        #    (the first lines of softmax.online_update, with m_ij for its m_new)
        m_ij = tl.maximum(m_i, tl.max(qk, 1))  # (BLOCK_M,)
        m_use = finite_max(m_ij, HAS_WINDOW, HAS_MASK_MOD)  # (BLOCK_M,)
        p = tl.exp(qk - m_use[:, None])  # (BLOCK_M, BLOCK_N)
        alpha = tl.exp(m_i - m_use)  # (BLOCK_M,)
        l_i = l_i * alpha + tl.sum(p, 1)  # (BLOCK_M,)
        # -- O_i = diag(alpha) O_i + P_ij V_j (line 10)
        acc = acc * alpha[:, None]  # (BLOCK_M, HEAD_DIM)
        acc = acc + _dot(p.to(v.dtype), v, DOT_F32, DOT_PRECISION)  # (BLOCK_M, HEAD_DIM)
        m_i = m_ij
    # -- O_i = diag(l_i)^-1 O_i (line 12); L_i = m_i + log(l_i) (line 13)
    acc = acc / l_i[:, None]  # (BLOCK_M, HEAD_DIM)
    lse = m_i + tl.log(l_i)  # (BLOCK_M,)
    acc, lse = seq_rows(acc, lse, offs_m, n_q, HAS_SEQLENS)  # a shorter sequence's padding rows: 0, -inf
    # -- write O_i and L_i to HBM (lines 14-15)
    tl.store(LSE + off_hz * N_Q + offs_m, lse, mask=offs_m < N_Q)
    o_ptrs = Out + off_z * stride_oz + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_ok
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=(offs_m[:, None] < N_Q) & (offs_d[None, :] < D_HEAD))


# --------------------------------------------------------------------------------------------
# v2: exp2 and the staged loop (masked, unmasked, masked)
# --------------------------------------------------------------------------------------------
@triton.jit
def _fwd_v2_inner(
    acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kk, stride_vn, stride_vk,
    offs_m, offs_d, start_m, first, end, BLOCKS, qk_scale, N_K, DIAG, WINDOW,
    HEAD_DIM: tl.constexpr, D_HEAD: tl.constexpr, BLOCK_N: tl.constexpr,
    MASK: tl.constexpr, CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr,
    MASK_MOD: tl.constexpr, HAS_MASK_MOD: tl.constexpr,
    DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    for step in range(first, end):  # line 6, one key block per step (kernels.visible.kv_offset)
        start_n = tl.multiple_of(kv_offset(step, start_m, N_K, BLOCKS, BLOCK_N, HAS_MASK_MOD), BLOCK_N)
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k_ptrs = k_base + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kk
        v_ptrs = v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vk
        # -- load K_j^T, V_j (line 7): blocks every row sees in full need no row mask
        if MASK:
            k = tl.load(k_ptrs, mask=(offs_n[None, :] < N_K) & (offs_d[:, None] < D_HEAD), other=0.0)
            v = tl.load(v_ptrs, mask=(offs_n[:, None] < N_K) & (offs_d[None, :] < D_HEAD), other=0.0)
        elif HEAD_DIM == D_HEAD:
            k = tl.load(k_ptrs)
            v = tl.load(v_ptrs)
        else:
            k = tl.load(k_ptrs, mask=offs_d[:, None] < D_HEAD, other=0.0)
            v = tl.load(v_ptrs, mask=offs_d[None, :] < D_HEAD, other=0.0)
        # -- S_ij in log2 units: Q_i K_j^T * scale * log2(e) (line 8)
        qk = _dot(q, k, DOT_F32, DOT_PRECISION) * qk_scale
        if MASK:
            mask = visible(offs_m[:, None], offs_n[None, :], N_K, DIAG, WINDOW,
                       CAUSAL, HAS_WINDOW, MASK_MOD, HAS_MASK_MOD)
            qk = tl.where(mask, qk, float("-inf"))
        # -- m_ij, P_ij = 2^(S_ij - m_ij), l_i (line 9)
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        m_use = finite_max(m_ij, HAS_WINDOW, HAS_MASK_MOD)
        p = tl.math.exp2(qk - m_use[:, None])
        alpha = tl.math.exp2(m_i - m_use)
        l_i = l_i * alpha + tl.sum(p, 1)
        # -- O_i = diag(alpha) O_i + P_ij V_j (line 10)
        acc = acc * alpha[:, None]
        acc = _dot_acc(p.to(v.dtype), v, acc, DOT_F32, DOT_PRECISION)
        m_i = m_ij
    return acc, l_i, m_i


@triton.jit(do_not_specialize=["H", "GROUP", "N_Q", "N_K", "DIAG", "WINDOW", "N_Q_BUCKET", "N_K_BUCKET"])
def _fwd_v2_exp2_causal(
    Q, K, V, Out, LSE, sm_scale,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_oz, stride_oh, stride_om, stride_ok,
    H, GROUP, N_Q, N_K, DIAG, WINDOW, BLOCKS, SEQLENS, N_Q_BUCKET, N_K_BUCKET,  # the buckets: autotuning keys (v3)
    HEAD_DIM: tl.constexpr, D_HEAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, MASK_MOD: tl.constexpr, HAS_MASK_MOD: tl.constexpr,
    HAS_SEQLENS: tl.constexpr, DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    # -- query block i and (batch, head) of this program (line 3)
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = (off_hz // H).to(tl.int64)
    off_h = (off_hz % H).to(tl.int64)
    off_hkv = off_h // GROUP
    n_q, n_k, diag = seq_lengths(SEQLENS, off_z, N_Q, N_K, DIAG, HAS_SEQLENS)  # this sequence's lengths
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + off_z * stride_qz + off_h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk
    k_base = K + off_z * stride_kz + off_hkv * stride_kh
    v_base = V + off_z * stride_vz + off_hkv * stride_vh
    # -- load Q_i (line 4); initialise m_i, l_i, O_i (line 5)
    q = tl.load(q_ptrs, mask=(offs_m[:, None] < n_q) & (offs_d[None, :] < D_HEAD), other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    qk_scale = sm_scale * 1.4426950408889634  # fold log2(e) in: exp(x) = exp2(x * log2(e))
    # -- the key blocks in three stages (kernels.visible.kv_steps): masked blocks at the window's
    #    lower edge, blocks every row sees in full (no mask), then masked blocks (the diagonal band,
    #    the ragged tail); with a mask_mod, this query block's partial tiles (masked) then its full
    #    ones (no mask). Blocks not visited are never loaded
    s0, s1, s2, s3 = kv_steps(start_m, n_q, n_k, diag, WINDOW, BLOCKS, BLOCK_M, BLOCK_N,
                              CAUSAL, HAS_WINDOW, HAS_MASK_MOD)
    for stage in tl.static_range(3):
        first, end = stage_range(stage, s0, s1, s2, s3)
        acc, l_i, m_i = _fwd_v2_inner(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_kk, stride_vn, stride_vk,
                                      offs_m, offs_d, start_m, first, end, BLOCKS, qk_scale, n_k, diag, WINDOW,
                                      HEAD_DIM, D_HEAD, BLOCK_N, stage != 1, CAUSAL, HAS_WINDOW,
                                      MASK_MOD, HAS_MASK_MOD, DOT_F32, DOT_PRECISION)
    # -- O_i = O_i / l_i (line 12); L_i = m_i + log(l_i), back in natural-log units (line 13)
    acc = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
    acc, lse = seq_rows(acc, lse, offs_m, n_q, HAS_SEQLENS)  # a shorter sequence's padding rows: 0, -inf
    tl.store(LSE + off_hz * N_Q + offs_m, lse, mask=offs_m < N_Q)
    o_ptrs = Out + off_z * stride_oz + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_ok
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=(offs_m[:, None] < N_Q) & (offs_d[None, :] < D_HEAD))


# --------------------------------------------------------------------------------------------
# v3: v2 autotuned
# --------------------------------------------------------------------------------------------
def _v3_configs() -> list:
    return [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
        for bm, bn, w, s in [
            (128, 64, 4, 3), (128, 64, 8, 3), (128, 128, 8, 3), (128, 32, 4, 3),
            (64, 64, 4, 3), (64, 32, 4, 2), (128, 64, 8, 4), (64, 64, 4, 4),
        ]
    ]


SMEM_BYTES = 227 * 1024  # shared memory one Hopper program may use (H100/H200: 227 KiB per block)


def _prune_v3(configs, named_args, **kwargs):
    """Drop configs whose tiles cannot fit the GPU, or whose query block dwarfs the query length."""
    from .. import targets  # per-GPU fit rules

    args = {**named_args, **kwargs}
    head_dim = args["HEAD_DIM"]
    itemsize = args["Q"].element_size()
    n_q = args["N_Q_BUCKET"]
    kept = []
    for c in configs:
        bm, bn = c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"]
        fits = targets.fwd_fits_current(bm, bn, head_dim, c.num_stages, itemsize, c.num_warps)  # this GPU's limit
        if not fits or (head_dim >= 256 and (bm > 64 or bn > 64)) or (itemsize == 4 and bn > 64):
            continue
        if bm > 64 and n_q <= 64:
            continue
        kept.append(c)
    return kept or [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16}, num_warps=4, num_stages=1)]


_fwd_v3_autotuned = triton.autotune(
    configs=_v3_configs(),
    key=["N_Q_BUCKET", "N_K_BUCKET", "HEAD_DIM", *KERNEL_FLAGS, "HAS_SEQLENS", "DOT_PRECISION", "DOT_F32"],
    prune_configs_by={"early_config_prune": _prune_v3},
)(_fwd_v2_exp2_causal) if not _mode.is_interpreter() else None


def autotune_enabled() -> bool:
    """v3 autotunes unless ``FLASHLAB_AUTOTUNE=0`` (then it runs ``default_fwd_config``)."""
    return os.environ.get("FLASHLAB_AUTOTUNE", "1") != "0" and not _mode.is_interpreter()


def _bucket(n: int) -> int:
    return min(16384, max(16, triton.next_power_of_2(n)))


# --------------------------------------------------------------------------------------------
# Python wrappers: one calling convention, forward(q, k, v, causal, scale) -> (o, lse)
# --------------------------------------------------------------------------------------------
def _out_and_args(q, k, v, spec: AttnSpec):
    """The output buffers and the kernel arguments: positional pointers, strides and sizes, and the
    keywords of the rule (``AttnSpec.kernel_args``) and of the dtype."""
    B, H, Nq, d = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    o = new_output((B, H, Nq, d), q.dtype, q.device)  # (B, H, Nq, d)
    lse = new_output((B, H, Nq), torch.float32, q.device)  # (B, H, Nq)
    args = (
        q, k, v, o, lse, spec.resolved_scale(d),
        *q.stride(), *k.stride(), *v.stride(), *o.stride(),
        H, H // Hkv, Nq, Nk,
    )
    if spec.mask_mod is not None and spec.base is not spec:
        raise ValueError("mask_mod with seqlens_q/seqlens_k is not supported by the Triton rungs (their block "
                         "lists are per launch, not per sequence); use the NumPy functions or pad to one length")
    seqlens = seqlens_table(spec, B, Nq, Nk, q.device)  # (B, 3) or None
    consts = dict(
        HEAD_DIM=head_dim_padded(d), D_HEAD=d, **spec.kernel_args(Nq, Nk), **spec.mask_args(),
        SEQLENS=seqlens, HAS_SEQLENS=seqlens is not None,
        DOT_F32=_mode.dot_upcast(q.dtype), DOT_PRECISION=dot_precision(q.dtype),
    )
    return o, lse, args, consts


def _ranges(spec: AttnSpec, q, k):
    """BLOCKS for a config: each query block's lists of partial and full key blocks, from the
    visibility model for that config's block sizes (mask_mod only; else None)."""
    return lambda cfg: block_lists(spec, q.shape[2], k.shape[2], cfg.block_m, cfg.block_n, q.device)


def _launch(kernel, grid, args, consts, config: FwdConfig, ranges) -> FwdConfig:
    """Launch with ``config``; on a shared-memory overflow retry with smaller tiles.
    ``ranges(cfg)``: the BLOCKS argument for that config's block sizes (None: the kernel has none)."""
    from triton.runtime.errors import OutOfResources
    from .. import targets  # per-GPU fit rules

    for cfg in fallback_fwd_configs(config):
        if not targets.fwd_fits_current(cfg.block_m, cfg.block_n, consts["HEAD_DIM"], cfg.num_stages,
                                        args[0].element_size(), cfg.num_warps):  # flashlab.targets: skip what cannot fit
            continue
        blocks = {} if ranges is None else {"BLOCKS": ranges(cfg)}  # _fwd_minimal has no BLOCKS
        try:
            kernel[grid(cfg)](*args, **consts, **blocks, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
                              num_warps=cfg.num_warps, num_stages=cfg.num_stages)
            return cfg
        except OutOfResources:
            continue
    raise RuntimeError(f"no forward config down from {config} fits this GPU")


def forward_minimal(q, k, v, causal, scale: float | None = None, config: FwdConfig | None = None):
    """Notebook 06's minimal kernel ``_fwd_minimal``: v1's grid and loop, dense or causal top-left only
    (a window, bottom-right alignment, a mask_mod or per-sequence lengths raise ValueError naming the
    option). Returns (o (B, H, Nq, d), lse (B, H, Nq) fp32, natural log)."""
    spec = as_spec(causal, scale)
    spec.refuse((), "the minimal kernel flash_fwd._fwd_minimal (dense or causal top-left; the rungs compute the rest)")
    B, H, Nq, d = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    o = new_output((B, H, Nq, d), q.dtype, q.device)  # (B, H, Nq, d)
    lse = new_output((B, H, Nq), torch.float32, q.device)  # (B, H, Nq)
    args = (q, k, v, o, lse, spec.resolved_scale(d), *q.stride(), *k.stride(), *v.stride(), *o.stride(),
            H, H // Hkv, Nq, Nk)
    consts = dict(HEAD_DIM=head_dim_padded(d), D_HEAD=d, CAUSAL=spec.causal,
                  DOT_F32=_mode.dot_upcast(q.dtype), DOT_PRECISION=dot_precision(q.dtype))
    config = config or default_fwd_config(consts["HEAD_DIM"], q.dtype)
    _launch(_fwd_minimal, lambda c: (triton.cdiv(Nq, c.block_m), B * H), args, consts, config, None)
    return o, lse


def forward_v0(q, k, v, causal, scale: float | None = None, config: FwdConfig | None = None):
    """Rung v0: grid over (batch, head) only. ``causal``: a bool or an AttnSpec.
    Returns (o (B, H, Nq, d), lse (B, H, Nq) fp32, natural log)."""
    spec = as_spec(causal, scale)
    o, lse, args, consts = _out_and_args(q, k, v, spec)
    config = config or default_fwd_config(consts["HEAD_DIM"], q.dtype)
    B, H = q.shape[:2]
    _launch(_fwd_v0_grid_bh, lambda c: (B * H,), args, consts, config, _ranges(spec, q, k))
    return o, lse


def forward_v1(q, k, v, causal, scale: float | None = None, config: FwdConfig | None = None):
    """Rung v1: FA2 grid (query block, batch*head), natural exp, masks everywhere."""
    spec = as_spec(causal, scale)
    o, lse, args, consts = _out_and_args(q, k, v, spec)
    config = config or default_fwd_config(consts["HEAD_DIM"], q.dtype)
    B, H, Nq = q.shape[:3]
    _launch(_fwd_v1_minimal, lambda c: (triton.cdiv(Nq, c.block_m), B * H), args, consts, config, _ranges(spec, q, k))
    return o, lse


def forward_v2(q, k, v, causal, scale: float | None = None, config: FwdConfig | None = None):
    """Rung v2: exp2 with log2(e) folded into the scale; the loop in three stages (masked,
    unmasked, masked) from ``visible.kv_steps``."""
    spec = as_spec(causal, scale)
    o, lse, args, consts = _out_and_args(q, k, v, spec)
    consts.update(N_Q_BUCKET=_bucket(q.shape[2]), N_K_BUCKET=_bucket(k.shape[2]))
    config = config or default_fwd_config(consts["HEAD_DIM"], q.dtype)
    B, H, Nq = q.shape[:3]
    _launch(_fwd_v2_exp2_causal, lambda c: (triton.cdiv(Nq, c.block_m), B * H), args, consts, config, _ranges(spec, q, k))
    return o, lse


def forward_v3(q, k, v, causal, scale: float | None = None):
    """Rung v3: v2 autotuned over BLOCK_M/BLOCK_N/num_warps/num_stages, keyed on length buckets,
    head dim, the rule's flags (``attnspec.KERNEL_FLAGS``) and dtype. In the interpreter, or with
    ``FLASHLAB_AUTOTUNE=0``, it runs v2 with ``default_fwd_config`` instead (one small config)."""
    if not autotune_enabled():
        return forward_v2(q, k, v, causal, scale)
    spec = as_spec(causal, scale)
    spec.refuse(("window", "causal_align", "seqlens"), "forward_v3 when it autotunes (its block sizes are chosen "
                "at launch)")
    o, lse, args, consts = _out_and_args(q, k, v, spec)
    consts.update(N_Q_BUCKET=_bucket(q.shape[2]), N_K_BUCKET=_bucket(k.shape[2]))
    B, H, Nq = q.shape[:3]
    _fwd_v3_autotuned[lambda meta: (triton.cdiv(Nq, meta["BLOCK_M"]), B * H)](*args, **consts, BLOCKS=None)
    return o, lse
