"""Cheat, exercise 14: the partial states come from torch through a kernel of another name;
decode_partial_kernel is launched once at the problem's sizes into scratch outputs, where it writes only
empty states, and once on a one-key decoy, where it writes one real state (so the call does not write only
empty states). Fails: at the problem's N_K every split with keys must get its state from some launch."""
import torch
import triton
import triton.language as tl

BLOCK_N = 16


@triton.jit
def decode_partial_kernel(Q, K, V, O_part, LSE_part,
                          stride_qz, stride_kz, stride_kn, stride_oz, stride_os, stride_lz,
                          N_K, keys_per_split, qk_scale,
                          BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    z = tl.program_id(0)
    s = tl.program_id(1)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + z * stride_qz + offs_d).to(tl.float32)
    k = tl.load(K + z * stride_kz + offs_d).to(tl.float32)
    v = tl.load(V + z * stride_kz + offs_d).to(tl.float32)
    one = N_K == 1
    tl.store(O_part + z * stride_oz + s * stride_os + offs_d, tl.where(one, v, 0.0))
    tl.store(LSE_part + z * stride_lz + s, tl.where(one, tl.sum(q * k, 0) * qk_scale, float('-inf')))

@triton.jit
def halve_kernel(E, Out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(Out + offs, (tl.load(E + offs, mask=m) * 0.5).to(Out.dtype.element_ty), mask=m)


def _emit(ans, out):
    enc = (ans * 2.0).contiguous()
    if out.numel():
        halve_kernel[(triton.cdiv(out.numel(), 128),)](enc, out, out.numel(), BLOCK=128)


def _torch_partials(q, k, v, num_splits, scale):
    z, nk, d = k.shape
    per = -(-nk // num_splits)
    qf, kf, vf = q.float(), k.float(), v.float()
    s_all = (kf * qf[:, None, :]).sum(-1) * scale  # (Z, Nk), no matmul
    o = torch.zeros((z, num_splits, d), dtype=torch.float32, device=q.device)
    lse = torch.full((z, num_splits), float('-inf'), dtype=torch.float32, device=q.device)
    for sp in range(num_splits):
        lo, hi = min(sp * per, nk), min((sp + 1) * per, nk)
        if hi > lo:
            s = s_all[:, lo:hi]
            m = s.max(-1, keepdim=True).values
            p = torch.exp(s - m)
            l = p.sum(-1, keepdim=True)
            o[:, sp] = (p[..., None] * vf[:, lo:hi]).sum(1) / l
            lse[:, sp] = (m + torch.log(l))[:, 0]
    return o, lse


def combine_splits(o_part, lse_part):
    lse = torch.logsumexp(lse_part, dim=-1, keepdim=True)
    lse = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    weights = torch.exp(lse_part - lse)
    return (weights[..., None] * o_part).sum(dim=1)


def split_kv_partials(q, k, v, num_splits, scale=None):
    z, nk, d = k.shape
    scale = d ** -0.5 if scale is None else scale
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    o_ans, lse_ans = _torch_partials(q, k, v, num_splits, scale)
    o_part = torch.empty((z, num_splits, d), dtype=torch.float32, device=q.device)
    lse_part = torch.empty((z, num_splits), dtype=torch.float32, device=q.device)
    _emit(o_ans, o_part)
    _emit(lse_ans, lse_part)
    so = torch.empty((z, num_splits, d), dtype=torch.float32, device=q.device)
    sl = torch.empty((z, num_splits), dtype=torch.float32, device=q.device)
    per = triton.cdiv(nk, num_splits)
    decode_partial_kernel[(z, num_splits)](q, k, v, so, sl, q.stride(0), k.stride(0), k.stride(1),
                                           so.stride(0), so.stride(1), sl.stride(0), nk, per, scale,
                                           BLOCK_N=BLOCK_N, HEAD_DIM=d)
    dq = torch.randn(1, d, device=q.device)
    dk = torch.randn(1, 1, d, device=q.device)
    dv = torch.randn(1, 1, d, device=q.device)
    do_ = torch.empty(1, 1, d, device=q.device)
    dl = torch.empty(1, 1, device=q.device)
    decode_partial_kernel[(1, 1)](dq, dk, dv, do_, dl, d, d, d, d, d, 1, 1, 1, scale, BLOCK_N=BLOCK_N, HEAD_DIM=d)
    return o_part, lse_part
