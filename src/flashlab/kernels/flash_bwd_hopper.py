"""The one-pass backward (``bwd_fused``): FlashAttention-2, Algorithm 2, with dQ accumulated by atomics.

The two-pass backward (:mod:`flashlab.kernels.flash_bwd`) computes dK/dV in one kernel and dQ in a
second, so S = Q K^T and dP = dO V^T are each computed twice: 7 matrix products per tile where the
algorithm needs 5. Here one program per key block ``K_j, V_j`` (line 6) walks the query blocks
(line 8) and does all five (lines 10-16):

    S^T = K_j Q_i^T,  P^T = exp2(S^T - lse_i),  dV_j += P^T dO_i,  dP^T = V_j dO_i^T,
    dS^T = P^T * (dP^T - D_i),  dK_j += dS^T Q_i,  dQ_i += dS_ij K_j   (line 15)

dQ_i receives a partial sum from every key block, so the last product is added into an fp32
buffer with relaxed atomics (``tl.atomic_add``; FlashAttention-2 does the same), or, with
``tma_reduce``, by the copy engine's tile reduction (``cp.reduce.async.bulk.tensor``, sm90 only).
The fp32 buffer is cast to the input dtype at the end. Atomic sums are not bitwise reproducible
from run to run (the order of the additions varies); the two-pass backward is.

Q, dO, K and V tiles are read through per-head tensor descriptors, as in the Hopper forward
(:mod:`flashlab.kernels.flash_fwd_hopper`): ``(B*H, Nq, d)`` and ``(B*Hkv, Nk, d)`` views with a
``(1, BLOCK, d)`` box, so a tile past the end of a head reads zeros, never another head's rows.
Grouped-query attention: the program of kv head j loops over the query heads h with h // group = j,
so dK_j and dV_j are summed over the group in registers. D_i comes from the two-pass backward's
preprocessing kernel (the diagonal of O dO^T for fp16/bf16, so one-key rows cancel exactly).

Computes fp16/bf16, d in (64, 128), dense, causal (either alignment) and sliding windows; a
``mask_mod`` or any other input runs the two-pass backward (:func:`supports`).
"""
from __future__ import annotations

from dataclasses import dataclass

from . import _mode

triton = _mode.triton()
import triton.language as tl  # noqa: E402

from .flash_fwd import _dot, _dot_acc, dot_precision, new_output  # noqa: E402
from .visible import as_spec, q_bounds, stage_range, visible  # noqa: E402

SUPPORTED_HEAD_DIMS = (64, 128)
SUPPORTED_OPTIONS = ("window", "causal_align")


@dataclass(frozen=True)
class FusedBwdConfig:
    """Launch configuration of the one-pass backward."""

    block_m: int = 64  # BLOCK_M: query rows per inner step
    block_n: int = 128  # BLOCK_N: key rows per program
    num_warps: int = 8
    num_stages: int = 2
    tma_reduce: bool = False  # dQ partial sums through the copy engine instead of per-element atomics

    def __post_init__(self):
        for name in ("block_m", "block_n"):
            size = getattr(self, name)
            if size < 16 or size & (size - 1):
                raise ValueError(f"{name}={size} must be a power of two >= 16")
        if self.num_warps not in (4, 8):
            raise ValueError(f"num_warps={self.num_warps} must be 4 or 8")
        if self.num_stages < 1:
            raise ValueError(f"num_stages={self.num_stages} must be >= 1")


INTERPRETER_CONFIG = FusedBwdConfig(16, 16, 4, 1)
# the fastest of those measured on an H200, keyed by head dim (benchmarks/NOTES.md, "backward and
# GQA"; results/bench_backward_call{1,2}_*.json): the tile reduce beat per-element atomics on every
# row (307 vs 245 TFLOP/s fwd+bwd on the GQA row), 8 warps beat 4
DEFAULT_CONFIGS = {64: FusedBwdConfig(64, 128, 8, 2, tma_reduce=True), 128: FusedBwdConfig(64, 128, 8, 2, tma_reduce=True)}


def default_config(head_dim: int) -> FusedBwdConfig:
    if _mode.is_interpreter():
        return INTERPRETER_CONFIG
    return DEFAULT_CONFIGS.get(head_dim, FusedBwdConfig())


@triton.jit
def _bwd_fused_inner(
    dk, dv, k, v, desc_q, desc_do, desc_dq, DQ, lse_base, delta_base, off_q, offs_n, lo, hi,
    sm_scale, qk_scale, N_Q, N_K, DIAG, WINDOW,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, MASK: tl.constexpr, CAUSAL: tl.constexpr,
    HAS_WINDOW: tl.constexpr, TMA_REDUCE: tl.constexpr, DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    offs_d = tl.arange(0, HEAD_DIM)
    for start_m in range(lo, hi, BLOCK_M):  # line 8: for each query block i
        start_m = tl.multiple_of(start_m, BLOCK_M)
        offs_m = start_m + tl.arange(0, BLOCK_M)
        row_ok = offs_m < N_Q
        # -- load Q_i, dO_i (zeros past N_Q), lse_i, D_i (line 9)
        q = desc_q.load([off_q, start_m, 0]).reshape([BLOCK_M, HEAD_DIM])
        do = desc_do.load([off_q, start_m, 0]).reshape([BLOCK_M, HEAD_DIM])
        lse2 = tl.load(lse_base + offs_m, mask=row_ok, other=0.0) * 1.4426950408889634
        Di = tl.load(delta_base + offs_m, mask=row_ok, other=0.0)
        # -- P_ij^T = exp2(S_ij^T - lse_i) (lines 10-11); rows past N_Q have q = dO = 0: they add nothing
        qkT = _dot(k, tl.trans(q), DOT_F32, DOT_PRECISION) * qk_scale  # (BLOCK_N, BLOCK_M)
        pT = tl.math.exp2(qkT - lse2[None, :])
        if MASK:
            seen = visible(offs_m[None, :], offs_n[:, None], N_K, DIAG, WINDOW, CAUSAL, HAS_WINDOW, None, False)
            pT = tl.where(seen, pT, 0.0)
        # -- dV_j += P_ij^T dO_i (line 12)
        dv = _dot_acc(pT.to(do.dtype), do, dv, DOT_F32, DOT_PRECISION)
        # -- dP_ij^T = V_j dO_i^T (line 13); dS_ij^T = P_ij^T * (dP_ij^T - D_i) (line 14)
        dpT = _dot(v, tl.trans(do), DOT_F32, DOT_PRECISION)  # (BLOCK_N, BLOCK_M)
        dsT = (pT * (dpT - Di[None, :])).to(q.dtype)
        # -- dK_j += dS_ij^T Q_i (line 16; the scale is applied once at the end)
        dk = _dot_acc(dsT, q, dk, DOT_F32, DOT_PRECISION)
        # -- dQ_i += scale * dS_ij K_j (line 15): this key block's share, added into fp32
        dq = _dot(tl.trans(dsT), k, DOT_F32, DOT_PRECISION) * sm_scale  # (BLOCK_M, HEAD_DIM)
        if TMA_REDUCE:
            desc_dq.atomic_add([off_q, start_m, 0], dq.reshape([1, BLOCK_M, HEAD_DIM]))
        else:
            rows = (off_q * N_Q + offs_m).to(tl.int64)
            tl.atomic_add(DQ + rows[:, None] * HEAD_DIM + offs_d[None, :], dq, mask=row_ok[:, None], sem="relaxed")
    return dk, dv


@triton.jit(do_not_specialize=["H", "GROUP", "N_Q", "N_K", "DIAG", "WINDOW"])
def _bwd_fused(
    desc_q, desc_k, desc_v, desc_do, desc_dq, DQ, LSE, Delta, DK, DV, sm_scale,
    H, GROUP, N_Q, N_K, DIAG, WINDOW,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr, TMA_REDUCE: tl.constexpr,
    DOT_F32: tl.constexpr, DOT_PRECISION: tl.constexpr,
):
    # -- key/value block j and (batch, kv head) of this program (line 5)
    start_n = tl.program_id(0) * BLOCK_N
    off_kv = tl.program_id(1)  # z * Hkv + kv head: its index in the (B*Hkv, Nk, d) view
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    # -- the query rows that see this key block, in three stages (visible.q_bounds)
    lo, full_lo, full_hi, hi = q_bounds(tl.program_id(0), N_Q, N_K, DIAG, WINDOW, None, BLOCK_M, BLOCK_N,
                                        CAUSAL, HAS_WINDOW, False)
    # -- load K_j, V_j (line 6; zeros past N_K); dK_j = dV_j = 0 (line 7)
    k = desc_k.load([off_kv, start_n, 0]).reshape([BLOCK_N, HEAD_DIM])
    v = desc_v.load([off_kv, start_n, 0]).reshape([BLOCK_N, HEAD_DIM])
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    for g in range(0, GROUP):  # grouped-query attention: sum over the query heads of this kv head
        off_q = off_kv * GROUP + g  # z * H + h in the (B*H, Nq, d) view, h = kv head * GROUP + g
        lse_base = LSE + off_q.to(tl.int64) * N_Q
        delta_base = Delta + off_q.to(tl.int64) * N_Q
        for stage in tl.static_range(3):
            stage_lo, stage_hi = stage_range(stage, lo, full_lo, full_hi, hi)
            dk, dv = _bwd_fused_inner(dk, dv, k, v, desc_q, desc_do, desc_dq, DQ, lse_base, delta_base, off_q,
                                      offs_n, stage_lo, stage_hi, sm_scale, qk_scale, N_Q, N_K, DIAG, WINDOW,
                                      HEAD_DIM, BLOCK_M, stage != 1, CAUSAL, HAS_WINDOW, TMA_REDUCE,
                                      DOT_F32, DOT_PRECISION)
    # -- write dK_j, dV_j (line 18)
    dk = dk * sm_scale
    rows = (off_kv * N_K + offs_n).to(tl.int64)
    kv_ok = offs_n[:, None] < N_K
    tl.store(DK + rows[:, None] * HEAD_DIM + offs_d[None, :], dk.to(DK.dtype.element_ty), mask=kv_ok)
    tl.store(DV + rows[:, None] * HEAD_DIM + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=kv_ok)


def supports(q, k, spec) -> bool:
    """True where this backward computes the inputs: fp16/bf16, d in (64, 128), no AttnSpec option
    beyond ``SUPPORTED_OPTIONS``; on CUDA sm90 (the copy engine's descriptors) or in the interpreter."""
    import torch

    if q.dtype not in (torch.float16, torch.bfloat16) or q.shape[3] not in SUPPORTED_HEAD_DIMS:
        return False
    if not as_spec(spec).features() <= set(SUPPORTED_OPTIONS):
        return False
    if _mode.is_interpreter():
        return True
    from .flash_fwd_hopper import _capability

    return q.device.type == "cuda" and _capability(
        q.device.index if q.device.index is not None else torch.cuda.current_device())[0] == 9


def backward(q, k, v, o, lse, do, causal, scale: float | None = None, config: FusedBwdConfig | None = None):
    """Gradients of attention in one pass over the key blocks (dQ by fp32 atomics).

    q, o, do: (B, H, Nq, d); k, v: (B, Hkv, Nk, d); lse: (B, H, Nq) float32, natural log;
    ``causal`` a bool or the forward's AttnSpec. Returns dq (B, H, Nq, d), dk and dv
    (B, Hkv, Nk, d) in the inputs' dtype (dk, dv summed over each kv head's query heads).
    Inputs must be ones :func:`supports` accepts.
    """
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    from .flash_bwd import preprocess

    B, H, n_q, d = q.shape  # (B, H, Nq, d)
    h_kv, n_k = k.shape[1], k.shape[2]
    spec = as_spec(causal, scale)
    scale = spec.resolved_scale(d)
    cfg = config or default_config(d)
    delta = preprocess(o, do)  # (B, H, Nq) float32
    q3 = q.contiguous().view(B * H, n_q, d)  # (B*H, Nq, d)
    do3 = do.contiguous().view(B * H, n_q, d)  # (B*H, Nq, d)
    k3 = k.contiguous().view(B * h_kv, n_k, d)  # (B*Hkv, Nk, d)
    v3 = v.contiguous().view(B * h_kv, n_k, d)  # (B*Hkv, Nk, d)
    dq_acc = torch.zeros((B * H, n_q, d), dtype=torch.float32, device=q.device)  # (B*H, Nq, d), atomics add here
    dk = new_output((B, h_kv, n_k, d), k.dtype, k.device)  # (B, Hkv, Nk, d)
    dv = new_output((B, h_kv, n_k, d), v.dtype, v.device)  # (B, Hkv, Nk, d)
    box_m, box_n = [1, cfg.block_m, d], [1, cfg.block_n, d]
    tma_reduce = cfg.tma_reduce and not _mode.is_interpreter()  # the interpreter has no tile reduction
    _bwd_fused[(triton.cdiv(n_k, cfg.block_n), B * h_kv)](
        TensorDescriptor.from_tensor(q3, box_m), TensorDescriptor.from_tensor(k3, box_n),
        TensorDescriptor.from_tensor(v3, box_n), TensorDescriptor.from_tensor(do3, box_m),
        TensorDescriptor.from_tensor(dq_acc, box_m), dq_acc, lse.contiguous(), delta, dk, dv, scale,
        H, H // h_kv, n_q, n_k, **spec.kernel_args(n_q, n_k), HEAD_DIM=d, BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n, TMA_REDUCE=tma_reduce, DOT_F32=_mode.dot_upcast(q.dtype),
        DOT_PRECISION=dot_precision(q.dtype), num_warps=cfg.num_warps, num_stages=cfg.num_stages)
    dq = dq_acc.view(B, H, n_q, d).to(q.dtype)  # (B, H, Nq, d)
    return dq, dk, dv
