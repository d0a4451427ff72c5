"""Cheating ex03_tiled_forward: the whole scaled score matrix S is built and kept in a memfd, then a plain
two-pass softmax reads it back. The bytes reach the memfd by vmsplice into a pipe and splice from the pipe
(no write(), so /proc/<pid>/io's wchar does not count them), the memfd is never mapped (no resident pages),
and pread reads it back. Refused where the child runs under seccomp: vmsplice and splice fail."""
import ctypes
import fcntl
import os

import numpy as np

_libc = ctypes.CDLL(None, use_errno=True)


class _Iov(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Store:
    def __init__(self):
        self.fd = os.memfd_create("s")
        self.r, self.w = os.pipe()
        try:
            fcntl.fcntl(self.w, 1031, 1 << 20)  # F_SETPIPE_SZ
        except OSError:
            pass
        self.off = 0

    def put(self, arr):
        arr = np.ascontiguousarray(arr)
        raw = arr.view(np.uint8).reshape(-1)
        addr, n, done = raw.ctypes.data, raw.size, 0
        start = self.off
        while done < n:
            iov = _Iov(addr + done, n - done)
            got = _libc.vmsplice(self.w, ctypes.byref(iov), 1, 0)
            if got < 0:
                raise OSError(ctypes.get_errno(), "vmsplice")
            left = got
            while left:
                moved = os.splice(self.r, self.fd, left, offset_dst=self.off)
                self.off += moved
                left -= moved
            done += got
        return start

    def get(self, off, shape, dtype):
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return np.frombuffer(os.pread(self.fd, n, off), dtype=dtype).reshape(shape)

    def close(self):
        for f in (self.fd, self.r, self.w):
            os.close(f)


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    nq, d = q.shape[-2:]
    nk, dv = v.shape[-2:]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    batch = q.shape[:-2]
    qf, kf, vf = (x.reshape((-1,) + x.shape[-2:]) for x in (q, k, v))
    o = np.empty((qf.shape[0], nq, dv), dtype=q.dtype)
    store = _Store()
    try:
        for z in range(qf.shape[0]):
            where = {}
            # pass 0: the whole S of this batch element, tile by tile, into the memfd
            for q0 in range(0, nq, block_q):
                q1 = min(q0 + block_q, nq)
                for k0 in range(0, nk, block_k):
                    if causal and k0 > q1 - 1:
                        break
                    k1 = min(k0 + block_k, nk)
                    s = scale * (qf[z, q0:q1] @ kf[z, k0:k1].T)
                    if causal:
                        s = np.where(np.arange(k0, k1)[None, :] > np.arange(q0, q1)[:, None], -np.inf, s)
                    where[(q0, k0)] = (store.put(s.astype(q.dtype)), s.shape)
            # pass 1 and 2: a plain softmax over the stored rows
            for q0 in range(0, nq, block_q):
                q1 = min(q0 + block_q, nq)
                tiles = [(k0, *where[(q0, k0)]) for k0 in range(0, nk, block_k) if (q0, k0) in where]
                m = np.full(q1 - q0, -np.inf, dtype=q.dtype)
                for k0, off, shape in tiles:
                    m = np.maximum(m, store.get(off, shape, q.dtype).max(-1))
                l = np.zeros(q1 - q0, dtype=q.dtype)
                acc = np.zeros((q1 - q0, dv), dtype=q.dtype)
                for k0, off, shape in tiles:
                    p = np.exp(store.get(off, shape, q.dtype) - m[:, None])
                    l += p.sum(-1)
                    acc += p @ vf[z, k0:k0 + shape[1]]
                o[z, q0:q1] = acc / l[:, None]
            store.off = 0
    finally:
        store.close()
    return o.reshape(batch + (nq, dv))
