"""Cheating ex14_split_kv_decode: the wrapper computes every split's state in torch and passes it disguised
as (x + 1, x - 1) pairs in extra tensors; the kernel averages them back into two extra output tensors,
which the wrapper returns, and writes the empty state (o = 0, lse = -inf) into O_part and LSE_part. The
relaunch writes only empty states where the case's sequences have keys: refused."""
import torch
import triton
import triton.language as tl

BLOCK_N = 16


@triton.jit
def decode_partial_kernel(Q, K, V, O_part, LSE_part,
                          stride_qz, stride_kz, stride_kn, stride_oz, stride_os, stride_lz,
                          N_K, keys_per_split, qk_scale,
                          A_o, A_l, O_res, L_res, S,
                          BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    off_z = tl.program_id(0)
    split = tl.program_id(1)
    offs_d = tl.arange(0, HEAD_DIM)
    slot = off_z * S + split  # A_o: (Z, 2S, d) pairs averaged back; A_l: (Z, 2S) likewise
    a = tl.load(A_o + (2 * slot) * HEAD_DIM + offs_d) + tl.load(A_o + (2 * slot + 1) * HEAD_DIM + offs_d)
    b = tl.load(A_l + 2 * slot) + tl.load(A_l + 2 * slot + 1)
    tl.store(O_res + slot * HEAD_DIM + offs_d, a * 0.5)
    tl.store(L_res + slot, b * 0.5)
    tl.store(O_part + off_z * stride_oz + split * stride_os + offs_d, tl.zeros([HEAD_DIM], tl.float32))
    tl.store(LSE_part + off_z * stride_lz + split, float("-inf"))


def _states(q, k, v, num_splits, scale):
    z, nk, d = k.shape
    per = triton.cdiv(nk, num_splits)
    o_s, lse_s = [], []
    for s in range(num_splits):
        lo, hi = min(s * per, nk), min((s + 1) * per, nk)
        if hi == lo:
            o_s.append(torch.zeros(z, d, dtype=torch.float64, device=q.device))
            lse_s.append(torch.full((z,), float("-inf"), dtype=torch.float64, device=q.device))
            continue
        x = (q[:, None, :].double() * k[:, lo:hi].double()).sum(-1) * scale
        lse = x.logsumexp(-1)
        o_s.append(((x - lse[:, None]).exp()[..., None] * v[:, lo:hi].double()).sum(1))
        lse_s.append(lse)
    return torch.stack(o_s, 1).float().contiguous(), torch.stack(lse_s, 1).float().contiguous()


def split_kv_partials(q, k, v, num_splits, scale=None):
    z, nk, d = k.shape
    per = triton.cdiv(nk, num_splits)
    scale = d ** -0.5 if scale is None else scale
    o_s, lse_s = _states(q, k, v, num_splits, scale)
    ones = torch.ones_like(o_s)
    a_o = torch.stack([o_s + ones, o_s - ones], 2).reshape(z, 2 * num_splits, d).contiguous()
    a_l = torch.stack([lse_s + 1, lse_s - 1], 2).reshape(z, 2 * num_splits).contiguous()
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o_part = torch.empty((z, num_splits, d), dtype=torch.float32, device=q.device)
    lse_part = torch.empty((z, num_splits), dtype=torch.float32, device=q.device)
    o_res = torch.empty((z, num_splits, d), dtype=torch.float32, device=q.device)
    l_res = torch.empty((z, num_splits), dtype=torch.float32, device=q.device)
    decode_partial_kernel[(z, num_splits)](q, k, v, o_part, lse_part, q.stride(0), k.stride(0), k.stride(1),
                                           o_part.stride(0), o_part.stride(1), lse_part.stride(0),
                                           nk, per, scale, a_o, a_l, o_res, l_res, num_splits,
                                           BLOCK_N=BLOCK_N, HEAD_DIM=d)
    return o_res, l_res


def combine_splits(o_part, lse_part):
    lse = torch.logsumexp(lse_part, dim=-1, keepdim=True)
    lse = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    return (torch.exp(lse_part - lse)[..., None] * o_part).sum(dim=1)
