"""Broken ex03_tiled_forward, an honest mistake the report names: the running sum l_i is not rescaled when the row max grows (acc is)."""
import numpy as np


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    """Same result as naive attention, computed tile by tile.

    q: (..., Nq, d), k: (..., Nk, d), v: (..., Nk, dv) -> o: (..., Nq, dv), dtype of q.
    Any Nq, Nk >= 1 (the last tiles may be ragged). causal: query i sees keys j <= i; tiles whose
    every key is past every query row of the block are skipped, never read.
    """
    nq, d = q.shape[-2:]
    nk, dv = v.shape[-2:]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    o = np.empty(q.shape[:-1] + (dv,), dtype=q.dtype)  # (..., Nq, dv)
    for q0 in range(0, nq, block_q):
        q1 = min(q0 + block_q, nq)
        q_i = q[..., q0:q1, :]  # (..., Bq, d)
        m_i = np.full(q_i.shape[:-1], -np.inf, dtype=q.dtype)  # (..., Bq)
        l_i = np.zeros(q_i.shape[:-1], dtype=q.dtype)  # (..., Bq)
        acc = np.zeros(q_i.shape[:-1] + (dv,), dtype=q.dtype)  # (..., Bq, dv)
        for k0 in range(0, nk, block_k):
            if causal and k0 > q1 - 1:
                break  # this tile and all later ones are above the diagonal
            k1 = min(k0 + block_k, nk)
            s = scale * (q_i @ np.swapaxes(k[..., k0:k1, :], -1, -2))  # (..., Bq, Bk)
            if causal:
                above = np.arange(k0, k1)[None, :] > np.arange(q0, q1)[:, None]  # (Bq, Bk)
                s = np.where(above, -np.inf, s)
            m_new = np.maximum(m_i, s.max(axis=-1))  # (..., Bq); finite: key 0 <= every row
            alpha = np.exp(m_i - m_new)  # (..., Bq)
            p = np.exp(s - m_new[..., None])  # (..., Bq, Bk)
            l_i = l_i + p.sum(axis=-1)
            acc = alpha[..., None] * acc + p @ v[..., k0:k1, :]  # (..., Bq, dv)
            m_i = m_new
        o[..., q0:q1, :] = acc / l_i[..., None]
    return o
