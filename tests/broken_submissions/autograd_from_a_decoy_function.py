"""Cheating ex15_autograd_flash: gradients by torch autograd of a naive attention, started at a decoy
autograd.Function also named FlashAttention2; the real FlashAttention2.backward returns them."""
import math
import torch

ROWS = 1


def flash_forward_lse(q, k, v, causal=False):
    nq, d = q.shape[-2:]
    nk = k.shape[-2]
    scale = 1.0 / math.sqrt(d)
    o = torch.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype)
    for r0 in range(0, nq, ROWS):          # whole rows of S: no key tiles, no online softmax
        r1 = min(r0 + ROWS, nq)
        s = scale * q[..., r0:r1, :] @ k.transpose(-1, -2)
        if causal:
            s = s.masked_fill(torch.arange(nk)[None, :] > torch.arange(r0, r1)[:, None], -math.inf)
        m = s.amax(-1, keepdim=True)
        p = torch.exp(s - m)
        l = p.sum(-1, keepdim=True)
        o[..., r0:r1, :] = (p @ v) / l
        lse[..., r0:r1] = (m + torch.log(l))[..., 0]
    return o, lse


def _decoy():
    class FlashAttention2(torch.autograd.Function):   # same __name__: grad_fn type is FlashAttention2Backward
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, g):
            return g
    return FlashAttention2


_Decoy = _decoy()
_STASH = []


def _naive_rows(q, k, v, causal, r0, r1):
    nk, d = k.shape[-2], q.shape[-1]
    s = (1.0 / math.sqrt(d)) * q @ k.transpose(-1, -2)
    if causal:
        s = s.masked_fill(torch.arange(nk)[None, :] > torch.arange(r0, r1)[:, None], -math.inf)
    m = s.amax(-1, keepdim=True).detach()
    p = torch.exp(s - m)
    return (p @ v) / p.sum(-1, keepdim=True)


def _autograd_grads(q, k, v, do, causal):
    kk = k.detach().clone().requires_grad_(True)
    vv = v.detach().clone().requires_grad_(True)
    dq = torch.empty_like(q)
    nq = q.shape[-2]
    for r0 in range(0, nq, ROWS):
        r1 = min(r0 + ROWS, nq)
        qb = q[..., r0:r1, :].detach().clone().requires_grad_(True)
        out = _Decoy.apply(_naive_rows(qb, kk, vv, causal, r0, r1))
        out.backward(do[..., r0:r1, :])        # torch autograd does the backward
        dq[..., r0:r1, :] = qb.grad
    return dq, kk.grad, vv.grad


class FlashAttention2(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        o, _ = flash_forward_lse(q, k, v, causal)
        return o

    @staticmethod
    def backward(ctx, do):
        dq, dk, dv = _STASH.pop()
        return dq, dk, dv, None


def forward_and_backward(q, k, v, do, causal=False):
    _STASH.append(_autograd_grads(q, k, v, do, causal))
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    o = FlashAttention2.apply(q, k, v, causal)
    o.backward(do)
    return o.detach(), q.grad, k.grad, v.grad
