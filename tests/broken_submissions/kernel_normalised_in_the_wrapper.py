"""A correct ex07 whose kernel leaves O unnormalised (acc and l_i in float32 buffers) and whose wrapper
divides in torch after the launch, out = (acc / l[..., None]).to(q.dtype). The kernel must finish the
result: refused, naming the torch operator and its line."""
import torch
import triton
import triton.language as tl

BLOCK_M = 16
BLOCK_N = 16


@triton.jit
def flash_fwd_kernel(Q, K, V, Acc, L,
                     stride_qz, stride_qm, stride_qk,
                     stride_kz, stride_kn, stride_kk,
                     stride_vz, stride_vn, stride_vk,
                     stride_az, stride_am, stride_lz,
                     N_Q, N_K, qk_scale,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    start_m = tl.program_id(0)
    off_z = tl.program_id(1)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + off_z * stride_qz + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk,
                mask=offs_m[:, None] < N_Q, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, N_K, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(K + off_z * stride_kz + offs_n[:, None] * stride_kn + offs_d[None, :] * stride_kk,
                    mask=offs_n[:, None] < N_K, other=0.0)
        v = tl.load(V + off_z * stride_vz + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vk,
                    mask=offs_n[:, None] < N_K, other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where(offs_n[None, :] < N_K, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        p = tl.exp(s - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    row_ok = offs_m < N_Q
    tl.store(Acc + off_z * stride_az + offs_m[:, None] * stride_am + offs_d[None, :], acc, mask=row_ok[:, None])
    tl.store(L + off_z * stride_lz + offs_m, l_i, mask=row_ok)


def flash_forward(q, k, v, causal=False, scale=None):
    if causal:
        raise NotImplementedError("causal masking is exercise 08")
    z, nq, d = q.shape
    nk = k.shape[1]
    scale = d ** -0.5 if scale is None else scale
    acc = torch.empty((z, nq, d), dtype=torch.float32, device=q.device)
    l = torch.empty((z, nq), dtype=torch.float32, device=q.device)
    flash_fwd_kernel[(triton.cdiv(nq, BLOCK_M), z)](q, k, v, acc, l, *q.stride(), *k.stride(), *v.stride(),
                                                    acc.stride(0), acc.stride(1), l.stride(0), nq, nk, scale,
                                                    BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=d)
    return (acc / l[..., None]).to(q.dtype)
