"""Broken ex13_triton_backward, an honest mistake the report names: the dQ kernel recomputes P as exp(S - the
tile's own row max) where the forward's lse belongs."""
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
    start_n = tl.program_id(0) * BLOCK_N  # first key row of block j
    off_z = tl.program_id(1)
    offs_n = start_n + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
    offs_d = tl.arange(0, HEAD_DIM)
    kv_off = off_z * stride_kz + offs_n[:, None] * stride_kn + offs_d[None, :]  # (BLOCK_N, HEAD_DIM)
    kv_mask = offs_n[:, None] < N_K
    k = tl.load(K + kv_off, mask=kv_mask, other=0.0)  # (BLOCK_N, HEAD_DIM)
    v = tl.load(V + kv_off, mask=kv_mask, other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    lo = 0
    if CAUSAL:  # query rows before start_n see no key of this block
        lo = (start_n // BLOCK_M) * BLOCK_M
    for start_m in range(lo, N_Q, BLOCK_M):
        offs_m = start_m + tl.arange(0, BLOCK_M)  # (BLOCK_M,)
        q_off = off_z * stride_qz + offs_m[:, None] * stride_qm + offs_d[None, :]
        row_ok = offs_m < N_Q
        q = tl.load(Q + q_off, mask=row_ok[:, None], other=0.0)  # (BLOCK_M, HEAD_DIM)
        do = tl.load(dO + q_off, mask=row_ok[:, None], other=0.0)
        lse = tl.load(LSE + off_z * stride_lz + offs_m, mask=row_ok, other=0.0)  # (BLOCK_M,)
        delta = tl.load(Delta + off_z * stride_lz + offs_m, mask=row_ok, other=0.0)
        s = tl.dot(q, tl.trans(k)) * sm_scale  # (BLOCK_M, BLOCK_N)
        p = tl.exp(s - lse[:, None])
        keep = row_ok[:, None] & (offs_n[None, :] < N_K)
        if CAUSAL:
            keep = keep & (offs_n[None, :] <= offs_m[:, None])
        p = tl.where(keep, p, 0.0)
        dv += tl.dot(tl.trans(p).to(do.dtype), do)  # (BLOCK_N, HEAD_DIM)
        dp = tl.dot(do, tl.trans(v))  # (BLOCK_M, BLOCK_N)
        ds = p * (dp - delta[:, None])
        dk += tl.dot(tl.trans(ds).to(q.dtype), q) * sm_scale
    tl.store(dK + kv_off, dk.to(dK.dtype.element_ty), mask=kv_mask)
    tl.store(dV + kv_off, dv.to(dV.dtype.element_ty), mask=kv_mask)


def flash_backward_dkdv(q, k, v, o, lse, do, causal=False, scale=None):
    """(dk, dv) of o = softmax(scale q k^T) v by flash_bwd_dkdv_kernel; shapes and dtypes of k, v."""
    z, nq, d = q.shape
    nk = k.shape[1]
    scale = d ** -0.5 if scale is None else scale
    q, k, v, do = (t.contiguous() for t in (q, k, v, do))
    lse = lse.float().contiguous()
    delta = (do.float() * o.float()).sum(-1).contiguous()  # (Z, Nq): D = rowsum(dO * O)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    grid = (triton.cdiv(nk, BLOCK_N), z)
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
        s = tl.dot(q, tl.trans(k)) * sm_scale  # (BLOCK_M, BLOCK_N)
        p = tl.exp(s - tl.max(s, 1)[:, None])  # the mistake: the tile's row max, not lse
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
