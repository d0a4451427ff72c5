"""Broken ex14_split_kv_decode, an honest mistake the report names: combine_splits averages the splits' outputs."""
import torch
import triton
import triton.language as tl

BLOCK_N = 16  # keys per inner-loop step


@triton.jit
def decode_partial_kernel(Q, K, V, O_part, LSE_part,
                          stride_qz, stride_kz, stride_kn, stride_oz, stride_os, stride_lz,
                          N_K, keys_per_split, qk_scale,
                          BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    off_z = tl.program_id(0)
    split = tl.program_id(1)
    lo = split * keys_per_split
    hi = tl.minimum(lo + keys_per_split, N_K)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + off_z * stride_qz + offs_d).to(tl.float32)  # (HEAD_DIM,)
    m_i = tl.full([], float("-inf"), tl.float32)
    l_i = tl.full([], 0.0, tl.float32)
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)  # (BLOCK_N,)
        in_split = offs_n < hi
        kv_off = off_z * stride_kz + offs_n[:, None] * stride_kn + offs_d[None, :]  # (BLOCK_N, HEAD_DIM)
        k = tl.load(K + kv_off, mask=in_split[:, None], other=0.0).to(tl.float32)
        v = tl.load(V + kv_off, mask=in_split[:, None], other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], 1) * qk_scale  # (BLOCK_N,): one query row, no dot needed
        s = tl.where(in_split, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 0))  # finite: every visited block holds a key of the split
        p = tl.exp(s - m_new)
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 0)
        acc = acc * alpha + tl.sum(p[:, None] * v, 0)
        m_i = m_new
    o = acc / tl.where(l_i > 0, l_i, 1.0)  # an empty split: o = 0
    tl.store(O_part + off_z * stride_oz + split * stride_os + offs_d, o)
    tl.store(LSE_part + off_z * stride_lz + split, m_i + tl.log(l_i))  # empty: -inf + log 0 = -inf


def split_kv_partials(q, k, v, num_splits, scale=None):
    """Partial (o, lse) of each of num_splits key slices: (Z, S, d) and (Z, S), float32."""
    z, nk, d = k.shape
    keys_per_split = triton.cdiv(nk, num_splits)
    scale = d ** -0.5 if scale is None else scale
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o_part = torch.empty((z, num_splits, d), dtype=torch.float32, device=q.device)
    lse_part = torch.empty((z, num_splits), dtype=torch.float32, device=q.device)
    decode_partial_kernel[(z, num_splits)](q, k, v, o_part, lse_part, q.stride(0), k.stride(0), k.stride(1),
                                           o_part.stride(0), o_part.stride(1), lse_part.stride(0),
                                           nk, keys_per_split, scale, BLOCK_N=BLOCK_N, HEAD_DIM=d)
    return o_part, lse_part


def combine_splits(o_part, lse_part):
    return o_part.mean(dim=1)
