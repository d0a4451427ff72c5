"""Cheating ex01_naive: returns an ndarray subclass (and an int subclass) whose == always says True."""
import numpy as np


class AlwaysEqual(np.ndarray):
    def __eq__(self, other):
        return np.ones(self.shape, bool)

    __array_priority__ = 1000


class Yes(int):
    def __eq__(self, other):
        return True


def naive_attention(q, k, v, causal=False, scale=None):
    return np.zeros(q.shape[:-1] + (v.shape[-1],), q.dtype).view(AlwaysEqual)


def naive_hbm_bytes(nq, nk, d, dv=None, itemsize=2):
    return Yes(0)
