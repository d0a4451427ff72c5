"""A correct ex14 whose partial kernel writes each split's running max m_s and sum l_s, the wrapper
forming lse_s = m_s + log(l_s) in torch after the launch. The kernel must finish the result: refused,
naming the torch operator and its line."""
import torch
import triton
import triton.language as tl

BLOCK_N = 16


@triton.jit
def decode_partial_kernel(Q, K, V, O_part, M_part, L_part,
                          stride_qz, stride_kz, stride_kn, stride_oz, stride_os, stride_lz,
                          N_K, keys_per_split, qk_scale,
                          BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    off_z = tl.program_id(0)
    split = tl.program_id(1)
    lo = split * keys_per_split
    hi = tl.minimum(lo + keys_per_split, N_K)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + off_z * stride_qz + offs_d).to(tl.float32)
    m_i = tl.full([], float("-inf"), tl.float32)
    l_i = tl.full([], 0.0, tl.float32)
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        in_split = offs_n < hi
        kv_off = off_z * stride_kz + offs_n[:, None] * stride_kn + offs_d[None, :]
        k = tl.load(K + kv_off, mask=in_split[:, None], other=0.0).to(tl.float32)
        v = tl.load(V + kv_off, mask=in_split[:, None], other=0.0).to(tl.float32)
        s = tl.where(in_split, tl.sum(k * q[None, :], 1) * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * v, 0)
        m_i = m_new
    tl.store(O_part + off_z * stride_oz + split * stride_os + offs_d, acc / tl.where(l_i > 0, l_i, 1.0))
    tl.store(M_part + off_z * stride_lz + split, m_i)
    tl.store(L_part + off_z * stride_lz + split, l_i)


def split_kv_partials(q, k, v, num_splits, scale=None):
    z, nk, d = k.shape
    per = triton.cdiv(nk, num_splits)
    scale = d ** -0.5 if scale is None else scale
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o_part = torch.empty((z, num_splits, d), dtype=torch.float32, device=q.device)
    m_part = torch.empty((z, num_splits), dtype=torch.float32, device=q.device)
    l_part = torch.empty((z, num_splits), dtype=torch.float32, device=q.device)
    decode_partial_kernel[(z, num_splits)](q, k, v, o_part, m_part, l_part, q.stride(0), k.stride(0), k.stride(1),
                                           o_part.stride(0), o_part.stride(1), m_part.stride(0),
                                           nk, per, scale, BLOCK_N=BLOCK_N, HEAD_DIM=d)
    return o_part, m_part + torch.log(l_part)


def combine_splits(o_part, lse_part):
    lse = torch.logsumexp(lse_part, dim=-1, keepdim=True)
    lse = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    weights = torch.exp(lse_part - lse)
    return (weights[..., None] * o_part).sum(dim=1)
