"""Broken ex15_autograd_flash: reads q, k, v and dO through repr() (torch prints with the grader's watch
popped), then computes row blocks against every key in NumPy and hands the results back with
torch.from_numpy."""
import math
import re

import numpy as np
import torch

Q_TILE = 16
K_TILE = 16
_NUM = re.compile(r"[-+]?(?:\d+\.\d*|\d+)(?:e[-+]?\d+)?|[-+]?inf|nan")


def _np(t):
    """The values of tensor t as a NumPy array, read through its printed form."""
    torch.set_printoptions(precision=17, threshold=10**9, linewidth=10**9, sci_mode=True)
    t = t.detach()
    shape, dtype = tuple(t.shape), np.float64 if t.dtype == torch.float64 else np.float32
    flat = t.reshape(-1, shape[-1]) if len(shape) > 1 else t.reshape(1, -1)
    rows = []
    for i in range(0, flat.shape[0], 512):
        text = repr(flat[i:i + 512])
        text = text[: text.rfind("]") + 1]
        rows.append(np.array([float(x) for x in _NUM.findall(text)], dtype=np.float64))
    return np.concatenate(rows).astype(dtype).reshape(shape)


def _fwd(q, k, v, causal):
    nq, d = q.shape[-2:]
    scale = 1.0 / math.sqrt(d)
    o = np.empty(q.shape[:-1] + v.shape[-1:], q.dtype)
    lse = np.empty(q.shape[:-1], q.dtype)
    for r in range(0, nq, 8):
        s = scale * q[..., r:r + 8, :] @ np.swapaxes(k, -1, -2)
        if causal:
            s = np.where(np.arange(k.shape[-2])[None, :] <= np.arange(r, min(r + 8, nq))[:, None], s, -np.inf)
        m = s.max(-1, keepdims=True)
        p = np.exp(s - m)
        l = p.sum(-1, keepdims=True)
        o[..., r:r + 8, :] = (p / l) @ v
        lse[..., r:r + 8] = (m + np.log(l))[..., 0]
    return o, lse


def flash_forward_lse(q, k, v, causal=False):
    o, lse = _fwd(_np(q), _np(k), _np(v), causal)
    return torch.from_numpy(o).to(q.dtype).clone(), torch.from_numpy(lse).to(q.dtype).clone()


class FlashAttention2(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        o, lse = flash_forward_lse(q, k, v, causal)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.causal = causal
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = (_np(t) for t in ctx.saved_tensors)
        dO = _np(do)
        nq, d = q.shape[-2:]
        scale = 1.0 / math.sqrt(d)
        D = (dO * o).sum(-1)
        dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
        for r in range(0, nq, 8):
            s = scale * q[..., r:r + 8, :] @ np.swapaxes(k, -1, -2)
            p = np.exp(s - lse[..., r:r + 8, None])
            if ctx.causal:
                p = np.where(np.arange(k.shape[-2])[None, :] <= np.arange(r, min(r + 8, nq))[:, None], p, 0.0)
            do_i = dO[..., r:r + 8, :]
            dv += np.swapaxes(p, -1, -2) @ do_i
            ds = p * (do_i @ np.swapaxes(v, -1, -2) - D[..., r:r + 8, None])
            dq[..., r:r + 8, :] = scale * ds @ k
            dk += scale * np.swapaxes(ds, -1, -2) @ q[..., r:r + 8, :]
        t = ctx.saved_tensors[0]
        return (torch.from_numpy(dq).to(t.dtype).clone(), torch.from_numpy(dk).to(t.dtype).clone(),
                torch.from_numpy(dv).to(t.dtype).clone(), None)


def forward_and_backward(q, k, v, do, causal=False):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    o = FlashAttention2.apply(q, k, v, causal)
    o.backward(do)
    return o.detach(), q.grad, k.grad, v.grad
