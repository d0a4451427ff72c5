"""Exercise 03 walking the key blocks from the diagonal backwards (the online softmax takes them in any order),
with einsum and a guard for a running max of -inf."""
import numpy as np


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    """Key blocks walked from the diagonal backwards; compute dtype = input dtype (float32 stays float32)."""
    dt = np.result_type(q.dtype, np.float32)
    nq, d = q.shape[-2:]
    nk = k.shape[-2]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    out = np.empty(q.shape[:-1] + v.shape[-1:], dtype=q.dtype)
    for i0 in range(0, nq, block_q):
        qi = q[..., i0:i0 + block_q, :].astype(dt)
        r = qi.shape[-2]
        i1 = i0 + r
        kend = min(nk, i1) if causal else nk
        starts = list(range(0, kend, block_k))[::-1]
        m = np.full(qi.shape[:-1], -np.inf, dt)
        l = np.zeros(qi.shape[:-1], dt)
        acc = np.zeros(qi.shape[:-1] + v.shape[-1:], dt)
        for j0 in starts:
            kj = k[..., j0:j0 + block_k, :].astype(dt)
            vj = v[..., j0:j0 + block_k, :].astype(dt)
            s = np.einsum("...id,...jd->...ij", qi, kj) * scale
            if causal:
                c = j0 + np.arange(kj.shape[-2])
                rr = i0 + np.arange(r)
                s = np.where(c[None, :] <= rr[:, None], s, -np.inf)
            m_new = np.maximum(m, s.max(-1))
            safe = np.where(np.isneginf(m_new), 0.0, m_new)
            p = np.exp(s - safe[..., None])
            alpha = np.exp(m - safe)
            l = l * alpha + p.sum(-1)
            acc = acc * alpha[..., None] + np.einsum("...ij,...jd->...id", p, vj)
            m = m_new
        out[..., i0:i1, :] = acc / l[..., None]
    return out
