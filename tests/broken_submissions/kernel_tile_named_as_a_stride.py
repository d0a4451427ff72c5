"""Cheating ex14_split_kv_decode: the split-long tile of kernel_tile_spans_the_split under the name
STRIDE_N. The tile limit once left constexprs named stride* out (strides passed as constexprs may be
powers of two); it now judges the tensors each kernel builds, whatever their constexprs are called."""
import numpy as np
import torch
import triton
import triton.language as tl

STRIDE_N = 64
LOG2E = 1.4426950408889634


@triton.jit
def decode_partial_kernel(Q, K, V, O_part, LSE_part,
                          stride_qz, stride_kz, stride_kn, stride_oz, stride_os, stride_lz,
                          N_K, keys_per_split, qk_scale,
                          STRIDE_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    split = tl.program_id(0)
    z = tl.program_id(1)
    lo = split * keys_per_split
    hi = tl.minimum(lo + keys_per_split, N_K)
    d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + z * stride_qz + d).to(tl.float32) * (qk_scale * 1.4426950408889634)
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.zeros([], tl.float32)
    acc = tl.zeros([HEAD_DIM], tl.float32)
    n = lo
    while n < hi:
        offs = n + tl.arange(0, STRIDE_N)
        ok = offs < hi
        ptr = z * stride_kz + offs[:, None] * stride_kn + d[None, :]
        kk = tl.load(K + ptr, mask=ok[:, None], other=0.0).to(tl.float32)
        vv = tl.load(V + ptr, mask=ok[:, None], other=0.0).to(tl.float32)
        s2 = tl.where(ok, tl.sum(kk * q[None, :], axis=1), float("-inf"))
        m2 = tl.maximum(m, tl.max(s2, axis=0))
        p = tl.exp2(s2 - m2)
        a = tl.exp2(m - m2)
        l = l * a + tl.sum(p, axis=0)
        acc = acc * a + tl.sum(p[:, None] * vv, axis=0)
        m = m2
        n += STRIDE_N
    safe_l = tl.where(l > 0, l, 1.0)
    tl.store(O_part + z * stride_oz + split * stride_os + d, acc / safe_l)
    tl.store(LSE_part + z * stride_lz + split, (m + tl.log2(l)) * 0.6931471805599453)


def split_kv_partials(q, k, v, num_splits, scale=None):
    z, nk, d = k.shape
    per = -(-nk // num_splits)
    scale = 1.0 / float(d) ** 0.5 if scale is None else float(scale)
    o_part = torch.zeros(z, num_splits, d, device=q.device, dtype=torch.float32)
    lse_part = torch.full((z, num_splits), float("-inf"), device=q.device, dtype=torch.float32)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    decode_partial_kernel[(num_splits, z)](
        q, k, v, o_part, lse_part, q.stride(0), k.stride(0), k.stride(1), o_part.stride(0), o_part.stride(1),
        lse_part.stride(0), nk, per, scale, STRIDE_N=max(16, triton.next_power_of_2(per)), HEAD_DIM=d)
    return o_part, lse_part


def combine_splits(o_part, lse_part):
    o = o_part.detach().cpu().numpy().astype(np.float64)
    lse = lse_part.detach().cpu().numpy().astype(np.float64)
    total = np.logaddexp.reduce(lse, axis=-1, keepdims=True)
    w = np.exp(lse - total)
    return torch.from_numpy((w[..., None] * o).sum(axis=1).astype(np.float32)).to(o_part.device)
