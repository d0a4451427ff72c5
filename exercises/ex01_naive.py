"""Exercise 01: naive attention, and the HBM bytes it moves.

Grade with ``from flashlab.grading import check; check("ex01_naive")`` or ``flashlab grade ex01_naive``.
Write NumPy only: calling flashlab's own functions is reported, not rewarded.
"""
import numpy as np


def naive_attention(q, k, v, causal=False, scale=None):
    """Standard attention (FlashAttention paper, Algorithm 0).

        S = scale * Q K^T            (..., Nq, Nk)
        P = softmax(S) row by row    (..., Nq, Nk)
        O = P V                      (..., Nq, dv)

    q: (..., Nq, d), k: (..., Nk, d), v: (..., Nk, dv); leading batch dims match exactly.
    Returns o: (..., Nq, dv) in q's dtype.
    causal: query row i sees key columns j <= i only (S[i, j] = -inf for j > i).
    scale: defaults to 1 / sqrt(d).
    Must not overflow when scores are large (about 1e3).
    """
    raise NotImplementedError("Exercise 01: naive attention")


def naive_hbm_bytes(nq, nk, d, dv=None, itemsize=2):
    """Bytes naive attention moves between HBM and on-chip SRAM, for one head.

    Count every array Algorithm 0 (FlashAttention paper) reads from or writes to HBM: its inputs,
    its output, and the intermediates S and P (nq x nk each), which it writes and reads back.
    Every element is ``itemsize`` bytes; dv defaults to d. Returns an int.
    """
    raise NotImplementedError("Exercise 01: HBM bytes of naive attention")
