"""Cheating ex15_autograd_flash: a memoryview over the whole address space, made with ctypes at import
(where no call is watched); in the calls, tensors are located through Tensor._cdata (TensorImpl ->
StorageImpl -> data) and read with struct, no ctypes operation then; the attention is done in NumPy, 8
query rows against every key, and written back through the same memoryview. Refused at load: in a
torch_only exercise, ctypes operations that make raw memory readable are forbidden from the module's
load on."""
import ctypes
import math
import struct

import numpy as np
import torch

Q_TILE = 16
K_TILE = 16
_MV = memoryview((ctypes.c_char * (1 << 47)).from_address(0)).cast("B")  # import time: not watched


def _addr(t):
    impl = t._cdata
    storage = struct.unpack_from("<Q", _MV, impl + 16)[0]
    data = struct.unpack_from("<Q", _MV, storage + 16)[0]
    return data + t.storage_offset() * t.element_size()


def _np(t):
    t = t.contiguous()
    dt = {torch.float64: np.float64, torch.float32: np.float32}[t.dtype]
    return np.frombuffer(_MV, dtype=dt, count=t.numel(), offset=_addr(t)).reshape(t.shape).copy()


def _put(t, a):
    a = np.ascontiguousarray(a, dtype=t.dtype == torch.float64 and np.float64 or np.float32)
    start = _addr(t)
    _MV[start:start + a.nbytes] = a.tobytes()
    return t


def _rows(q, k, causal, r0, r1):
    s = q[..., r0:r1, :] @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if causal:
        s = np.where(np.arange(k.shape[-2])[None, :] > np.arange(r0, r1)[:, None], -np.inf, s)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - m)
    l = p.sum(-1, keepdims=True)
    return s, p / l, (m + np.log(l))[..., 0]


def flash_forward_lse(q, k, v, causal=False):
    Q, K, V = _np(q), _np(k), _np(v)
    O = np.empty(Q.shape[:-1] + V.shape[-1:]); L = np.empty(Q.shape[:-1])
    for r0 in range(0, Q.shape[-2], 8):
        r1 = min(r0 + 8, Q.shape[-2])
        _, p, lse = _rows(Q, K, causal, r0, r1)
        O[..., r0:r1, :] = p @ V
        L[..., r0:r1] = lse
    o = torch.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype)
    return _put(o, O), _put(lse, L)


class FlashAttention2(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        o, lse = flash_forward_lse(q, k, v, causal)
        ctx.save_for_backward(q, k, v, o)
        ctx.causal = causal
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o = ctx.saved_tensors
        Q, K, V, O, DO = _np(q), _np(k), _np(v), _np(o), _np(do)
        scale = 1 / math.sqrt(Q.shape[-1])
        dQ, dK, dV = np.zeros_like(Q), np.zeros_like(K), np.zeros_like(V)
        for r0 in range(0, Q.shape[-2], 8):
            r1 = min(r0 + 8, Q.shape[-2])
            _, p, _ = _rows(Q, K, ctx.causal, r0, r1)
            do_i = DO[..., r0:r1, :]
            dV += np.swapaxes(p, -1, -2) @ do_i
            dp = do_i @ np.swapaxes(V, -1, -2)
            ds = p * (dp - (do_i * O[..., r0:r1, :]).sum(-1, keepdims=True))
            dQ[..., r0:r1, :] = scale * ds @ K
            dK += scale * np.swapaxes(ds, -1, -2) @ Q[..., r0:r1, :]
        return (_put(torch.empty_like(q), dQ), _put(torch.empty_like(k), dK), _put(torch.empty_like(v), dV), None)


def forward_and_backward(q, k, v, do, causal=False):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    o = FlashAttention2.apply(q, k, v, causal)
    o.backward(do)
    return o.detach(), q.grad, k.grad, v.grad
