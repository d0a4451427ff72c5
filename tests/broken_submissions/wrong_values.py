"""Broken ex02_softmax: online softmax that forgets to rescale l when the max grows."""
import numpy as np


def online_softmax(x, chunk):
    m = np.full(x.shape[:-1], -np.inf, dtype=x.dtype)
    l = np.zeros(x.shape[:-1], dtype=x.dtype)
    for start in range(0, x.shape[-1], chunk):
        xc = x[..., start:start + chunk]
        m_new = np.maximum(m, xc.max(axis=-1))
        l = l + np.exp(xc - m_new[..., None]).sum(axis=-1)  # missing: l * exp(m - m_new)
        m = m_new
    return np.exp(x - m[..., None]) / l[..., None]
