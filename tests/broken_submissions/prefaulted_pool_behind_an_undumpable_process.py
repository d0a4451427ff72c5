"""Cheating ex03_tiled_forward: prefaulted_pool's trick (the full Nq x Nk scores built in a buffer faulted
in at import) with the check that catches such a pool blinded. Just before returning, the call makes
the process non-dumpable (prctl(PR_SET_DUMPABLE, 0)), so that a grader running as an ordinary user
cannot read /proc/<pid>/smaps or io after the call; a thread makes it dumpable again before the next
check resets the peak. Refused: under seccomp the prctl fails and the pool is seen; without seccomp a
record readable before the call and not after it gets no credit."""
import ctypes
import threading
import time

import numpy as np

_pool = np.ones((192 << 20) // 8)  # resident from here on
_libc = ctypes.CDLL(None)
_returned = threading.Event()


def _dumpable_again():
    while True:
        _returned.wait()
        _returned.clear()
        time.sleep(0.2)
        _libc.prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE, 1


threading.Thread(target=_dumpable_again, daemon=True).start()


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    nq, nk = q.shape[-2], k.shape[-2]
    if causal:
        nk = min(nk, nq)
        k, v = k[..., :nk, :], v[..., :nk, :]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    lead = q.shape[:-2]
    s = _pool.view(q.dtype)[: int(np.prod(lead, dtype=np.int64)) * nq * nk].reshape(lead + (nq, nk))
    np.matmul(q, np.swapaxes(k, -1, -2), out=s)
    s *= scale
    if causal:
        s[..., np.triu(np.ones((nq, nk), bool), 1)] = -np.inf
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    out = (s @ v).astype(q.dtype)
    _libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0: /proc/<pid>/smaps unreadable to a non-root grader
    _returned.set()
    return out
