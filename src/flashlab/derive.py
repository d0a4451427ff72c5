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


def matmul_table() -> str:
    """:func:`backward_matmuls` as text: per pass (forward, FA2's backward, the course's backward) the
    number of matmuls per tile and what each computes, then forward + backward over forward with FA2's 5
    (the FLOP convention of every fwd+bwd TFLOP/s in the course) and with the course's 7."""
    counts = backward_matmuls()
    lines = [f"{name:<16} {len(counts[name])} matmuls: " + "; ".join(counts[name])
             for name in ("forward", "fa2_backward", "course_backward")]
    lines.append(f"forward + backward over forward: {counts['counted_fwdbwd_over_fwd']} with FA2's 5 "
                 f"(the convention behind every fwd+bwd TFLOP/s in this course), "
                 f"{counts['executed_fwdbwd_over_fwd']} with the course's 7")
    return "\n".join(lines)


def backward_error_table(n_q: int = 70, n_k: int = 45, d: int = 16, batch: int = 2, block_q: int = 16,
                         block_k: int = 32, seed: int = 0) -> str:
    """The NumPy backwards against PyTorch's autograd in float64, as text: per causal value (top-left),
    the max abs error of dq, dk, dv of ``naive_attention_backward`` (materialises P) and of
    ``tiled_attention_backward`` (Algorithm 2, P recomputed from the lse of ``tiled_attention``).
    q and dO (batch, n_q, d), k and v (batch, n_k, d), drawn q, dO, k, v from
    ``np.random.default_rng(seed)``; autograd differentiates ``scaled_dot_product_attention``."""
    import torch

    from .reference import naive_attention_backward
    from .tiled import tiled_attention, tiled_attention_backward

    n_q, n_k, d = check_positive_int("n_q", n_q), check_positive_int("n_k", n_k), check_positive_int("d", d)
    batch = check_positive_int("batch", batch)
    block_q, block_k = check_positive_int("block_q", block_q), check_positive_int("block_k", block_k)
    rng = np.random.default_rng(seed)
    q, do = rng.standard_normal((batch, n_q, d)), rng.standard_normal((batch, n_q, d))  # (B, Nq, d)
    k, v = rng.standard_normal((batch, n_k, d)), rng.standard_normal((batch, n_k, d))  # (B, Nk, d)
    lines = []
    for causal in (False, True):
        tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
        torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal).backward(torch.tensor(do))
        auto = (tq.grad.numpy(), tk.grad.numpy(), tv.grad.numpy())
        naive = naive_attention_backward(q, k, v, do, causal=causal)
        o, lse = tiled_attention(q, k, v, causal=causal, block_q=block_q, block_k=block_k, return_lse=True)
        tiled = tiled_attention_backward(q, k, v, o, lse, do, causal=causal, block_q=block_q, block_k=block_k)
        for name, grads in (("naive", naive), ("tiled", tiled)):
            errs = [np.abs(g - a).max() for g, a in zip(grads, auto)]
            lines.append(f"causal={causal!s:<5} {name}: max error dq {errs[0]:.1e}, dk {errs[1]:.1e}, "
                         f"dv {errs[2]:.1e}")
    return "\n".join(lines)


def recompute_cost_table(ns=(1024, 4096, 16384), d: int = 128, block: int = 128, itemsize: int = 2) -> str:
    """What recomputation buys and costs for one head, as text: per N (Nq = Nk), the bytes of storing P
    (N^2 values of ``itemsize`` bytes) against storing lse (N float32), the backward's matmul FLOPs naive
    (4 matmuls per entry, ``flops.attention_flops``) and tiled with ``block`` x ``block`` tiles (FA2's 5),
    and the HBM bytes of each backward (``traffic.naive_backward_traffic``, ``traffic.backward_traffic``
    with float32 statistics)."""
    from . import traffic as tr
    from .flops import attention_flops
    from .viz.style import format_bytes

    d, block = check_positive_int("d", d), check_positive_int("block", block)
    itemsize = check_positive_int("itemsize", itemsize)
    ns = tuple(ns)
    if not ns:
        raise ValueError(f"ns={ns!r} must hold at least one sequence length")
    ns = tuple(check_positive_int(f"ns[{i}]", n) for i, n in enumerate(ns))
    lines = [f"{'N':>6} {'store P':>10} {'store lse':>10} {'naive bwd FLOPs':>16} {'flash bwd FLOPs':>16} "
             f"{'naive bwd bytes':>16} {'flash bwd bytes':>16}"]
    for n in ns:
        naive_bytes = tr.naive_backward_traffic(n, n, d, itemsize=itemsize).total
        flash_bytes = tr.backward_traffic(n, n, d, block_q=block, block_k=block, itemsize=itemsize,
                                          stat_itemsize=4).total
        lines.append(f"{n:>6} {format_bytes(n * n * itemsize):>10} {format_bytes(n * 4):>10} "
                     f"{attention_flops(n, n, d, pass_='backward'):>16.3e} "
                     f"{attention_flops(n, n, d, pass_='backward', block_q=block, block_k=block):>16.3e} "
                     f"{format_bytes(naive_bytes):>16} {format_bytes(flash_bytes):>16}")
    return "\n".join(lines)
