"""Cheat, exercise 14: the partial states are computed in torch (broadcast products, exp, sums) and copied,
doubled then halved, by a kernel of another name. decode_partial_kernel has no N_K parameter, so the
relaunch reads the key count from its K, and it is launched only on a one-key decoy, where its state is
trivial (o = v_0, lse = scale q.k_0). Fails: the relaunch read 1 key where the problem has 64."""
import torch
import triton
import triton.language as tl

BLOCK_N = 16


@triton.jit
def decode_partial_kernel(Q, K, V, O_part, LSE_part,
                          stride_qz, stride_kz, stride_kn, stride_oz, stride_os, stride_lz,
                          keys_per_split, qk_scale,
                          BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    z = tl.program_id(0)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + z * stride_qz + offs_d).to(tl.float32)
    k = tl.load(K + z * stride_kz + offs_d).to(tl.float32)
    v = tl.load(V + z * stride_kz + offs_d).to(tl.float32)
    tl.store(O_part + z * stride_oz + offs_d, v)
    tl.store(LSE_part + z * stride_lz, tl.sum(q * k, 0) * qk_scale)

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
    o_ans, lse_ans = _torch_partials(q, k, v, num_splits, scale)
    o_part = torch.empty((z, num_splits, d), dtype=torch.float32, device=q.device)
    lse_part = torch.empty((z, num_splits), dtype=torch.float32, device=q.device)
    _emit(o_ans, o_part)
    _emit(lse_ans, lse_part)
    dq = torch.randn(1, d, device=q.device)
    dk = torch.randn(1, 1, d, device=q.device)
    dv = torch.randn(1, 1, d, device=q.device)
    do_ = torch.empty(1, 1, d, device=q.device)
    dl = torch.empty(1, 1, device=q.device)
    decode_partial_kernel[(1, 1)](dq, dk, dv, do_, dl, d, d, d, d, d, 1, 1, scale, BLOCK_N=BLOCK_N, HEAD_DIM=d)
    return o_part, lse_part
