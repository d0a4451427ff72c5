"""Broken ex01_naive: returns an 80 MiB array (up to 1 GiB was read into the grading process, twice,
before its shape was checked)."""
import numpy as np


def naive_attention(q, k, v, causal=False, scale=None):
    return np.zeros((80 << 20) // 8)
