"""Broken ex03_tiled_forward: no causal skipping, and NaN in K and V replaced by 0 in place (the
caller's arrays change)."""
import numpy as np


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    nq, nk = q.shape[-2], k.shape[-2]
    k[np.isnan(k)] = 0.0  # in place
    v[np.isnan(v)] = 0.0
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    o = np.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype)
    for q0 in range(0, nq, block_q):
        q1 = min(q0 + block_q, nq)
        m_i = np.full(q[..., q0:q1, 0].shape, -np.inf, dtype=q.dtype)
        l_i = np.zeros_like(m_i)
        acc = np.zeros(m_i.shape + (v.shape[-1],), dtype=q.dtype)
        for k0 in range(0, nk, block_k):  # every tile, even the fully masked ones
            k1 = min(k0 + block_k, nk)
            s = scale * (q[..., q0:q1, :] @ np.swapaxes(k[..., k0:k1, :], -1, -2))
            if causal:
                s = np.where(np.arange(k0, k1)[None, :] > np.arange(q0, q1)[:, None], -np.inf, s)
            m_new = np.maximum(m_i, s.max(axis=-1))
            p = np.exp(s - m_new[..., None])
            alpha = np.exp(m_i - m_new)
            l_i = alpha * l_i + p.sum(axis=-1)
            acc = alpha[..., None] * acc + p @ v[..., k0:k1, :]
            m_i = m_new
        o[..., q0:q1, :] = acc / l_i[..., None]
    return o
