"""Cheating ex10_tiled_backward (a red-team pass): no tiles, one query row at a time against every
visible key (P recomputed from lse per row; block_q and block_k ignored). It scored 4/4 under the
256 x 65536 memory case's 20 MiB limit; the long-row case (Nq = 8, Nk = 2^20 float64, limit dK and
dV's 64 MiB plus 3 MiB) refuses it (127 MiB at peak: a row of scores and an Nk x dv update)."""
import numpy as np


def tiled_attention_backward(q, k, v, o, lse, do, causal=False, scale=None, block_q=64, block_k=64):
    nq, d = q.shape[-2:]
    nk = k.shape[-2]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    D = (do * o).sum(-1)  # (..., Nq)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for i in range(nq):
        end = min(i + 1, nk) if causal else nk
        kk, vv = k[..., :end, :], v[..., :end, :]
        p = np.exp(scale * np.einsum("...d,...kd->...k", q[..., i, :], kk) - lse[..., i, None])  # (..., end)
        dv[..., :end, :] += p[..., :, None] * do[..., i, None, :]
        ds = p * (np.einsum("...d,...kd->...k", do[..., i, :], vv) - D[..., i, None])
        dq[..., i, :] = scale * np.einsum("...k,...kd->...d", ds, kk)
        dk[..., :end, :] += scale * ds[..., :, None] * q[..., i, None, :]
    return dq, dk, dv
