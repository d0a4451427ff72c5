"""Work partitioning between the warps of one thread block: split-K against split-Q, in NumPy.

FlashAttention-2 (Dao 2023), Section 3.3: inside one thread block (one query block Q_i), the
four (or eight) warps must share the work of a tile S_ij = Q_i K_j^T and of P_ij V_j.

* **split-K** (FlashAttention-1): every warp holds all of Q_i and a slice of the key columns of
  K_j, V_j. Each warp's P V product covers only its keys, so it is a *partial* output with its own
  softmax state (m_w, l_w); the warps must write (m_w, l_w, acc_w) to shared memory, wait at a
  barrier, and combine them (notebook 02's ``combine_states``) before the tile's result exists.
* **split-Q** (FlashAttention-2): every warp holds a slice of the query rows of Q_i and reads
  all of K_j, V_j from shared memory. A row's softmax and output live in one warp, so nothing
  is combined between warps: no shared-memory round trip, no barrier for the result.

Both functions compute exact attention on (N, d) inputs (one head) and return what each warp
held and what had to cross shared memory to combine. Shared-memory loads of the K_j, V_j tiles
themselves (and their barriers) happen in both schemes and are not counted. Combined partial
results are counted in float32 (4 bytes), as a kernel keeps its accumulators.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._checks import check_positive_int
from .softmax import combine_states

ACC_ITEMSIZE = 4  # float32 accumulators and statistics


@dataclass(frozen=True)
class WarpReport:
    """What one scheme cost: per-warp holdings (elements) and the combine through shared memory."""

    scheme: str
    warps: int
    held_per_warp: dict = field(hash=False)  # name -> elements one warp holds for one tile
    combine_bytes: int  # bytes written to shared memory to combine warps' partial results
    combine_barriers: int  # barriers needed to combine them (one per combined tile)


def _inputs(q, k, v, warps, block_q, block_k):
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim != 2:
            raise ValueError(f"{name} must be (N, d) for one head, got shape {x.shape}")
    if k.shape != v.shape or q.shape[1] != k.shape[1]:
        raise ValueError(f"q {q.shape}, k {k.shape}, v {v.shape}: need q (Nq, d), k and v (Nk, d)")
    warps = check_positive_int("warps", warps)
    block_q, block_k = check_positive_int("block_q", block_q), check_positive_int("block_k", block_k)
    return q, k, v, warps, block_q, block_k


def split_k_forward(q, k, v, warps: int = 4, block_q: int = 64, block_k: int = 64):
    """FlashAttention-1's split-K: warps split the key columns of each tile; returns (o, WarpReport).

    q: (Nq, d); k, v: (Nk, d); o: (Nq, d). Combines per tile, as FA1's loop order finishes each
    (Q_i, K_j) tile before the next.
    """
    q, k, v, warps, block_q, block_k = _inputs(q, k, v, warps, block_q, block_k)
    n_q, d = q.shape
    scale = 1.0 / np.sqrt(d)
    o = np.empty_like(q)  # (Nq, d)
    combine_bytes = barriers = 0
    for i0 in range(0, n_q, block_q):
        q_i = q[i0:i0 + block_q]  # (Br, d): every warp holds all of Q_i
        m_i = np.full(len(q_i), -np.inf)
        l_i, acc = np.zeros(len(q_i)), np.zeros_like(q_i)
        for j0 in range(0, k.shape[0], block_k):
            cols = np.array_split(np.arange(j0, min(j0 + block_k, k.shape[0])), warps)
            partial = []
            for w_cols in cols:  # one warp: its slice of the key columns
                if len(w_cols) == 0:
                    continue
                s_w = q_i @ k[w_cols].T * scale  # (Br, Bc / warps)
                m_w = s_w.max(axis=1)
                p_w = np.exp(s_w - m_w[:, None])
                partial.append((m_w, p_w.sum(axis=1), p_w @ v[w_cols]))  # (Br,), (Br,), (Br, d)
            # -- combine through shared memory: every warp writes (m_w, l_w, acc_w), barrier, reduce
            combine_bytes += len(partial) * len(q_i) * (d + 2) * ACC_ITEMSIZE
            barriers += 1
            for m_w, l_w, acc_w in partial:
                m_i, l_i, acc = combine_states(m_i, l_i, acc, m_w, l_w, acc_w)
        o[i0:i0 + block_q] = acc / l_i[:, None]
    br, bc = min(block_q, n_q), min(block_k, k.shape[0])
    held = {"Q_i": br * d, "K_j slice": -(-bc // warps) * d, "V_j slice": -(-bc // warps) * d,
            "S slice": br * -(-bc // warps), "partial acc": br * d}
    return o, WarpReport("split-K (FlashAttention-1)", warps, held, combine_bytes, barriers)


def split_q_forward(q, k, v, warps: int = 4, block_q: int = 64, block_k: int = 64):
    """FlashAttention-2's split-Q: warps split the query rows of each tile; returns (o, WarpReport).

    q: (Nq, d); k, v: (Nk, d); o: (Nq, d). Each warp runs the online softmax on its own rows over
    all of K_j, V_j: nothing is combined between warps.
    """
    q, k, v, warps, block_q, block_k = _inputs(q, k, v, warps, block_q, block_k)
    n_q, d = q.shape
    scale = 1.0 / np.sqrt(d)
    o = np.empty_like(q)  # (Nq, d)
    for i0 in range(0, n_q, block_q):
        rows_i = np.arange(i0, min(i0 + block_q, n_q))
        for w_rows in np.array_split(rows_i, warps):  # one warp: its slice of the query rows
            if len(w_rows) == 0:
                continue
            q_w = q[w_rows]  # (Br / warps, d)
            m_i, l_i, acc = np.full(len(w_rows), -np.inf), np.zeros(len(w_rows)), np.zeros_like(q_w)
            for j0 in range(0, k.shape[0], block_k):
                k_j, v_j = k[j0:j0 + block_k], v[j0:j0 + block_k]  # (Bc, d): read by every warp
                s = q_w @ k_j.T * scale  # (Br / warps, Bc)
                m_new = np.maximum(m_i, s.max(axis=1))
                p = np.exp(s - m_new[:, None])
                alpha = np.exp(m_i - m_new)
                l_i, acc, m_i = alpha * l_i + p.sum(axis=1), alpha[:, None] * acc + p @ v_j, m_new
            o[w_rows] = acc / l_i[:, None]  # the warp's rows are finished: no combine
    br, bc = min(block_q, n_q), min(block_k, k.shape[0])
    held = {"Q_i slice": -(-br // warps) * d, "K_j": bc * d, "V_j": bc * d,
            "S slice": -(-br // warps) * bc, "acc": -(-br // warps) * d}
    return o, WarpReport("split-Q (FlashAttention-2)", warps, held, 0, 0)


def compare(n: int = 256, d: int = 64, warps: int = 4, block_q: int = 64, block_k: int = 64,
            seed: int = 0) -> str:
    """Both schemes on one random (n, d) head: their error against naive attention and their costs."""
    from .reference import naive_attention

    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((check_positive_int("n", n), check_positive_int("d", d))) for _ in range(3))
    ref = naive_attention(q, k, v)  # (N, d)
    lines = [f"N = {n}, d = {d}, {warps} warps, tiles {block_q} x {block_k}"]
    for fn in (split_k_forward, split_q_forward):
        o, rep = fn(q, k, v, warps=warps, block_q=block_q, block_k=block_k)
        held = ", ".join(f"{name} {x}" for name, x in rep.held_per_warp.items())
        lines.append(f"{rep.scheme:<27} max |o - naive| {np.abs(o - ref).max():.1e}; per warp (elements): {held}")
        lines.append(f"{'':<27} combined through shared memory: {rep.combine_bytes:,} B, "
                     f"{rep.combine_barriers} barriers")
    return "\n".join(lines)
