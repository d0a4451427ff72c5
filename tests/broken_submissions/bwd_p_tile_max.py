"""Broken ex10_tiled_backward: P recomputed as exp(s - the tile's own row max), taken before the causal
mask, instead of exp(s - lse) with the forward's lse (no NaN: it fails on values only).
"""
import numpy as np


def tiled_attention_backward(q, k, v, o, lse, do, causal=False, scale=None, block_q=64, block_k=64):
    """Gradients of o = softmax(scale q k^T) v with respect to q, k, v.

    q: (..., Nq, d), k: (..., Nk, d), v: (..., Nk, dv), o and do: (..., Nq, dv),
    lse: (..., Nq) natural-log log-sum-exp of each scaled score row.
    Returns (dq, dk, dv) shaped like q, k, v.
    """
    nq, d = q.shape[-2:]
    nk = k.shape[-2]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    D = (do * o).sum(axis=-1)  # (..., Nq)  line 4
    dq = np.zeros_like(q)
    dk = np.zeros_like(k)
    dv = np.zeros_like(v)
    for k0 in range(0, nk, block_k):
        k1 = min(k0 + block_k, nk)
        k_j, v_j = k[..., k0:k1, :], v[..., k0:k1, :]  # (..., Bk, d), (..., Bk, dv)
        dk_j = np.zeros_like(k_j)
        dv_j = np.zeros_like(v_j)
        for q0 in range(0, nq, block_q):
            q1 = min(q0 + block_q, nq)
            if causal and k0 > q1 - 1:
                continue  # fully masked tile
            q_i, do_i = q[..., q0:q1, :], do[..., q0:q1, :]
            s = scale * (q_i @ np.swapaxes(k_j, -1, -2))  # (..., Bq, Bk)
            m = s.max(axis=-1, keepdims=True)  # the mistake: the tile's own row max, for "stability"
            if causal:
                above = np.arange(k0, k1)[None, :] > np.arange(q0, q1)[:, None]
                s = np.where(above, -np.inf, s)
            p = np.exp(s - m)  # ... where the forward's lse belongs
            dv_j += np.swapaxes(p, -1, -2) @ do_i  # (..., Bk, dv)
            dp = do_i @ np.swapaxes(v_j, -1, -2)  # (..., Bq, Bk)
            ds = p * (dp - D[..., q0:q1, None])  # (..., Bq, Bk)
            dq[..., q0:q1, :] += scale * (ds @ k_j)  # (..., Bq, d)
            dk_j += scale * (np.swapaxes(ds, -1, -2) @ q_i)  # (..., Bk, d)
        dk[..., k0:k1, :] = dk_j
        dv[..., k0:k1, :] = dv_j
    return dq, dk, dv
