"""Broken ex01_naive: the module itself fails to import."""
import numpy as np
from numpy import this_name_does_not_exist  # noqa: F401


def naive_attention(q, k, v, causal=False, scale=None):
    return q
