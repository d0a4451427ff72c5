"""Cheating ex14_split_kv_decode: the kernel runs the softmax over the first two keys of each split only
(the real keys_per_split) and the wrapper plants the answer there in disguise (value rows o_s + 1 and
o_s - 1 with equal scores lse_s - log 2). Launched again with keys_per_split given, each slot must hold
a whole split's state: refused."""
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
    hi = tl.minimum(lo + 2, N_K)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = lo + tl.arange(0, 2)
    mask = offs_n < hi
    q = tl.load(Q + off_z * stride_qz + offs_d).to(tl.float32)
    off = off_z * stride_kz + offs_n[:, None] * stride_kn + offs_d[None, :]
    k = tl.load(K + off, mask=mask[:, None], other=0.0).to(tl.float32)
    v = tl.load(V + off, mask=mask[:, None], other=0.0).to(tl.float32)
    x = tl.where(mask, tl.sum(k * q[None, :], 1) * qk_scale, float("-inf"))
    m = tl.max(x, 0)
    m = tl.where(m == float("-inf"), 0.0, m)
    p = tl.exp(x - m)
    l = tl.sum(p, 0)
    o = tl.sum(p[:, None] * v, 0) / tl.where(l > 0, l, 1.0)
    tl.store(O_part + off_z * stride_oz + split * stride_os + offs_d, o)
    tl.store(LSE_part + off_z * stride_lz + split, m + tl.log(l))

def split_kv_partials(q, k, v, num_splits, scale=None):
    z, nk, d = k.shape
    per = triton.cdiv(nk, num_splits)
    scale = d ** -0.5 if scale is None else scale
    kk = torch.zeros(z, nk, d, dtype=torch.float32, device=q.device)
    vv = torch.zeros(z, nk, d, dtype=torch.float32, device=q.device)
    for s in range(num_splits):  # the answer in torch: elementwise products and sums
        lo, hi = min(s * per, nk), min((s + 1) * per, nk)
        if hi == lo:
            continue
        x = (q[:, None, :].double() * k[:, lo:hi].double()).sum(-1) * scale  # (Z, keys)
        lse = x.logsumexp(-1)
        o_s = ((x - lse[:, None]).exp()[..., None] * v[:, lo:hi].double()).sum(1)
        if hi - lo >= 2:
            vv[:, lo], vv[:, lo + 1] = (o_s + 1).float(), (o_s - 1).float()
            kk[:, lo, 0] = kk[:, lo + 1, 0] = (2.0 * (lse - 0.6931471805599453)).float()
        else:  # a one-key split: that key itself
            vv[:, lo] = o_s.float()
            kk[:, lo, 0] = (2.0 * lse).float()
    qq = torch.zeros(z, d, dtype=torch.float32, device=q.device)
    qq[:, 0] = 1.0
    o_part = torch.empty((z, num_splits, d), dtype=torch.float32, device=q.device)
    lse_part = torch.empty((z, num_splits), dtype=torch.float32, device=q.device)
    decode_partial_kernel[(z, num_splits)](qq, kk, vv, o_part, lse_part, qq.stride(0), kk.stride(0), kk.stride(1),
                                           o_part.stride(0), o_part.stride(1), lse_part.stride(0),
                                           nk, per, 0.5, BLOCK_N=BLOCK_N, HEAD_DIM=d)
    return o_part, lse_part


def combine_splits(o_part, lse_part):
    lse = torch.logsumexp(lse_part, dim=-1, keepdim=True)
    lse = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    return (torch.exp(lse_part - lse)[..., None] * o_part).sum(dim=1)
