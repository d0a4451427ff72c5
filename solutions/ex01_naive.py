"""Exercise 01 (solution): naive attention and the HBM bytes it moves.

FlashAttention paper, Algorithm 0 (standard attention): S = Q K^T, P = softmax(S), O = P V,
with S and P written to and read back from HBM.
"""
import numpy as np


def naive_attention(q, k, v, causal=False, scale=None):
    """softmax(scale * q @ k^T) @ v over the key axis.

    q: (..., Nq, d), k: (..., Nk, d), v: (..., Nk, dv) -> o: (..., Nq, dv), dtype of q.
    causal: query row i sees key columns j <= i (top-left aligned).
    scale: defaults to 1 / sqrt(d).
    """
    d = q.shape[-1]
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    s = scale * (q @ np.swapaxes(k, -1, -2))  # (..., Nq, Nk)
    if causal:
        nq, nk = s.shape[-2:]
        above = np.arange(nk)[None, :] > np.arange(nq)[:, None]  # (Nq, Nk)
        s = np.where(above, -np.inf, s)
    m = s.max(axis=-1, keepdims=True)  # (..., Nq, 1)
    p = np.exp(s - m)  # (..., Nq, Nk)
    p = p / p.sum(axis=-1, keepdims=True)
    return (p @ v).astype(q.dtype)  # (..., Nq, dv)


def naive_hbm_bytes(nq, nk, d, dv=None, itemsize=2):
    """Bytes naive attention moves between HBM and SRAM (one head).

    Reads Q and K, writes S (Nq x Nk), reads S, writes P, reads P and V, writes O.
    """
    dv = d if dv is None else dv
    elements = (nq * d + nk * d) + nq * nk + nq * nk + nq * nk + (nq * nk + nk * dv) + nq * dv
    return elements * itemsize
