"""Broken ex08_kernel_causal, an honest mistake the report names: the causal mask and the loop bound aligned bottom-right (j <= i + N_K - N_Q)."""
import torch
import triton
import triton.language as tl

BLOCK_M = 16  # query rows per program
BLOCK_N = 16  # key rows per inner-loop step


@triton.jit
def flash_fwd_kernel(Q, K, V, Out,
                     stride_qz, stride_qm, stride_qk,
                     stride_kz, stride_kn, stride_kk,
                     stride_vz, stride_vn, stride_vk,
                     stride_oz, stride_om, stride_ok,
                     N_Q, N_K, qk_scale,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                     CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)  # query block i
    off_z = tl.program_id(1)  # batch element
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) query rows
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + off_z * stride_qz + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N_Q, other=0.0)  # (BLOCK_M, HEAD_DIM)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    hi = N_K
    if CAUSAL:  # one past the block's last real query row: later key blocks are fully masked
        hi = tl.minimum(N_K, tl.minimum((start_m + 1) * BLOCK_M, N_Q) + (N_K - N_Q))
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)  # (BLOCK_N,) key rows
        kt_ptrs = K + off_z * stride_kz + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kk
        kt = tl.load(kt_ptrs, mask=offs_n[None, :] < N_K, other=0.0)  # (HEAD_DIM, BLOCK_N): K_j^T
        v_ptrs = V + off_z * stride_vz + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vk
        v = tl.load(v_ptrs, mask=offs_n[:, None] < N_K, other=0.0)  # (BLOCK_N, HEAD_DIM)
        qk = tl.dot(q, kt) * qk_scale  # (BLOCK_M, BLOCK_N)
        qk = tl.where(offs_n[None, :] < N_K, qk, float("-inf"))  # padded keys never count
        if CAUSAL:
            qk = tl.where(offs_n[None, :] <= offs_m[:, None] + (N_K - N_Q), qk, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_new[:, None])  # (BLOCK_M, BLOCK_N)
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    o = acc / l_i[:, None]
    o_ptrs = Out + off_z * stride_oz + offs_m[:, None] * stride_om + offs_d[None, :] * stride_ok
    tl.store(o_ptrs, o.to(Out.dtype.element_ty), mask=offs_m[:, None] < N_Q)


def flash_forward(q, k, v, causal=False, scale=None):
    """softmax(scale q k^T) v by flash_fwd_kernel; q: (Z, Nq, d), k, v: (Z, Nk, d) -> (Z, Nq, d)."""
    z, nq, d = q.shape
    nk = k.shape[1]
    scale = d ** -0.5 if scale is None else scale
    out = torch.empty_like(q)
    grid = (triton.cdiv(nq, BLOCK_M), z)
    flash_fwd_kernel[grid](q, k, v, out, *q.stride(), *k.stride(), *v.stride(), *out.stride(), nq, nk, scale,
                           BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=d, CAUSAL=bool(causal))
    return out
