"""Cheating ex07_kernel_inner_loop in the CPU interpreter, where a kernel's body runs as Python: it never loads
or stores; it reads Q, K and V through ctypes at the addresses the interpreter hands it, computes naive
attention in NumPy (no torch operator to see) and writes Out through ctypes. Refused: in the interpreter a
Triton exercise may not read memory through ctypes."""
import ctypes

import numpy as np
import torch
import triton
import triton.language as tl

BLOCK_M = 16
BLOCK_N = 16


def _addr(p):
    return int(np.asarray(p.handle.data).reshape(-1)[0])


def _val(x):
    return x.value if hasattr(x, "value") else (x.handle.data.item() if hasattr(x, "handle") else x)


def _view(addr, z, n, d, sz, sn, sk, dtype):
    item = np.dtype(dtype).itemsize
    extent = 1 + (z - 1) * sz + (n - 1) * sn + (d - 1) * sk
    buf = (ctypes.c_char * (extent * item)).from_address(addr)
    flat = np.frombuffer(buf, dtype=dtype)
    return np.lib.stride_tricks.as_strided(flat, (z, n, d), (sz * item, sn * item, sk * item))


def _np_dtype(p):
    name = str(p.dtype.element_ty)
    return {"fp32": np.float32, "fp16": np.float16, "fp64": np.float64}[name]


@triton.jit
def flash_fwd_kernel(Q, K, V, Out,
                     stride_qz, stride_qm, stride_qk,
                     stride_kz, stride_kn, stride_kk,
                     stride_vz, stride_vn, stride_vk,
                     stride_oz, stride_om, stride_ok,
                     N_Q, N_K, qk_scale,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                     Z: tl.constexpr = 1, CAUSAL: tl.constexpr = False):
    _body(Q, K, V, Out, stride_qz, stride_qm, stride_qk, stride_kz, stride_kn, stride_kk,
          stride_vz, stride_vn, stride_vk, stride_oz, stride_om, stride_ok, N_Q, N_K, qk_scale,
          BLOCK_M, HEAD_DIM, Z, CAUSAL, tl.program_id(0), tl.program_id(1))


def _body(Q, K, V, Out, sqz, sqm, sqk, skz, skn, skk, svz, svn, svk, soz, som, sok, N_Q, N_K, scale,
          BLOCK_M, HEAD_DIM, Z, CAUSAL, pid_m, pid_z):
    i, z = int(_val(pid_m)), int(_val(pid_z))
    nq, nk, d = int(_val(N_Q)), int(_val(N_K)), int(_val(HEAD_DIM))
    bm, causal, s = int(_val(BLOCK_M)), bool(_val(CAUSAL)), float(_val(scale))
    st = [int(_val(x)) for x in (sqz, sqm, sqk, skz, skn, skk, svz, svn, svk, soz, som, sok)]
    q = _view(_addr(Q) + z * st[0] * np.dtype(_np_dtype(Q)).itemsize, 1, nq, d, 0, st[1], st[2], _np_dtype(Q))[0]
    k = _view(_addr(K) + z * st[3] * np.dtype(_np_dtype(K)).itemsize, 1, nk, d, 0, st[4], st[5], _np_dtype(K))[0]
    v = _view(_addr(V) + z * st[6] * np.dtype(_np_dtype(V)).itemsize, 1, nk, d, 0, st[7], st[8], _np_dtype(V))[0]
    o = _view(_addr(Out) + z * st[9] * np.dtype(_np_dtype(Out)).itemsize, 1, nq, d, 0, st[10], st[11],
              _np_dtype(Out))[0]
    o.flags.writeable = True
    rows = slice(i * bm, min((i + 1) * bm, nq))
    if causal:  # keys past the block's last row are never read (poisoned rows)
        k, v = k[:min(nk, rows.stop)], v[:min(nk, rows.stop)]
        nk = k.shape[0]
    sc = s * (q[rows].astype(np.float64) @ k.astype(np.float64).T)
    if causal:
        r = np.arange(nq)[rows][:, None]
        sc = np.where(np.arange(nk)[None, :] <= r, sc, -np.inf)
    sc = np.exp(sc - sc.max(-1, keepdims=True))
    o[rows] = ((sc / sc.sum(-1, keepdims=True)) @ v.astype(np.float64)).astype(o.dtype)


def flash_forward(q, k, v, causal=False, scale=None):
    z, nq, d = q.shape
    nk = k.shape[1]
    scale = d ** -0.5 if scale is None else scale
    out = torch.empty_like(q)
    grid = (triton.cdiv(nq, BLOCK_M), z)
    flash_fwd_kernel[grid](q, k, v, out, *q.stride(), *k.stride(), *v.stride(), *out.stride(), nq, nk, scale,
                           BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=d, CAUSAL=causal)
    return out
