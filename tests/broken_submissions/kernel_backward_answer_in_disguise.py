"""Cheat, exercise 13: the wrappers compute dQ, dK and dV in torch without a matmul (broadcast
products summed) and hand the kernels twice the answer in place of Q, K and V; the kernels only halve
what they read, so no input holds the answer itself. Fails the relaunch: on the grader's own Q, K, V
the kernels write half of them, not gradients."""
import torch
import triton
import triton.language as tl


def _grads(q, k, v, o, lse, do, causal, scale):
    s = (q[:, :, None, :] * k[:, None, :, :]).sum(-1) * scale
    if causal:
        r = torch.arange(q.shape[1])[:, None]
        c = torch.arange(k.shape[1])[None, :]
        s = torch.where(c.to(s.device) <= r.to(s.device), s, torch.full_like(s, float("-inf")))
    p = torch.exp(s - lse[:, :, None])
    dv = (p[:, :, :, None] * do[:, :, None, :]).sum(1)
    dp = (do[:, :, None, :] * v[:, None, :, :]).sum(-1)
    delta = (do * o).sum(-1)
    ds = p * (dp - delta[:, :, None])
    dk = (ds[:, :, :, None] * q[:, :, None, :]).sum(1) * scale
    dq = (ds[:, :, :, None] * k[:, None, :, :]).sum(2) * scale
    return dq, dk, dv


@triton.jit
def flash_bwd_dkdv_kernel(Q, K, V, dO, LSE, Delta, dK, dV,
                          stride_qz, stride_qm, stride_kz, stride_kn, stride_lz,
                          N_Q, N_K, sm_scale,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                          CAUSAL: tl.constexpr):
    z = tl.program_id(1)
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    m = offs_n[:, None] < N_K
    p = z * stride_kz + offs_n[:, None] * stride_kn + offs_d[None, :]
    tl.store(dK + p, tl.load(K + p, mask=m) * 0.5, mask=m)
    tl.store(dV + p, tl.load(V + p, mask=m) * 0.5, mask=m)


def flash_backward_dkdv(q, k, v, o, lse, do, causal=False, scale=None):
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    _, dk, dv = _grads(q, k, v, o, lse, do, causal, scale)
    dk, dv = (2 * dk).contiguous(), (2 * dv).contiguous()
    outk, outv = torch.empty_like(k), torch.empty_like(v)
    Z, Nk, d = k.shape
    grid = (triton.cdiv(Nk, 16), Z)
    flash_bwd_dkdv_kernel[grid](q, dk, dv, do, lse, lse, outk, outv, q.stride(0), q.stride(1), dk.stride(0), dk.stride(1),
                                lse.stride(0), q.shape[1], Nk, scale, BLOCK_M=16, BLOCK_N=16, HEAD_DIM=d, CAUSAL=causal)
    return outk, outv


@triton.jit
def flash_bwd_dq_kernel(Q, K, V, dO, LSE, Delta, dQ,
                        stride_qz, stride_qm, stride_kz, stride_kn, stride_lz,
                        N_Q, N_K, sm_scale,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                        CAUSAL: tl.constexpr):
    z = tl.program_id(1)
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    m = offs_m[:, None] < N_Q
    p = z * stride_qz + offs_m[:, None] * stride_qm + offs_d[None, :]
    tl.store(dQ + p, tl.load(Q + p, mask=m) * 0.5, mask=m)


def flash_backward_dq(q, k, v, o, lse, do, causal=False, scale=None):
    scale = scale if scale is not None else q.shape[-1] ** -0.5
    dq, _, _ = _grads(q, k, v, o, lse, do, causal, scale)
    dq = (2 * dq).contiguous()
    out = torch.empty_like(q)
    Z, Nq, d = q.shape
    grid = (triton.cdiv(Nq, 16), Z)
    flash_bwd_dq_kernel[grid](dq, k, v, do, lse, lse, out, dq.stride(0), dq.stride(1), k.stride(0), k.stride(1),
                              lse.stride(0), Nq, k.shape[1], scale, BLOCK_M=16, BLOCK_N=16, HEAD_DIM=d, CAUSAL=causal)
    return out
