"""Broken ex01_naive: kills its own process (as a segfault in native code would)."""
import os



def naive_attention(q, k, v, causal=False, scale=None):
    os._exit(3)


def naive_hbm_bytes(nq, nk, d, dv=None, itemsize=2):
    """Correct: the grader must still grade this part after the other one failed."""
    dv = d if dv is None else dv
    return (nq * d + nk * d + 4 * nq * nk + nk * dv + nq * dv) * itemsize
