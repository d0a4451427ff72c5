"""Exercise 15: FlashAttention-2 as a PyTorch ``torch.autograd.Function``, forward and backward over tiles.

Grade with ``check("ex15_autograd_flash")`` (hints: ``hint=1``, ``2``, ``3``). torch only: no
torch.nn.functional attention and no torch softmax (the online softmax is the exercise), no
flashlab functions, and the backward must be yours (autograd never differentiates through your
forward: only FlashAttention2.backward runs). The tiles stay torch tensors: moving them to NumPy or
another library (.numpy(), np.asarray, DLPack, .tolist(), data_ptr, untyped_storage, ctypes) is
refused while grading, in forward and in backward, and so is reading more than 24576 numbers into
Python one at a time (.item(), float(t); a truth value per tile, as in `if mask.any():`, is fine).

forward follows FlashAttention-2's Algorithm 1 (Dao, 2023), lines 1-17, in tiles of Q_TILE query
rows by K_TILE key rows, and saves for backward the row log-sum-exp L = m + log(l) (line 13),
never P. backward follows Algorithm 2, lines 1-20: it recomputes each tile of P from L (line 11).
The grader compares o, and the gradients dq, dk, dv of sum(o * do), with float64 references
(float64 inputs: 1e-8 + 1e-6 |expected|, as torch.autograd.gradcheck would demand; float32
inputs: 1e-4 + 1e-3 |expected|).
Shapes: q (..., Nq, d), k and v (..., Nk, d), any Nq, Nk >= 1 (the last tiles may be ragged);
scale = 1 / sqrt(d); causal (top-left aligned): query row r sees key columns c <= r.
Tiles of any size up to 128 x 256 (32,768 elements; 128 x 256 or 256 x 128) pass the grader's
memory checks (Nq = 256, Nk = 8192, float64: 1.5 MiB of tensors at once in forward, 3 MiB in
forward and backward); a Q_TILE x Nk block never does.
"""
import math

import torch

Q_TILE = 16  # query rows per tile (B_r in the paper)
K_TILE = 16  # key rows per tile (B_c)


def flash_forward_lse(q, k, v, causal=False):
    """(o, lse): o = softmax(scale q k^T) v, (..., Nq, d); lse = log sum_j exp(scale q_i . k_j), (..., Nq).

    Both in q's dtype, computed one (Q_TILE x K_TILE) tile at a time: never an Nq x Nk tensor.
    """
    raise NotImplementedError("Exercise 15: tiled forward with lse")


class FlashAttention2(torch.autograd.Function):
    """o = FlashAttention2.apply(q, k, v, causal)."""

    @staticmethod
    def forward(ctx, q, k, v, causal=False):
        """Return o; save what backward needs (q, k, v, o, lse), not P."""
        raise NotImplementedError("Exercise 15: forward")

    @staticmethod
    def backward(ctx, do):
        """Given dL/do, return (dq, dk, dv, None): one gradient per input of forward."""
        raise NotImplementedError("Exercise 15: backward")


def forward_and_backward(q, k, v, do, causal=False):
    """o = FlashAttention2.apply on copies of q, k, v that require grad; then backpropagate do.

    Returns (o, dq, dk, dv), each shaped and typed like its input, o detached. The inputs passed
    in must not be modified.
    """
    raise NotImplementedError("Exercise 15: run forward and backward")
