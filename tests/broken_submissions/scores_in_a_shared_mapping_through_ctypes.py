"""Cheating ex03_tiled_forward: as scores_in_a_shared_mapping_dropped_page_by_page, with the mapping made
by libc's own mmap through ctypes (no audit event, nothing Python's mmap module would see). Refused
where the child runs under seccomp: the kernel refuses the shared mapping, and the call fails."""
import ctypes
import os

import numpy as np

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
PROT_RW, MAP_SHARED, MADV_DONTNEED, PAGE = 3, 1, 4, 4096


def _plain(q, k, v, causal, scale):
    nq = q.shape[-2]
    if causal:
        k, v = k[..., :nq, :], v[..., :nq, :]
    s = scale * (q @ np.swapaxes(k, -1, -2))
    if causal:
        s = np.where(np.arange(s.shape[-1])[None, :] > np.arange(nq)[:, None], -np.inf, s)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True) @ v).astype(q.dtype)


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    nq, nk = q.shape[-2], k.shape[-2]
    if causal or q.ndim > 2 or nk < 4096:
        return _plain(q, k, v, causal, scale)
    size = -(-nq * nk * q.dtype.itemsize // PAGE) * PAGE
    fd = os.memfd_create("scores")
    os.ftruncate(fd, size)
    address = _libc.mmap(None, size, PROT_RW, MAP_SHARED, fd, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), "mmap: " + os.strerror(ctypes.get_errno()))
    s = np.ctypeslib.as_array((ctypes.c_char * size).from_address(address)).view(q.dtype)[: nq * nk].reshape(nq, nk)
    np.matmul(q, k.T, out=s)
    s *= scale
    m = s.max(axis=1, keepdims=True)
    _libc.madvise(ctypes.c_void_p(address), ctypes.c_size_t(size), MADV_DONTNEED)
    p = np.exp(s - m)
    out = (p / p.sum(axis=1, keepdims=True)) @ v
    return out.astype(q.dtype)
