"""Broken ex15_autograd_flash, an honest mistake the report names: backward recomputes P as exp(S - the
tile's own row max) with 32-key tiles, where the forward's lse belongs."""
import math

import torch

Q_TILE = 16  # query rows per tile (B_r in the paper)
K_TILE = 32  # key rows per tile (B_c)


def flash_forward_lse(q, k, v, causal=False):
    """(o, lse) of softmax(q k^T / sqrt(d)) v, one tile at a time; q: (..., Nq, d), k, v: (..., Nk, d)."""
    nq, d = q.shape[-2:]
    nk = k.shape[-2]
    scale = 1.0 / math.sqrt(d)
    o = torch.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype, device=q.device)
    for q0 in range(0, nq, Q_TILE):
        q1 = min(q0 + Q_TILE, nq)
        q_i = q[..., q0:q1, :]
        m_i = torch.full(q_i.shape[:-1], -math.inf, dtype=q.dtype, device=q.device)
        l_i = torch.zeros_like(m_i)
        acc = torch.zeros(q_i.shape[:-1] + v.shape[-1:], dtype=q.dtype, device=q.device)
        for k0 in range(0, min(nk, q1) if causal else nk, K_TILE):
            k1 = min(k0 + K_TILE, nk)
            s = scale * q_i @ k[..., k0:k1, :].transpose(-1, -2)  # (..., Bq, Bk)
            if causal:
                cols, rows = torch.arange(k0, k1, device=q.device), torch.arange(q0, q1, device=q.device)
                s = s.masked_fill(cols[None, :] > rows[:, None], -math.inf)
            m_new = torch.maximum(m_i, s.amax(-1))
            p = torch.exp(s - m_new[..., None])
            alpha = torch.exp(m_i - m_new)
            l_i = alpha * l_i + p.sum(-1)
            acc = alpha[..., None] * acc + p @ v[..., k0:k1, :]
            m_i = m_new
        o[..., q0:q1, :] = acc / l_i[..., None]
        lse[..., q0:q1] = m_i + torch.log(l_i)
    return o, lse


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
                p = torch.exp(s - s.amax(-1, keepdim=True))  # the mistake: the tile's row max, not lse
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
