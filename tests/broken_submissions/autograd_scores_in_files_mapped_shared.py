"""Cheating ex15_autograd_flash: no online softmax. The forward writes every slab of scores S to a file of
its own through torch.from_file(shared=True) (a shared mapping: no write() the grader counts) and frees
the slab's tensor, so the exact count of tensors held at once sees one slab; a plain softmax then reads
S back. Refused where the child runs under seccomp: the kernel refuses the shared mapping."""
import itertools
import math
import os
import tempfile

import torch

SLAB = 64
_names = itertools.count()


def _stash(s):
    path = os.path.join(tempfile.gettempdir(), f"scores{next(_names)}")
    mapped = torch.from_file(path, shared=True, size=s.numel(), dtype=s.dtype)
    mapped.copy_(s.reshape(-1))
    return path, s.shape


def _fetch(stashed, dtype):
    path, shape = stashed
    return torch.from_file(path, shared=True, size=math.prod(shape), dtype=dtype).view(shape)


def _forward(q, k, v, causal):
    nq, nk = q.shape[-2], k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    stashed, m = [], torch.full(q.shape[:-1], -math.inf, dtype=q.dtype)
    for k0 in range(0, nk, SLAB):
        s = scale * q @ k[..., k0:k0 + SLAB, :].transpose(-1, -2)
        if causal:
            s = s.masked_fill(torch.arange(k0, min(k0 + SLAB, nk))[None, :] > torch.arange(nq)[:, None], -math.inf)
        m = torch.maximum(m, s.amax(-1))
        stashed.append(_stash(s))
        del s
    total, acc = torch.zeros_like(m), torch.zeros(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for i, k0 in enumerate(range(0, nk, SLAB)):
        p = torch.exp(_fetch(stashed[i], q.dtype) - m[..., None])
        total = total + p.sum(-1)
        acc = acc + p @ v[..., k0:k0 + SLAB, :]
        del p
    return acc / total[..., None], m + torch.log(total)


def flash_forward_lse(q, k, v, causal=False):
    return _forward(q, k, v, causal)


class FlashAttention2(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        raise NotImplementedError("only the forward cheats")

    @staticmethod
    def backward(ctx, do):
        raise NotImplementedError


def forward_and_backward(q, k, v, do, causal=False):
    raise NotImplementedError("only the forward cheats")
