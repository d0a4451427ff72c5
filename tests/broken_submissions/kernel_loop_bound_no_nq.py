"""Broken ex08_kernel_causal: BLOCK_M = 32 > BLOCK_N, and the causal loop bound forgets N_Q (the
last real query row), so the ragged last query block loads key blocks past it.

Top-left aligned: query row i sees key columns j <= i. Key blocks past the block's last query row
are skipped (never loaded); the diagonal blocks are masked.
"""
import torch
import triton
import triton.language as tl

BLOCK_M = 32  # query rows per program
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
    # -- which query block and which batch element (FlashAttention-2 Algorithm 1, line 3)
    start_m = tl.program_id(0)
    off_z = tl.program_id(1)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    # -- load Q_i once (line 4)
    q_ptrs = Q + off_z * stride_qz + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N_Q, other=0.0)  # (BLOCK_M, HEAD_DIM)
    # -- on-chip state (line 5)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    # -- causal: key blocks that start past this block's last query row are never loaded
    hi = N_K
    if CAUSAL:
        hi = tl.minimum(N_K, (start_m + 1) * BLOCK_M)  # the mistake: past N_Q in a ragged last block
    for start_n in range(0, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        # -- load K_j (transposed) and V_j (lines 6-7)
        k_ptrs = K + off_z * stride_kz + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kk
        k = tl.load(k_ptrs, mask=offs_n[None, :] < N_K, other=0.0)  # (HEAD_DIM, BLOCK_N)
        v_ptrs = V + off_z * stride_vz + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vk
        v = tl.load(v_ptrs, mask=offs_n[:, None] < N_K, other=0.0)  # (BLOCK_N, HEAD_DIM)
        # -- S_ij = Q_i K_j^T (line 8); keys past N_K never count
        qk = tl.dot(q, k) * qk_scale  # (BLOCK_M, BLOCK_N)
        qk = tl.where(offs_n[None, :] < N_K, qk, float("-inf"))
        if CAUSAL:
            qk = tl.where(offs_m[:, None] >= offs_n[None, :], qk, float("-inf"))
        # -- update m_i and l_i (lines 9-10)
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_ij[:, None])  # (BLOCK_M, BLOCK_N)
        alpha = tl.exp(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        # -- update acc
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_ij
    # -- O_i = acc / l_i (line 12), write it (line 14; line 13 computes L_i, which this kernel does not store)
    acc = acc / l_i[:, None]
    o_ptrs = Out + off_z * stride_oz + offs_m[:, None] * stride_om + offs_d[None, :] * stride_ok
    tl.store(o_ptrs, acc.to(Out.dtype.element_ty), mask=offs_m[:, None] < N_Q)


def flash_forward(q, k, v, causal=False):
    """softmax(q k^T / sqrt(d)) v with flash_fwd_kernel.

    q: (Z, Nq, d), k and v: (Z, Nk, d) torch tensors (float32 or float16), d a power of two >= 16.
    Returns (Z, Nq, d) in q's dtype.
    """
    z, nq, d = q.shape
    nk = k.shape[1]
    out = torch.empty_like(q)
    grid = (triton.cdiv(nq, BLOCK_M), z)
    flash_fwd_kernel[grid](q, k, v, out,
                           q.stride(0), q.stride(1), q.stride(2),
                           k.stride(0), k.stride(1), k.stride(2),
                           v.stride(0), v.stride(1), v.stride(2),
                           out.stride(0), out.stride(1), out.stride(2),
                           nq, nk, 1.0 / d ** 0.5,
                           BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=d, CAUSAL=causal)
    return out
