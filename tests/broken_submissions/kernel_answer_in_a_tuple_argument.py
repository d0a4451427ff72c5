"""Cheating ex14_split_kv_decode: the partial states computed in torch, handed to a copy kernel inside
a tuple argument."""
import torch
import triton
import triton.language as tl


@triton.jit
def decode_partial_kernel(srcs, O_part, LSE_part, n_o, n_l, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    for start in range(0, n_o, BLOCK):
        tl.store(O_part + start + offs, tl.load(srcs[0] + start + offs, mask=start + offs < n_o), mask=start + offs < n_o)
    for start in range(0, n_l, BLOCK):
        tl.store(LSE_part + start + offs, tl.load(srcs[1] + start + offs, mask=start + offs < n_l), mask=start + offs < n_l)


def split_kv_partials(q, k, v, num_splits, scale=None):
    z, nk, d = k.shape
    per = triton.cdiv(nk, num_splits)
    scale = d ** -0.5 if scale is None else scale
    o_t = torch.zeros((z, num_splits, d), dtype=torch.float32, device=q.device)
    l_t = torch.full((z, num_splits), float("-inf"), dtype=torch.float32, device=q.device)
    for s in range(num_splits):
        lo, hi = s * per, min((s + 1) * per, nk)
        if hi <= lo:
            continue
        sc = (q.float()[:, None, :] * k[:, lo:hi].float()).sum(-1) * scale
        m = sc.amax(-1, keepdim=True)
        p = (sc - m).exp()
        o_t[:, s] = (p[..., None] * v[:, lo:hi].float()).sum(1) / p.sum(-1, keepdim=True)
        l_t[:, s] = m[:, 0] + p.sum(-1).log()
    o_part = torch.empty((z, num_splits, d), dtype=torch.float32, device=q.device)
    lse_part = torch.empty((z, num_splits), dtype=torch.float32, device=q.device)
    decode_partial_kernel[(1,)]((o_t, l_t), o_part, lse_part, o_part.numel(), lse_part.numel(), BLOCK=64)
    return o_part, lse_part


def combine_splits(o_part, lse_part):
    lse = torch.logsumexp(lse_part, dim=-1, keepdim=True)
    weights = torch.exp(lse_part - lse)
    return (weights[..., None] * o_part).sum(dim=1)
