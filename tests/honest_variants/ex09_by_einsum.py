"""Exercise 09 by einsum, and dS as P * dP - P * D with D given a trailing axis by np.expand_dims."""
import numpy as np


def rowsum_do_o(do, o):
    return np.einsum("...ic,...ic->...i", do, o)


def softmax_backward(p, dp, D):
    return p * dp - p * np.expand_dims(D, -1)
