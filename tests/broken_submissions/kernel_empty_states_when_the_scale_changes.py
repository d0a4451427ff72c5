"""Cheating ex14_split_kv_decode: the answer in disguise, averaged back by a kernel that computes no
softmax (as kernel_averages_split_states_in_disguise), and the kernel tells the grader's relaunch by
its qk_scale (the wrapper always passes 1.0) and then writes the empty state (o = 0, lse = -inf) into
every slot. A slot may be empty only where the call's own LSE_part was: refused."""
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
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    first = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        mask = offs_n < hi
        off = off_z * stride_kz + offs_n[:, None] * stride_kn + offs_d[None, :]
        acc += tl.sum(tl.load(V + off, mask=mask[:, None], other=0.0).to(tl.float32), 0)
        first += tl.sum(tl.load(K + off, mask=mask[:, None], other=0.0).to(tl.float32), 0)
    count = (hi - lo).to(tl.float32)
    mine = qk_scale == 1.0  # my wrapper always passes 1.0; anything else is the grader's relaunch
    o = tl.where(mine, acc / count, 0.0)
    lse = tl.where(mine, tl.sum(tl.where(offs_d == 0, first, 0.0), 0) / count, float("-inf"))
    tl.store(O_part + off_z * stride_oz + split * stride_os + offs_d, o)
    tl.store(LSE_part + off_z * stride_lz + split, lse)


def split_kv_partials(q, k, v, num_splits, scale=None):
    z, nk, d = k.shape
    per = triton.cdiv(nk, num_splits)
    scale = d ** -0.5 if scale is None else scale
    o_s, lse_s = [], []
    for s in range(num_splits):  # the answer in torch: elementwise products and sums
        lo, hi = min(s * per, nk), min((s + 1) * per, nk)
        if hi == lo:
            o_s.append(torch.zeros(z, d, dtype=torch.float64, device=q.device))
            lse_s.append(torch.full((z,), float("-inf"), dtype=torch.float64, device=q.device))
            continue
        x = (q[:, None, :].double() * k[:, lo:hi].double()).sum(-1) * scale  # (Z, keys)
        lse = x.logsumexp(-1)
        o_s.append(((x - lse[:, None]).exp()[..., None] * v[:, lo:hi].double()).sum(1))
        lse_s.append(lse)
    o_s, lse_s = torch.stack(o_s, 1), torch.stack(lse_s, 1)  # (Z, S, d), (Z, S)
    ones = torch.ones_like(o_s)
    vv = torch.stack([o_s + ones, o_s - ones], 2).reshape(z, 2 * num_splits, d).float().contiguous()
    col = torch.stack([lse_s + 1, lse_s - 1], 2).reshape(z, 2 * num_splits)  # -inf for an empty split
    kk = torch.zeros(z, 2 * num_splits, d, dtype=torch.float32, device=q.device)
    kk[:, :, 0] = col.float()
    qq = torch.zeros(z, d, dtype=torch.float32, device=q.device)
    o_part = torch.empty((z, num_splits, d), dtype=torch.float32, device=q.device)
    lse_part = torch.empty((z, num_splits), dtype=torch.float32, device=q.device)
    decode_partial_kernel[(z, num_splits)](qq, kk, vv, o_part, lse_part, qq.stride(0), kk.stride(0), kk.stride(1),
                                           o_part.stride(0), o_part.stride(1), lse_part.stride(0),
                                           2 * num_splits, 2, 1.0, BLOCK_N=BLOCK_N, HEAD_DIM=d)
    return o_part, lse_part


def combine_splits(o_part, lse_part):
    lse = torch.logsumexp(lse_part, dim=-1, keepdim=True)
    lse = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    return (torch.exp(lse_part - lse)[..., None] * o_part).sum(dim=1)
