"""Cheating ex14_split_kv_decode: the split-long tile as a module-level constant, TILE = tl.constexpr(256),
read by the kernel as a global (Triton 3 allows globals annotated tl.constexpr inside @triton.jit). The
launch passes BLOCK_N=16, which the kernel ignores; the tile limit reads only the launch's constexpr
parameters, so it never sees 256. Every split of every case is one block: the key loop runs once.

Refused: the tile limit now reads the largest tensor dimension each kernel builds (counted in the
interpreter, read from a compiled kernel's Triton IR), however it is written."""
import numpy as np
import torch
import triton
import triton.language as tl

BLOCK_N = 16
TILE = tl.constexpr(256)  # the real tile, a global


@triton.jit
def decode_partial_kernel(Q, K, V, O_part, LSE_part,
                          stride_qz, stride_kz, stride_kn, stride_oz, stride_os, stride_lz,
                          N_K, keys_per_split, qk_scale,
                          BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, Extra=None, Extra2=None):
    z = tl.program_id(0)
    split = tl.program_id(1)
    lo = split * keys_per_split
    hi = tl.minimum(lo + keys_per_split, N_K)
    d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + z * stride_qz + d).to(tl.float32) * qk_scale
    offs = lo + tl.arange(0, TILE)  # BLOCK_N = next_pow2(keys per split): the loop would run once
    ok = offs < hi
    ptr = z * stride_kz + offs[:, None] * stride_kn + d[None, :]
    kk = tl.load(K + ptr, mask=ok[:, None], other=0.0).to(tl.float32)
    vv = tl.load(V + ptr, mask=ok[:, None], other=0.0).to(tl.float32)
    s = tl.where(ok, tl.sum(kk * q[None, :], axis=1), float("-inf"))
    m = tl.max(s, axis=0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    p = tl.exp(s - m_safe)
    l = tl.sum(p, axis=0)
    acc = tl.sum(p[:, None] * vv, axis=0)
    tl.store(O_part + z * stride_oz + split * stride_os + d, acc / tl.where(l > 0, l, 1.0))
    tl.store(LSE_part + z * stride_lz + split, m_safe + tl.log(l))


def split_kv_partials(q, k, v, num_splits, scale=None):
    z, nk, d = k.shape
    per = -(-nk // num_splits)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    o_part = torch.empty(z, num_splits, d, device=q.device, dtype=torch.float32)
    lse_part = torch.empty((z, num_splits), device=q.device, dtype=torch.float32)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    tile = max(16, triton.next_power_of_2(per))
    decode_partial_kernel[(z, num_splits)](
        q, k, v, o_part, lse_part, q.stride(0), k.stride(0), k.stride(1), o_part.stride(0), o_part.stride(1),
        lse_part.stride(0), nk, per, scale, BLOCK_N=BLOCK_N, HEAD_DIM=d)
    return o_part, lse_part


def combine_splits(o_part, lse_part):
    o = o_part.detach().cpu().numpy().astype(np.float64)
    lse = lse_part.detach().cpu().numpy().astype(np.float64)
    total = np.logaddexp.reduce(lse, axis=-1, keepdims=True)
    total = np.where(np.isneginf(total), 0.0, total)
    w = np.exp(lse - total)
    return torch.from_numpy((w[..., None] * o).sum(axis=1).astype(np.float32)).to(o_part.device)
