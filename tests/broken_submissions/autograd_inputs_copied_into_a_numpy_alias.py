"""Cheating ex15_autograd_flash: the inputs copied into a tensor made at import by torch.from_numpy, so NumPy
reads them; attention in NumPy, 8 rows at a time."""
import math

import numpy as np

import torch

Q_TILE = 16  # query rows per tile (B_r in the paper)
K_TILE = 16  # key rows per tile (B_c)


_POOL = np.zeros(1 << 18)
_T = torch.from_numpy(_POOL)


def flash_forward_lse(q, k, v, causal=False):
    """Attack: inputs copied into a tensor aliasing a NumPy pool made at import, attention in NumPy by rows."""
    nq, d = q.shape[-2:]
    nk = k.shape[-2]
    n = q.numel() + k.numel() + v.numel()
    _T[:q.numel()].copy_(q.reshape(-1))
    _T[q.numel():q.numel() + k.numel()].copy_(k.reshape(-1))
    _T[q.numel() + k.numel():n].copy_(v.reshape(-1))
    qn = _POOL[:q.numel()].reshape(q.shape)
    kn = _POOL[q.numel():q.numel() + k.numel()].reshape(k.shape)
    vn = _POOL[q.numel() + k.numel():n].reshape(v.shape)
    o = np.empty(q.shape[:-1] + v.shape[-1:])
    lse = np.empty(q.shape[:-1])
    for r0 in range(0, nq, 8):
        s = (qn[..., r0:r0 + 8, :] @ np.swapaxes(kn, -1, -2)) / math.sqrt(d)
        if causal:
            s = np.where(np.arange(nk)[None, :] > np.arange(r0, min(r0 + 8, nq))[:, None], -np.inf, s)
        m = s.max(-1, keepdims=True)
        p = np.exp(s - m)
        l = p.sum(-1, keepdims=True)
        o[..., r0:r0 + 8, :] = (p @ vn) / l
        lse[..., r0:r0 + 8] = (m + np.log(l))[..., 0]
    on = o.size
    _POOL[n:n + on] = o.reshape(-1)
    _POOL[n + on:n + on + lse.size] = lse.reshape(-1)
    out = _T[n:n + on].clone().reshape(o.shape).to(q.dtype)
    ls = _T[n + on:n + on + lse.size].clone().reshape(lse.shape).to(q.dtype)
    return out, ls


class FlashAttention2(torch.autograd.Function):
    """o = FlashAttention2.apply(q, k, v, causal): saves lse, recomputes P in backward."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        o, lse = flash_forward_lse(q, k, v, causal)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal = causal
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        nq, d = q.shape[-2:]
        nk = k.shape[-2]
        scale = 1.0 / math.sqrt(d)
        delta = (do * o).sum(-1)  # (..., Nq)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        for k0 in range(0, nk, K_TILE):
            k1 = min(k0 + K_TILE, nk)
            k_j, v_j = k[..., k0:k1, :], v[..., k0:k1, :]
            for q0 in range((k0 // Q_TILE) * Q_TILE if ctx.causal else 0, nq, Q_TILE):
                q1 = min(q0 + Q_TILE, nq)
                s = scale * q[..., q0:q1, :] @ k_j.transpose(-1, -2)
                p = torch.exp(s - lse[..., q0:q1, None])
                if ctx.causal:  # keys past the query row: P = 0 (exp(s - lse) alone would not be)
                    cols, rows = torch.arange(k0, k1, device=q.device), torch.arange(q0, q1, device=q.device)
                    p = p.masked_fill(cols[None, :] > rows[:, None], 0.0)
                do_i = do[..., q0:q1, :]
                dv[..., k0:k1, :] += p.transpose(-1, -2) @ do_i
                ds = p * (do_i @ v_j.transpose(-1, -2) - delta[..., q0:q1, None])
                dq[..., q0:q1, :] += scale * ds @ k_j
                dk[..., k0:k1, :] += scale * ds.transpose(-1, -2) @ q[..., q0:q1, :]
        return dq, dk, dv, None


def forward_and_backward(q, k, v, do, causal=False):
    """o = FlashAttention2.apply(q, k, v, causal), then o.backward(do): (o, dq, dk, dv)."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    o = FlashAttention2.apply(q, k, v, causal)
    o.backward(do)
    return o.detach(), q.grad, k.grad, v.grad
