"""FlashAttention backward in Triton (FlashAttention-2, Algorithm 2), recomputing P from the saved lse.

Three kernels, as in the structure of Triton's fused-attention tutorial (written here from the
paper, with the NumPy names of ``flashlab.tiled.tiled_attention_backward``):

1. ``_bwd_preprocess``: ``D_i = rowsum(dO_i * O_i)`` (Algorithm 2, line 4), one fp32 per query row.
   For fp16/bf16 it is the diagonal of the matrix product ``O_i dO_i^T``, so D_i is summed by the
   same instruction in the same order as ``dP_ij`` is: where a row sees a single key (P_ij = 1,
   O_i = V_j), ``dS_ij = P_ij (dP_ij - D_i)`` is exactly 0, as in float64.
2. ``_bwd_dkdv``: one program per key/value block ``K_j, V_j`` (line 6) accumulates ``dK_j`` and
   ``dV_j`` over every query block (lines 8-18). With grouped-query attention the program also
   loops over the GROUP query heads that share this kv head, so their gradients are summed in
   registers, never in HBM.
3. ``_bwd_dq``: one program per query block accumulates ``dQ_i`` over the key blocks (line 15,
   FA2's dQ update, done without atomics by a second pass, as FA2's Triton ports do).

Every kernel works in log2 units: ``P = exp2(S * scale * log2(e) - lse * log2(e))``. Loops run in
the three stages of :mod:`flashlab.kernels.visible` (``q_bounds`` for dK/dV, ``kv_bounds`` for
dQ): masked, unmasked, masked (loads are still row-masked, so any Nq, Nk >= 1 works). Tiles no
query of the rule (causal, bottom-right, sliding window; :class:`flashlab.attnspec.AttnSpec`)
sees are skipped and never loaded.
"""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, replace

from .. import targets  # per-GPU fit rules
from . import _mode
from .flash_fwd import _dot, _dot_acc, dot_precision, head_dim_padded, new_output

triton = _mode.triton()
import torch  # noqa: E402
import triton.language as tl  # noqa: E402

from .visible import as_spec, block_ranges, kv_bounds, q_bounds, stage_range, visible  # noqa: E402


@dataclass(frozen=True)
class BwdConfig:
    """Tile sizes of the backward kernels (exposed so they can be tuned)."""

    block_m1: int = 32  # query rows per step of the dK/dV kernel
    block_n1: int = 128  # key rows per dK/dV program
    block_m2: int = 128  # query rows per dQ program
    block_n2: int = 32  # key rows per step of the dQ kernel
    num_warps: int = 4
    num_stages: int = 3
    block_pre: int = 128  # query rows per preprocessing program
    dq_warps: int = 0  # warps and stages of the dQ kernel; 0: num_warps, num_stages
    dq_stages: int = 0
    concurrent: bool = False  # CUDA: the dQ kernel on a second stream, beside the dK/dV kernel


INTERPRETER_BWD_CONFIG = BwdConfig(16, 16, 16, 16, 1, 1, 16)


def default_bwd_config(head_dim: int, dtype: torch.dtype) -> BwdConfig:
    """Block sizes per padded head dim (and dtype width) that fit an H100/H200's shared memory."""
    if _mode.is_interpreter():
        return INTERPRETER_BWD_CONFIG
    if dtype == torch.float32:
        return BwdConfig(16, 64, 64, 16, 4, 2) if head_dim > 64 else BwdConfig(32, 64, 64, 32, 4, 2)
    # fp16/bf16: measured on an H200, bf16, B*N = 16384, H*d = 2048 (benchmarks/results/gpu_tune_bwd.json):
    # d=64 best of 8 configs within noise; d=128 (32, 64, 64, 32, 4 warps, 3 stages) 345 TFLOP/s at
    # N=4096 against 257 for (32, 128, 128, 32, 8, 2). d=256 is not tuned.
    if head_dim <= 64:
        return BwdConfig(32, 128, 128, 32, 4, 3)
    if head_dim <= 128:
        return BwdConfig(32, 64, 64, 32, 4, 3)
    return BwdConfig(16, 64, 64, 16, 8, 1)


# The dQ kernel on a second stream beside the dK/dV kernel (BwdConfig.concurrent), measured on an
# H200 against one stream (benchmarks/results/bench_backward_call2_*.json, bf16, B*N = 16384):
# level to +9 % on causal rows and on rows up to N = 8192, 1.6x on GQA (H = 32, Hkv = 8) at
# N = 2048, where the dK/dV grid has only B*Hkv*Nk/BLOCK_N = 256 programs; 2-3 % slower on
# non-causal rows at N = 16384, so off there.
CONCURRENT_DQ_MAX_N = 8192


def concurrent_dq(causal: bool, n_q: int, n_k: int, group: int) -> bool:
    """Whether the default backward runs its dQ kernel on a second stream (CUDA only)."""
    return bool(causal) or group > 1 or max(n_q, n_k) <= CONCURRENT_DQ_MAX_N


def fallback_bwd_configs(config: BwdConfig) -> list[BwdConfig]:
    """``config`` then smaller ones, tried in turn when the GPU runs out of shared memory."""
    configs = [config]
    c = config
    while c.num_stages > 1 or c.block_n1 > 16 or c.block_m2 > 16:
        if c.num_stages > 1:
            c = replace(c, num_stages=c.num_stages - 1, dq_stages=min(c.dq_stages, c.num_stages - 1))
        else:
            c = replace(c, block_m1=16, block_n1=max(16, c.block_n1 // 2), block_m2=max(16, c.block_m2 // 2),
                        block_n2=16, num_stages=1, dq_stages=min(c.dq_stages, 1))
        configs.append(c)
    return configs


@triton.jit(do_not_specialize=["H", "N_Q"])
def _bwd_preprocess(
    O, DO, Delta,
    stride_oz, stride_oh, stride_om, stride_ok,
    stride_doz, stride_doh, stride_dom, stride_dok,
    H, N_Q,
    HEAD_DIM: tl.constexpr, D_HEAD: tl.constexpr, BLOCK_M: tl.constexpr,
    D_BY_DOT: tl.constexpr, DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    # -- D_i = rowsum(dO_i * O_i) (line 4)
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = (off_hz // H).to(tl.int64)
    off_h = (off_hz % H).to(tl.int64)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    mask = (offs_m[:, None] < N_Q) & (offs_d[None, :] < D_HEAD)
    o = tl.load(O + off_z * stride_oz + off_h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :] * stride_ok,
                mask=mask, other=0.0)
    do = tl.load(DO + off_z * stride_doz + off_h * stride_doh + offs_m[:, None] * stride_dom
                 + offs_d[None, :] * stride_dok, mask=mask, other=0.0)
    if D_BY_DOT:
        # the diagonal of O_i dO_i^T, summed by the same matrix instruction, in the same order, as
        # dP_ij^T = V_j dO_i^T in the dK/dV kernel: where a row sees one key, O_i = V_j and P_ij = 1,
        # so dP_ij - D_i is exactly 0 and dK_j, dQ_i cancel exactly, as they do in float64
        od = _dot(o, tl.trans(do), DOT_F32, DOT_PRECISION)  # (BLOCK_M, BLOCK_M)
        diag = tl.arange(0, BLOCK_M)[:, None] == tl.arange(0, BLOCK_M)[None, :]
        delta = tl.sum(tl.where(diag, od, 0.0), axis=1)
    else:
        delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), axis=1)
    tl.store(Delta + off_hz * N_Q + offs_m, delta, mask=offs_m < N_Q)


@triton.jit
def _bwd_dkdv_inner(
    dk, dv, k, v, q_base, do_base, lse_base, delta_base, stride_qm, stride_qk, stride_dom, stride_dok,
    offs_n, offs_d, lo, hi, qk_scale, N_Q, N_K, DIAG, WINDOW,
    D_HEAD: tl.constexpr, BLOCK_M: tl.constexpr, MASK: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, MASK_MOD: tl.constexpr, HAS_MASK_MOD: tl.constexpr,
    DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    for start_m in range(lo, hi, BLOCK_M):  # line 8: for each query block i
        offs_m = start_m + tl.arange(0, BLOCK_M)
        row_ok = offs_m < N_Q
        # -- load Q_i, dO_i, lse_i, D_i (line 9)
        q = tl.load(q_base + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk,
                    mask=row_ok[:, None] & (offs_d[None, :] < D_HEAD), other=0.0)
        do = tl.load(do_base + offs_m[:, None] * stride_dom + offs_d[None, :] * stride_dok,
                     mask=row_ok[:, None] & (offs_d[None, :] < D_HEAD), other=0.0)
        lse2 = tl.load(lse_base + offs_m, mask=row_ok, other=0.0) * 1.4426950408889634
        Di = tl.load(delta_base + offs_m, mask=row_ok, other=0.0)
        # -- P_ij^T = exp2(S_ij^T - lse_i), S_ij^T = K_j Q_i^T (lines 10-11); rows past N_Q have
        #    q = dO = 0, so they add nothing
        qkT = _dot(k, tl.trans(q), DOT_F32, DOT_PRECISION) * qk_scale  # (BLOCK_N, BLOCK_M)
        pT = tl.math.exp2(qkT - lse2[None, :])
        if MASK:
            seen = visible(offs_m[None, :], offs_n[:, None], N_K, DIAG, WINDOW, CAUSAL, HAS_WINDOW, MASK_MOD, HAS_MASK_MOD)
            pT = tl.where(seen, pT, 0.0)
        # -- dV_j += P_ij^T dO_i (line 12)
        dv = _dot_acc(pT.to(do.dtype), do, dv, DOT_F32, DOT_PRECISION)
        # -- dP_ij^T = V_j dO_i^T (line 13); dS_ij^T = P_ij^T * (dP_ij^T - D_i) (line 14)
        dpT = _dot(v, tl.trans(do), DOT_F32, DOT_PRECISION)
        dsT = pT * (dpT - Di[None, :])
        # -- dK_j += dS_ij^T Q_i (line 16; the scale is applied once at the end)
        dk = _dot_acc(dsT.to(q.dtype), q, dk, DOT_F32, DOT_PRECISION)
    return dk, dv


@triton.jit(do_not_specialize=["H", "GROUP", "N_Q", "N_K", "DIAG", "WINDOW"])
def _bwd_dkdv(
    Q, K, V, DO, LSE, Delta, DK, DV, sm_scale,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_doz, stride_doh, stride_dom, stride_dok,
    stride_dkz, stride_dkh, stride_dkn, stride_dkk,
    stride_dvz, stride_dvh, stride_dvn, stride_dvk,
    H, GROUP, N_Q, N_K, DIAG, WINDOW, RANGES,
    HEAD_DIM: tl.constexpr, D_HEAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, MASK_MOD: tl.constexpr, HAS_MASK_MOD: tl.constexpr,
    DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    # -- key/value block j and (batch, kv head) of this program (line 5)
    start_n = tl.program_id(0) * BLOCK_N
    off_hkvz = tl.program_id(1)
    H_KV = H // GROUP
    off_z = (off_hkvz // H_KV).to(tl.int64)
    off_hkv = (off_hkvz % H_KV).to(tl.int64)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    kv_mask = (offs_n[:, None] < N_K) & (offs_d[None, :] < D_HEAD)
    # -- the query rows that see this key block, in three stages (visible.q_bounds): the diagonal
    #    band (masked), rows that see every key of it (unmasked), the window's far edge (masked).
    #    A key block no query sees (lo == hi, e.g. causal keys past the last row) is never
    #    loaded, and dK_j = dV_j = 0 are written (visibility.TileVisibility.q_range in NumPy)
    lo, full_lo, full_hi, hi = q_bounds(tl.program_id(0), N_Q, N_K, DIAG, WINDOW, RANGES, BLOCK_M, BLOCK_N,
                                        CAUSAL, HAS_WINDOW, HAS_MASK_MOD)
    load_mask = kv_mask & (lo < hi)
    # -- load K_j, V_j (line 6); initialise dK_j = dV_j = 0 (line 7)
    k = tl.load(K + off_z * stride_kz + off_hkv * stride_kh + offs_n[:, None] * stride_kn
                + offs_d[None, :] * stride_kk, mask=load_mask, other=0.0)
    v = tl.load(V + off_z * stride_vz + off_hkv * stride_vh + offs_n[:, None] * stride_vn
                + offs_d[None, :] * stride_vk, mask=load_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    for g in range(0, GROUP):  # grouped-query attention: sum over the query heads of this kv head
        off_hz = off_z * H + off_hkv * GROUP + g
        off_h = off_hkv * GROUP + g
        q_base = Q + off_z * stride_qz + off_h * stride_qh
        do_base = DO + off_z * stride_doz + off_h * stride_doh
        lse_base = LSE + off_hz * N_Q
        delta_base = Delta + off_hz * N_Q
        for stage in tl.static_range(3):
            stage_lo, stage_hi = stage_range(stage, lo, full_lo, full_hi, hi)
            dk, dv = _bwd_dkdv_inner(dk, dv, k, v, q_base, do_base, lse_base, delta_base,
                                     stride_qm, stride_qk, stride_dom, stride_dok,
                                     offs_n, offs_d, stage_lo, stage_hi, qk_scale, N_Q, N_K, DIAG, WINDOW,
                                     D_HEAD, BLOCK_M, stage != 1, CAUSAL, HAS_WINDOW, MASK_MOD, HAS_MASK_MOD, DOT_F32,
                                     DOT_PRECISION)
    # -- write dK_j, dV_j to HBM (line 18)
    dk = dk * sm_scale
    tl.store(DK + off_z * stride_dkz + off_hkv * stride_dkh + offs_n[:, None] * stride_dkn
             + offs_d[None, :] * stride_dkk, dk.to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + off_z * stride_dvz + off_hkv * stride_dvh + offs_n[:, None] * stride_dvn
             + offs_d[None, :] * stride_dvk, dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def _bwd_dq_inner(
    dq, q, do, lse2, Di, k_base, v_base, stride_kn, stride_kk, stride_vn, stride_vk,
    offs_m, offs_d, lo, hi, qk_scale, N_K, DIAG, WINDOW,
    D_HEAD: tl.constexpr, BLOCK_N: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr, MASK_MOD: tl.constexpr, HAS_MASK_MOD: tl.constexpr,
    DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    for start_n in range(lo, hi, BLOCK_N):  # for each key block j
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_mask = (offs_n[None, :] < N_K) & (offs_d[:, None] < D_HEAD)
        # -- load K_j^T, V_j^T (line 6)
        kT = tl.load(k_base + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kk, mask=kv_mask, other=0.0)
        vT = tl.load(v_base + offs_n[None, :] * stride_vn + offs_d[:, None] * stride_vk, mask=kv_mask, other=0.0)
        # -- P_ij = exp2(S_ij - lse_i) (lines 10-11)
        qk = _dot(q, kT, DOT_F32, DOT_PRECISION) * qk_scale  # (BLOCK_M, BLOCK_N)
        p = tl.math.exp2(qk - lse2[:, None])
        if MASK:
            seen = visible(offs_m[:, None], offs_n[None, :], N_K, DIAG, WINDOW, CAUSAL, HAS_WINDOW, MASK_MOD, HAS_MASK_MOD)
            p = tl.where(seen, p, 0.0)
        # -- dP_ij = dO_i V_j^T (line 13); dS_ij = P_ij * (dP_ij - D_i) (line 14)
        dp = _dot(do, vT, DOT_F32, DOT_PRECISION)
        ds = p * (dp - Di[:, None])
        # -- dQ_i += dS_ij K_j (line 15; the scale is applied once at the end)
        dq = _dot_acc(ds.to(kT.dtype), tl.trans(kT), dq, DOT_F32, DOT_PRECISION)
    return dq


@triton.jit(do_not_specialize=["H", "GROUP", "N_Q", "N_K", "DIAG", "WINDOW"])
def _bwd_dq(
    Q, K, V, DO, LSE, Delta, DQ, sm_scale,
    stride_qz, stride_qh, stride_qm, stride_qk,
    stride_kz, stride_kh, stride_kn, stride_kk,
    stride_vz, stride_vh, stride_vn, stride_vk,
    stride_doz, stride_doh, stride_dom, stride_dok,
    stride_dqz, stride_dqh, stride_dqm, stride_dqk,
    H, GROUP, N_Q, N_K, DIAG, WINDOW, RANGES,
    HEAD_DIM: tl.constexpr, D_HEAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, MASK_MOD: tl.constexpr, HAS_MASK_MOD: tl.constexpr,
    DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    # -- query block i and (batch, head) of this program
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    off_z = (off_hz // H).to(tl.int64)
    off_h = (off_hz % H).to(tl.int64)
    off_hkv = off_h // GROUP
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    row_mask = (offs_m[:, None] < N_Q) & (offs_d[None, :] < D_HEAD)
    # -- load Q_i, dO_i, lse_i, D_i; dQ_i = 0
    q = tl.load(Q + off_z * stride_qz + off_h * stride_qh + offs_m[:, None] * stride_qm
                + offs_d[None, :] * stride_qk, mask=row_mask, other=0.0)
    do = tl.load(DO + off_z * stride_doz + off_h * stride_doh + offs_m[:, None] * stride_dom
                 + offs_d[None, :] * stride_dok, mask=row_mask, other=0.0)
    lse2 = tl.load(LSE + off_hz * N_Q + offs_m, mask=offs_m < N_Q, other=0.0) * 1.4426950408889634
    Di = tl.load(Delta + off_hz * N_Q + offs_m, mask=offs_m < N_Q, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    k_base = K + off_z * stride_kz + off_hkv * stride_kh
    v_base = V + off_z * stride_vz + off_hkv * stride_vh
    # -- the same three stages as the forward (v2): visible.kv_bounds
    lo, full_lo, full_hi, hi = kv_bounds(start_m, N_Q, N_K, DIAG, WINDOW, RANGES, BLOCK_M, BLOCK_N,
                                         CAUSAL, HAS_WINDOW, HAS_MASK_MOD)
    for stage in tl.static_range(3):
        stage_lo, stage_hi = stage_range(stage, lo, full_lo, full_hi, hi)
        dq = _bwd_dq_inner(dq, q, do, lse2, Di, k_base, v_base, stride_kn, stride_kk, stride_vn, stride_vk,
                           offs_m, offs_d, stage_lo, stage_hi, qk_scale, N_K, DIAG, WINDOW,
                           D_HEAD, BLOCK_N, stage != 1, CAUSAL, HAS_WINDOW, MASK_MOD, HAS_MASK_MOD, DOT_F32,
                                     DOT_PRECISION)
    # -- write dQ_i (line 15's write back, once per query block)
    dq = dq * sm_scale
    tl.store(DQ + off_z * stride_dqz + off_h * stride_dqh + offs_m[:, None] * stride_dqm
             + offs_d[None, :] * stride_dqk, dq.to(DQ.dtype.element_ty), mask=row_mask)


_SIDE_STREAMS: dict = {}


def _side_stream(device):
    """One second CUDA stream per device (created once) for the concurrent dQ kernel."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SIDE_STREAMS:
        _SIDE_STREAMS[index] = torch.cuda.Stream(device=index)
    return _SIDE_STREAMS[index]


def preprocess(o, do, block_pre: int = 128):
    """D (B, H, Nq) float32: ``D_i = rowsum(dO_i * O_i)`` (Algorithm 2, line 4) for o, do (B, H, Nq, d).

    For fp16/bf16 the diagonal of O dO^T, summed as the backward kernels sum dP (see ``_bwd_preprocess``).
    """
    B, H, Nq, d = o.shape
    by_dot = o.dtype != torch.float32
    block = min(block_pre, 64) if by_dot else block_pre  # by_dot: a (64, 64) fp32 tile of O dO^T
    delta = new_output((B, H, Nq), torch.float32, o.device)  # (B, H, Nq)
    _bwd_preprocess[(triton.cdiv(Nq, block), B * H)](
        o, do, delta, *o.stride(), *do.stride(), H, Nq, HEAD_DIM=head_dim_padded(d), D_HEAD=d, BLOCK_M=block,
        D_BY_DOT=by_dot, DOT_F32=_mode.dot_upcast(o.dtype), DOT_PRECISION=dot_precision(o.dtype))
    return delta


def backward(q, k, v, o, lse, do, causal, scale: float | None = None, config: BwdConfig | None = None):
    """Gradients of attention from the saved forward output and log-sum-exp.

    q, o, do: (B, H, Nq, d); k, v: (B, Hkv, Nk, d); lse: (B, H, Nq) float32, natural log.
    Returns dq (B, H, Nq, d), dk and dv (B, Hkv, Nk, d), in the dtypes of q, k and v; with
    grouped-query attention dk and dv are summed over the H // Hkv query heads of each kv head.
    ``causal``: a bool or the forward's AttnSpec. The launches come from the launch plan of the
    inputs' signature (:mod:`flashlab.kernels.plans`: made once, then the compiled kernels are
    launched directly); with ``plans.ENABLED = False`` they are built and launched anew below.
    """
    from triton.runtime.errors import OutOfResources

    from . import plans

    spec = as_spec(causal, scale)
    if plans.ENABLED:  # the launch plan of these inputs' signature (kernels.plans); below: every call anew
        return plans.backward(q, k, v, o, lse, do, spec, config)
    B, H, Nq, d = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    group = H // Hkv
    head_dim = head_dim_padded(d)
    consts = dict(HEAD_DIM=head_dim, D_HEAD=d)
    scale = spec.resolved_scale(d)
    flags = dict(**spec.kernel_args(Nq, Nk), **spec.mask_args(), DOT_F32=_mode.dot_upcast(q.dtype),
                 DOT_PRECISION=dot_precision(q.dtype))
    lse = lse.contiguous()
    dq = new_output((B, H, Nq, d), q.dtype, q.device)  # (B, H, Nq, d)
    dk = new_output((B, Hkv, Nk, d), k.dtype, k.device)  # (B, Hkv, Nk, d)
    dv = new_output((B, Hkv, Nk, d), v.dtype, v.device)  # (B, Hkv, Nk, d)
    config = resolve_config(q, k, spec, config)
    for cfg in fitting_configs(config, head_dim, q.element_size()):
        try:
            delta = preprocess(o, do, cfg.block_pre)  # (B, H, Nq)
            common = (*q.stride(), *k.stride(), *v.stride(), *do.stride())
            side = _side_stream(q.device) if cfg.concurrent and q.device.type == "cuda" else None
            if side is not None:  # dQ and dK/dV only read what the preprocessing wrote: run side by side
                side.wait_stream(torch.cuda.current_stream(q.device))
            with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
                _bwd_dq[(triton.cdiv(Nq, cfg.block_m2), B * H)](
                    q, k, v, do, lse, delta, dq, scale, *common, *dq.stride(),
                    H, group, Nq, Nk, **consts, **flags, BLOCK_M=cfg.block_m2, BLOCK_N=cfg.block_n2,
                    RANGES=block_ranges(spec, Nq, Nk, cfg.block_m2, cfg.block_n2, "q", q.device),
                    num_warps=cfg.dq_warps or cfg.num_warps, num_stages=cfg.dq_stages or cfg.num_stages)
            _bwd_dkdv[(triton.cdiv(Nk, cfg.block_n1), B * Hkv)](
                q, k, v, do, lse, delta, dk, dv, scale, *common, *dk.stride(), *dv.stride(),
                H, group, Nq, Nk, **consts, **flags, BLOCK_M=cfg.block_m1, BLOCK_N=cfg.block_n1,
                RANGES=block_ranges(spec, Nq, Nk, cfg.block_m1, cfg.block_n1, "k", q.device),
                num_warps=cfg.num_warps, num_stages=cfg.num_stages)
            if side is not None:
                torch.cuda.current_stream(q.device).wait_stream(side)
                for t in (q, k, v, do, lse, delta, dq):  # used on the side stream: freed only after it
                    t.record_stream(side)
            return dq, dk, dv
        except OutOfResources:
            continue
    raise RuntimeError(does_not_fit(config, head_dim, q.dtype))


def resolve_config(q, k, spec, config: BwdConfig | None) -> BwdConfig:
    """``config``, or the default for q's padded head dim and dtype with the dQ kernel on a second
    stream where :func:`concurrent_dq` says so."""
    if config is not None:
        return config
    return _default_config(head_dim_padded(q.shape[3]), q.dtype,
                           concurrent_dq(spec.causal, q.shape[2], k.shape[2], q.shape[1] // k.shape[1]),
                           _mode.is_interpreter())


@functools.lru_cache(maxsize=64)
def _default_config(head_dim: int, dtype: torch.dtype, concurrent: bool, interpreting: bool) -> BwdConfig:
    """:func:`default_bwd_config` with ``concurrent`` set, made once (``resolve_config`` runs per call)."""
    return replace(default_bwd_config(head_dim, dtype), concurrent=concurrent)


def fitting_configs(config: BwdConfig, head_dim: int, itemsize: int):
    """``config`` then smaller ones (:func:`fallback_bwd_configs`), skipping those
    :mod:`flashlab.targets` says cannot fit the current GPU: tried in turn until one compiles."""
    for cfg in fallback_bwd_configs(config):
        if targets.bwd_fits_current(cfg, head_dim, itemsize):
            yield cfg


def does_not_fit(config: BwdConfig, head_dim: int, dtype) -> str:
    """The message when no config of :func:`fallback_bwd_configs` fits."""
    return targets.bwd_does_not_fit(fallback_bwd_configs(config)[-1], head_dim, dtype)
