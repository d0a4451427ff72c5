"""Exercise 09: the two new pieces of the attention backward pass.

Grade with ``check("ex09_backward_pieces")``. NumPy only.
With P = softmax(S) row by row and O = P V, given dO = dL/dO:
    dV = P^T dO,  dP = dO V^T,  dS = P * (dP - D),  dQ = scale dS K,  dK = scale dS^T Q
where D_i = sum_j P_ij dP_ij = sum_c dO_ic O_ic  (FlashAttention-2 Algorithm 2, lines 4 and 14).
"""
import numpy as np


def rowsum_do_o(do, o):
    """D = rowsum(dO * O). do, o: (..., Nq, dv) -> D: (..., Nq), same dtype."""
    raise NotImplementedError("Exercise 09: D = rowsum(dO * O)")


def softmax_backward(p, dp, D):
    """dS = P * (dP - D), D broadcast along each row. p, dp: (..., Nq, Nk); D: (..., Nq) -> (..., Nq, Nk)."""
    raise NotImplementedError("Exercise 09: dS = P * (dP - D)")
