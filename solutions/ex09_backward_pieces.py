"""Exercise 09 (solution): the two new pieces of the attention backward pass.

FlashAttention-2 Algorithm 2: D = rowsum(dO * O) (line 4) and dS = P * (dP - D) (line 16).
"""


def rowsum_do_o(do, o):
    """D_i = sum_c dO_ic O_ic. do, o: (..., Nq, dv) -> D: (..., Nq), dtype of o."""
    return (do * o).sum(axis=-1)


def softmax_backward(p, dp, D):
    """dS = P * (dP - D) for P = softmax(S) row by row, with D = rowsum(dO * O) = rowsum(P * dP).

    p, dp: (..., Nq, Nk); D: (..., Nq) -> dS: (..., Nq, Nk).
    """
    return p * (dp - D[..., None])
