"""The attention backward derived and checked numerically, and its matmul count.

FlashAttention paper Appendix B.2; FlashAttention-2 Section 3.1 and Algorithm 2. For one row i,
P_i = softmax(S_i) has the Jacobian J_i = diag(P_i) - P_i P_i^T (symmetric), so

    dS_i = J_i dP_i = P_i o dP_i - P_i (P_i . dP_i) = P_i o (dP_i - D_i),  D_i = P_i . dP_i,

and, with dP = dO V^T and O = P V, D_i = sum_j P_ij (dO_i . V_j) = dO_i . O_i = rowsum(dO o O)_i.

:func:`check_backward_derivation` checks each step on random inputs: the Jacobian route against the
closed form, D from P against D from O, and dS against central finite differences of the loss
L = sum(dO o O) with respect to S. :func:`backward_matmuls` counts the matmuls per tile of the
backward in FlashAttention-2's single pass (atomic dQ) and in the course's two-kernel backward.
"""
from __future__ import annotations

import numpy as np

from ._checks import check_positive_int
from .softmax import safe_softmax


def softmax_jacobian(p_row: np.ndarray) -> np.ndarray:
    """J = diag(p) - p p^T for one probability row p of length n: (n,) -> (n, n)."""
    p_row = np.asarray(p_row, dtype=np.float64)
    if p_row.ndim != 1:
        raise ValueError(f"p_row must be one row (n,), got shape {p_row.shape}")
    return np.diag(p_row) - np.outer(p_row, p_row)  # (n, n)


def check_backward_derivation(n: int = 12, d: int = 8, seed: int = 0, eps: float = 1e-6) -> dict:
    """Max abs differences of each derivation step on random (n, d) inputs, float64."""
    n, d = check_positive_int("n", n), check_positive_int("d", d)
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((n, d)) for _ in range(4))  # (n, d) each
    s = q @ k.T / np.sqrt(d)  # (n, n)
    p = safe_softmax(s)  # (n, n)
    o = p @ v  # (n, d)
    dp = do @ v.T  # (n, n)
    ds_jacobian = np.stack([softmax_jacobian(p[i]) @ dp[i] for i in range(n)])  # (n, n)
    d_from_p = (p * dp).sum(axis=1)  # (n,)
    d_from_o = (do * o).sum(axis=1)  # (n,)
    ds_formula = p * (dp - d_from_o[:, None])  # (n, n)
    ds_numeric = np.empty_like(s)  # dL/dS by central differences, L = sum(dO o softmax(S) V)
    for i in range(n):
        for j in range(n):
            bump = np.zeros_like(s)
            bump[i, j] = eps
            up, down = (np.sum(do * (safe_softmax(s + sgn * bump) @ v)) for sgn in (1, -1))
            ds_numeric[i, j] = (up - down) / (2 * eps)
    return {"jacobian vs P o (dP - D)": float(np.abs(ds_jacobian - ds_formula).max()),
            "rowsum(P o dP) vs rowsum(dO o O)": float(np.abs(d_from_p - d_from_o).max()),
            "P o (dP - D) vs finite differences": float(np.abs(ds_formula - ds_numeric).max())}


def backward_matmuls() -> dict:
    """Matmuls per (Q_i, K_j) tile: forward, FA2's backward, the course's backward; and FLOP ratios.

    FA2 (Algorithm 2, dQ accumulated with atomic adds in the same pass): S, dV, dP, dK, dQ = 5.
    The course (``flashlab.kernels.flash_bwd``): a dK/dV kernel (S, dV, dP, dK) and a separate dQ
    kernel that recomputes S and dP (S, dP, dQ): 7. Every matmul of a tile costs the same
    2 * Br * Bc * d FLOPs when dv = d, so FLOPs are proportional to matmul counts.
    """
    forward = ("S = Q K^T", "O += P V")
    fa2 = ("S = Q K^T (recomputed)", "dV += P^T dO", "dP = dO V^T", "dK += dS^T Q", "dQ += dS K (atomic)")
    course = ("dK/dV pass: S = Q K^T", "dK/dV pass: dV += P^T dO", "dK/dV pass: dP = dO V^T",
              "dK/dV pass: dK += dS^T Q", "dQ pass: S = Q K^T", "dQ pass: dP = dO V^T", "dQ pass: dQ += dS K")
    return {"forward": forward, "fa2_backward": fa2, "course_backward": course,
            "counted_fwdbwd_over_fwd": (len(forward) + len(fa2)) / len(forward),
            "executed_fwdbwd_over_fwd": (len(forward) + len(course)) / len(forward)}
