"""Broken ex02_softmax: subtracts the max from x in place, changing the caller's array."""
import numpy as np


def safe_softmax(x):
    x -= x.max(axis=-1, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=-1, keepdims=True)
    return x
