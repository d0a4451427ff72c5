"""Exercise 14 written differently: the wrapper allocates O_part with torch.zeros and LSE_part with torch.full(-inf) (the
empty state); every program runs, and its stores are masked with `nonempty = hi > lo`, so an empty
split keeps the state the wrapper allocated. BLOCK_N = 32."""
import torch
import triton
import triton.language as tl

BLOCK_N = 32


@triton.jit
def decode_partial_kernel(Q, K, V, O_part, LSE_part,
                          stride_qz, stride_kz, stride_kn, stride_oz, stride_os, stride_lz,
                          N_K, keys_per_split, qk_scale,
                          BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    zz = tl.program_id(0)
    ss = tl.program_id(1)
    lo = ss * keys_per_split
    hi = tl.minimum(lo + keys_per_split, N_K)
    nonempty = hi > lo
    dims = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + zz * stride_qz + dims).to(tl.float32) * qk_scale
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.full([], 0.0, tl.float32)
    acc = tl.zeros([HEAD_DIM], tl.float32)
    for j in range(lo, hi, BLOCK_N):
        keys = j + tl.arange(0, BLOCK_N)
        ok = keys < hi
        off = zz * stride_kz + keys[:, None] * stride_kn + dims[None, :]
        kb = tl.load(K + off, mask=ok[:, None], other=0.0).to(tl.float32)
        vb = tl.load(V + off, mask=ok[:, None], other=0.0).to(tl.float32)
        s = tl.where(ok, tl.sum(kb * q[None, :], 1), float("-inf"))
        m2 = tl.maximum(m, tl.max(s, 0))
        e = tl.exp(s - m2)
        r = tl.exp(m - m2)
        l = l * r + tl.sum(e, 0)
        acc = acc * r + tl.sum(e[:, None] * vb, 0)
        m = m2
    l_safe = tl.where(nonempty, l, 1.0)
    tl.store(O_part + zz * stride_oz + ss * stride_os + dims, acc / l_safe, mask=nonempty & (dims < HEAD_DIM))
    tl.store(LSE_part + zz * stride_lz + ss, m + tl.log(l_safe), mask=nonempty)


def split_kv_partials(q, k, v, num_splits, scale=None):
    Z, Nk, d = k.shape
    if scale is None:
        scale = d ** -0.5
    per = triton.cdiv(Nk, num_splits)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o_part = torch.zeros(Z, num_splits, d, dtype=torch.float32, device=q.device)
    lse_part = torch.full((Z, num_splits), float("-inf"), dtype=torch.float32, device=q.device)
    decode_partial_kernel[(Z, num_splits)](q, k, v, o_part, lse_part, q.stride(0), k.stride(0), k.stride(1),
                                           o_part.stride(0), o_part.stride(1), lse_part.stride(0),
                                           Nk, per, scale, BLOCK_N=BLOCK_N, HEAD_DIM=d)
    return o_part, lse_part


def combine_splits(o_part, lse_part):
    top = lse_part.max(dim=1, keepdim=True).values
    top = torch.nan_to_num(top, neginf=0.0)
    w = torch.exp(lse_part - top)
    tot = w.sum(dim=1, keepdim=True)
    o = (w[:, :, None] * o_part).sum(dim=1)
    return o / torch.clamp(tot, min=torch.finfo(tot.dtype).tiny)
