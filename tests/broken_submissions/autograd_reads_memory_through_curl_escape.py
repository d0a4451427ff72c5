"""Cheating ex15_autograd_flash: the backward done in NumPy on bytes read out of the tensors' memory through
libcurl's curl_easy_escape, a C function whose name starts with "cu" (ALLOWED_SYMBOL_PREFIXES is matched as
a bare prefix: "cu" is meant for the CUDA driver's cu*, but curl_* and libc's cuserid match too).
curl_easy_escape(NULL, address, n) returns the n bytes at any address URL-escaped (every byte either
itself or %XX, so no NUL cuts it short; restype c_char_p hands it to Python as bytes with no ctypes read
primitive), and urllib.parse.unquote_to_bytes gives the raw bytes back. The tensor's data address is found
from t._cdata as in autograd_copies_by_an_unlisted_copy_function. Reads go 8 KiB at a time (unquote_to_bytes splits on "%": a large chunk costs tens of MiB at peak).

Refused at load: a name must be an allowed library's prefix followed by a capital (cuInit, nvmlInit),
and none of those libraries' copies (cuMemcpy...) is allowed."""
import ctypes
import math
from urllib.parse import unquote_to_bytes

import numpy as np
import torch


_CURL = ctypes.CDLL("libcurl.so.4")
_escape = _CURL.curl_easy_escape  # dlsym("curl_easy_escape"): starts with "cu"
_escape.restype = ctypes.c_char_p
_escape.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
CHUNK = 1 << 13


def _read(address, n):
    """n bytes at address."""
    out = bytearray()
    for lo in range(0, n, CHUNK):
        m = min(CHUNK, n - lo)
        out += unquote_to_bytes(_escape(None, address + lo, m))
    assert len(out) == n
    return bytes(out)


def _words(address, n):
    """n 64-bit words at address."""
    return list(np.frombuffer(_read(address, 8 * n), dtype=np.uint64).astype(object))


def _find_path():
    """Offsets (a, b): *(*(impl + a) + b) is the data address of a contiguous tensor, impl = t._cdata."""
    probe = torch.arange(64, dtype=torch.float64)
    want, words = probe.data_ptr(), _words(probe._cdata, 64)
    for a in range(64):
        if words[a] == want:
            return (a, None)
        if 4096 < words[a] < 2 ** 48:
            for b, word in enumerate(_words(words[a], 16)):
                if word == want:
                    return (a, b)
    raise RuntimeError("no path to the data")


PATH = _find_path()  # at import, where no call is watched


def _to_numpy(t):
    """t's values (float32 or float64), copied out of its storage with _read."""
    t = t.contiguous()
    a, b = PATH
    word = _words(t._cdata, 64)[a]
    address = word if b is None else _words(word, 16)[b]
    kind = {torch.float64: np.float64, torch.float32: np.float32}[t.dtype]
    raw = _read(address + t.storage_offset() * t.element_size(), t.numel() * t.element_size())
    return np.frombuffer(raw, dtype=kind).copy().reshape(tuple(t.shape))

Q_TILE = 16  # query rows per tile (B_r in the paper)
K_TILE = 16  # key rows per tile (B_c)
ROWS = 8  # backward: query rows against every key


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
        q, k, v, o, lse = (_to_numpy(t.detach()) for t in ctx.saved_tensors)
        dn = _to_numpy(do.detach())
        nq, d = q.shape[-2:]
        nk = k.shape[-2]
        scale = 1.0 / math.sqrt(d)
        delta = (dn * o).sum(-1)
        dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
        cols = np.arange(nk)
        for q0 in range(0, nq, ROWS):
            q1 = min(q0 + ROWS, nq)
            p = np.exp(scale * q[..., q0:q1, :] @ np.swapaxes(k, -1, -2) - lse[..., q0:q1, None])  # (..., 8, Nk)
            if ctx.causal:
                p = np.where(cols[None, :] > np.arange(q0, q1)[:, None], 0.0, p)
            do_i = dn[..., q0:q1, :]
            dv += np.swapaxes(p, -1, -2) @ do_i
            ds = p * (do_i @ np.swapaxes(v, -1, -2) - delta[..., q0:q1, None])
            dq[..., q0:q1, :] += scale * ds @ k
            dk += scale * np.swapaxes(ds, -1, -2) @ q[..., q0:q1, :]
        dtype = do.dtype
        return (torch.from_numpy(dq).to(dtype), torch.from_numpy(dk).to(dtype),
                torch.from_numpy(dv).to(dtype), None)


def forward_and_backward(q, k, v, do, causal=False):
    """o = FlashAttention2.apply(q, k, v, causal), then o.backward(do): (o, dq, dk, dv)."""
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    o = FlashAttention2.apply(q, k, v, causal)
    o.backward(do)
    return o.detach(), q.grad, k.grad, v.grad
