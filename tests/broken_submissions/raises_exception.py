"""Broken ex01_naive: naive_attention raises (an indexing slip)."""
import numpy as np


def naive_attention(q, k, v, causal=False, scale=None):
    s = q @ k.T
    return s[:, :, :, 0]  # IndexError: too many indices
