"""Exercise 03 with exp2 and log2(e) folded into the scale, m and l kept as (..., Bq, 1) columns, and the causal
mask added as -inf rather than set by np.where."""
import math
import numpy as np

LOG2E = 1.4426950408889634


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    """exp2 variant, 2-D (keepdims) m and l, float32 accumulators, additive -inf mask."""
    *lead, nq, d = q.shape
    nk = k.shape[-2]
    dv = v.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    qk_scale = scale * LOG2E
    o = np.zeros((*lead, nq, dv), dtype=q.dtype)
    n_qb = (nq + block_q - 1) // block_q
    n_kb = (nk + block_k - 1) // block_k
    for bi in range(n_qb):
        lo, hi = bi * block_q, min(nq, (bi + 1) * block_q)
        Qi = q[..., lo:hi, :].astype(np.float64)
        m_i = np.full((*lead, hi - lo, 1), -np.inf, dtype=np.float64)
        l_i = np.zeros((*lead, hi - lo, 1), dtype=np.float64)
        acc = np.zeros((*lead, hi - lo, dv), dtype=np.float64)
        last_kb = n_kb
        if causal:
            last_kb = min(n_kb, (hi - 1) // block_k + 1)
        for bj in range(last_kb):
            klo, khi = bj * block_k, min(nk, (bj + 1) * block_k)
            Kj = k[..., klo:khi, :].astype(np.float64)
            Vj = v[..., klo:khi, :].astype(np.float64)
            S = np.matmul(Qi, np.swapaxes(Kj, -1, -2)) * qk_scale
            if causal and khi - 1 > lo:
                bias = np.where(np.arange(klo, khi)[None, :] > np.arange(lo, hi)[:, None], -np.inf, 0.0).astype(np.float64)
                S = S + bias
            m_new = np.maximum(m_i, S.max(axis=-1, keepdims=True))
            P = np.exp2(S - m_new)
            corr = np.exp2(m_i - m_new)
            l_i = l_i * corr + P.sum(axis=-1, keepdims=True)
            acc = acc * corr + np.matmul(P, Vj)
            m_i = m_new
        o[..., lo:hi, :] = acc / l_i
    return o
