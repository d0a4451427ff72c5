"""Broken ex02_softmax: softmax without subtracting the max: exp overflows to inf, inf/inf = NaN."""
import numpy as np


def safe_softmax(x):
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)
