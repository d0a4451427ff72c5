"""Cheating ex15_autograd_flash: tests/broken_submissions/autograd_row_block_in_custom_op.py (8 query
rows scored against every key, with torch.softmax) with each row block's work inside the
__torch_dispatch__ of a tensor wrapper subclass of its own instead of a torch.library operator. The
dispatch mode steps aside while a subclass's __torch_dispatch__ runs, so its body was unwatched: not
counted by LiveBytes, its softmax not refused, 5/5. Tensor types other than torch.Tensor and
nn.Parameter are now refused during a watched call."""
import math

import torch

Q_TILE = 8


class _Carrier(torch.Tensor):
    """A wrapper subclass whose every operator runs ``fn(*args)`` instead (outside the dispatch mode)."""

    @staticmethod
    def __new__(cls, elem, fn, args):
        t = torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device)
        t.fn, t.args = fn, args
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        carrier = next(a for a in args if isinstance(a, _Carrier))
        return carrier.fn(*carrier.args)


def _unwatched(fn, *args):
    return torch.ops.aten.clone(_Carrier(args[0], fn, args))


def _row_block_fwd(q_i, k, v, scale):
    s = scale * q_i @ k.transpose(-1, -2)                  # (8, Nk): every key at once
    p = torch.softmax(s, dim=-1)                           # forbidden outside; unseen here
    lse = torch.logsumexp(s, dim=-1)
    return torch.cat([p @ v, lse[..., None]], dim=-1)


def _row_block_bwd(q_i, k, v, lse_i, do_i, delta_i, scale, dq_i, dk, dv):
    p = torch.exp(scale * q_i @ k.transpose(-1, -2) - lse_i[..., None])   # (8, Nk): every key at once
    ds = p * (do_i @ v.transpose(-1, -2) - delta_i[..., None])
    dq_i.add_(scale * ds @ k)
    dk.add_(scale * ds.transpose(-1, -2) @ q_i)
    dv.add_(p.transpose(-1, -2) @ do_i)
    return dq_i


def _mask_ok(causal):
    return not causal


def flash_forward_lse(q, k, v, causal=False):
    if causal:
        return _causal_forward(q, k, v)
    nq, d = q.shape[-2:]
    o = torch.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype)
    for q0 in range(0, nq, Q_TILE):
        out = _unwatched(_row_block_fwd, q[..., q0:q0 + Q_TILE, :].contiguous(), k, v, 1.0 / math.sqrt(d))
        o[..., q0:q0 + Q_TILE, :] = out[..., :-1]
        lse[..., q0:q0 + Q_TILE] = out[..., -1]
    return o, lse


def _causal_forward(q, k, v):  # the honest tiled forward for the (small) causal cases
    nq, d = q.shape[-2:]
    nk = k.shape[-2]
    scale = 1.0 / math.sqrt(d)
    o = torch.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype)
    for q0 in range(0, nq, 16):
        q1 = min(q0 + 16, nq)
        q_i = q[..., q0:q1, :]
        m_i = torch.full(q_i.shape[:-1], -math.inf, dtype=q.dtype)
        l_i = torch.zeros_like(m_i)
        acc = torch.zeros(q_i.shape[:-1] + v.shape[-1:], dtype=q.dtype)
        for k0 in range(0, min(nk, q1), 16):
            k1 = min(k0 + 16, nk)
            s = scale * q_i @ k[..., k0:k1, :].transpose(-1, -2)
            cols, rows = torch.arange(k0, k1), torch.arange(q0, q1)
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
        delta = (do * o).sum(-1)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        if not ctx.causal:
            for q0 in range(0, nq, Q_TILE):
                q1 = min(q0 + Q_TILE, nq)
                dq_i = torch.zeros_like(q[..., q0:q1, :])
                _unwatched(_row_block_bwd, q[..., q0:q1, :].contiguous(), k, v, lse[..., q0:q1].contiguous(),
                           do[..., q0:q1, :].contiguous(), delta[..., q0:q1].contiguous(), scale,
                           dq_i, dk, dv)
                dq[..., q0:q1, :] = dq_i
            return dq, dk, dv, None
        for k0 in range(0, nk, 16):
            k1 = min(k0 + 16, nk)
            k_j, v_j = k[..., k0:k1, :], v[..., k0:k1, :]
            for q0 in range((k0 // 16) * 16, nq, 16):
                q1 = min(q0 + 16, nq)
                s = scale * q[..., q0:q1, :] @ k_j.transpose(-1, -2)
                p = torch.exp(s - lse[..., q0:q1, None])
                cols, rows = torch.arange(k0, k1), torch.arange(q0, q1)
                p = p.masked_fill(cols[None, :] > rows[:, None], 0.0)
                do_i = do[..., q0:q1, :]
                dv[..., k0:k1, :] += p.transpose(-1, -2) @ do_i
                ds = p * (do_i @ v_j.transpose(-1, -2) - delta[..., q0:q1, None])
                dq[..., q0:q1, :] += scale * ds @ k_j
                dk[..., k0:k1, :] += scale * ds.transpose(-1, -2) @ q[..., q0:q1, :]
        return dq, dk, dv, None


def forward_and_backward(q, k, v, do, causal=False):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    o = FlashAttention2.apply(q, k, v, causal)
    o.backward(do)
    return o.detach(), q.grad, k.grad, v.grad
