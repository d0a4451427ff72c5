"""The exercise registry: every exercise, its parts, points, cases, tolerances and hints.

One :class:`Exercise` per module in ``exercises/`` (its id is the module name, e.g.
``ex03_tiled_forward``). Each exercise has parts, one per function (or quiz answer) the learner
writes; each part names its reference, public cases, hidden-case generator (from
:mod:`flashlab.grading.cases`), tolerance by dtype and hints in increasing detail.
Nothing here runs at import time beyond defining data: cases are built in the grading child.
"""
from __future__ import annotations

from flashlab.grading import cases
from flashlab.grading.spec import (DEFAULT_TOLERANCE, GRAD_TOLERANCE, KERNEL_GPU_TOLERANCE, Case, Exercise,
                                   Part, answer_hash)

__all__ = ["DEFAULT_TOLERANCE", "EXERCISES", "Case", "Exercise", "Part", "answer_hash", "get_exercise"]


# The quiz answers are stored as hashes (answer_hash); the numbers come from flashlab.traffic.
def _quiz_part(name, title, stored, kind="choice", hints=()):
    reference = (lambda: stored) if kind == "choice" else stored
    return Part(name, title, 1, reference, lambda rng: [Case(name, {})], kind=kind, hints=hints)


_QUIZ = (
    _quiz_part("Q1", "resource FlashAttention saves", "a4b10e3dfbac39c20ccc",
               hints=("Count what moves between HBM and SRAM in naive attention (exercise 01).",)),
    _quiz_part("Q2", "what it does not save", "d58e973f7d5dbd054f65",
               hints=("Compare flashlab.flops.attention_flops for naive and tiled: same matmuls.",)),
    _quiz_part("Q3", "why the online softmax is exact", "2bdaf6029225a400162c",
               hints=("Write l after two chunks with and without the rescale factor exp(m_old - m_new).",)),
    _quiz_part("Q4", "why prefill gains more than decode", "96b7f72cd6ad4ee71add",
               hints=("With Nq = 1, how big are S and P next to K and V?",)),
    _quiz_part("Q5", "prefill traffic ratio", lambda: cases.traffic_ratio(4096), kind="number",
               hints=("Use your naive_hbm_bytes and fa2_forward_bytes with the sizes in the question.",)),
    _quiz_part("Q6", "decode traffic ratio", lambda: cases.traffic_ratio(1), kind="number",
               hints=("Same as Q5 with nq=1: one query block.",)),
)


# ----------------------------------------------------------------------------- the registry
_ATTN_HINTS = ("Scores are scale * q @ k^T with k transposed on its last two axes (np.swapaxes(k, -1, -2)).",
               "Subtract each row's max before exp(); with causal, set S[i, j] = -inf where j > i.",
               "Return the result in q's dtype: p @ v, then .astype(q.dtype) if you computed in float64.")
_TILED_HINTS = ("Loop over query blocks outside, key blocks inside; keep m_i, l_i, acc per query block.",
                "When the max grows, rescale l_i and acc by alpha = exp(m_i_old - m_i_new) before adding.",
                "Ragged tiles: slice with min(start + block, N). Causal: skip a key block when "
                "its first key is past the block's last query row; mask the diagonal tiles.")

EXERCISES: dict[str, Exercise] = {e.name: e for e in (
    Exercise("ex01_naive", "naive attention and its HBM bytes", (
        Part("naive_attention", "naive attention", 2, cases.naive_reference, cases.naive_public, cases.naive_hidden,
             _ATTN_HINTS),
        Part("naive_hbm_bytes", "HBM bytes of naive attention", 1, cases.naive_bytes_reference, cases.naive_bytes_public,
             cases.naive_bytes_hidden, ("Algorithm 0 writes S and P to HBM and reads each back once.",
                                   "Reads: Q, K, S, P, V. Writes: S, P, O. Multiply elements by itemsize."),
             kind="exact"),
    )),
    Exercise("ex02_softmax", "safe softmax, online softmax, combining states", (
        Part("safe_softmax", "safe softmax", 1, cases.softmax_reference, cases.softmax_public, cases.softmax_hidden,
             ("exp(1000) is inf: subtract the row max first (keepdims=True keeps it broadcastable).",)),
        Part("online_softmax", "online softmax over chunks", 2, cases.softmax_reference, cases.online_public,
             cases.online_hidden, ("Keep m (max so far) and l (sum of exp(x - m) so far) per row.",
                              "When a chunk raises the max from m to m_new, multiply l by exp(m - m_new).",
                              "Start with m = -inf and l = 0; the last chunk may be shorter than chunk.")),
        Part("combine_states", "combine two (m, l, acc) states", 2, cases.combine_reference, cases.combine_public,
             cases.combine_hidden, ("m = max(m_a, m_b); scale each side by exp(m_side - m).",
                               "exp(-inf - (-inf)) is NaN: treat a side with m = -inf as factor 0."),
             outputs=("m", "l", "acc")),
    )),
    Exercise("ex03_tiled_forward", "tiled forward (FlashAttention-2 loop order)", (
        Part("tiled_attention", "tiled forward", 4, cases.naive_reference, cases.tiled_public, cases.tiled_hidden,
             _TILED_HINTS, time_limit_s=30.0),
    )),
    Exercise("ex04_causal_tiles", "causal tile skipping", (
        Part("causal_tile_skipped", "is tile (i, j) fully masked?", 1, cases.tile_skip_reference,
             cases.tile_skip_public, cases.tile_skip_hidden,
             ("The block's last query row is min((i + 1) * block_q, nq) - 1.",
              "Skipped when the tile's first key column j * block_k is past that row."), kind="exact"),
        Part("count_computed_tiles", "tiles computed by the loop", 1, cases.count_tiles_reference,
             lambda rng: cases.count_tiles_cases([(16, 16, 4, 4, False), (16, 16, 4, 4, True)]),
             lambda rng: cases.count_tiles_cases([(int(a), int(b), int(c), int(d), bool(e)) for a, b, c, d, e in zip(
                 rng.integers(1, 300, 6), rng.integers(1, 300, 6), rng.choice([16, 32, 64], 6),
                 rng.choice([16, 32, 64], 6), (1, 1, 1, 0, 1, 1))]),
             ("ceil(n / block) blocks per axis; with causal, count only tiles that are not skipped.",),
             kind="exact"),
    )),
    Exercise("ex05_traffic", "HBM traffic of the tiled forward", (
        Part("fa2_forward_bytes", "FlashAttention-2 forward bytes", 2, cases.fa2_bytes_reference, cases.fa2_bytes_public,
             cases.fa2_bytes_hidden, ("K and V are read once per query block, not once overall.",
                                 "Causal: skipped tiles read nothing. lse is stat_itemsize bytes per row."),
             kind="exact"),
    )),
    Exercise("ex06_triton_primer", "Triton warm-up: vector add and row softmax", (
        Part("vector_add", "vector add kernel", 1, cases.add_reference,
             lambda rng: cases.add_cases(rng, [1000], ["float32"]),
             lambda rng: cases.add_cases(rng, [int(rng.integers(1, 5000)), 1, int(rng.integers(1, 3000))],
                                    ["float32", "float32", "float16"], why="n not a multiple of BLOCK"),
             ("Each program handles offs = pid * BLOCK + tl.arange(0, BLOCK).",
              "Mask the last block: mask = offs < n_elements on both loads and the store."),
             tensors=True, must_launch=("add_kernel",), time_limit_s=60.0),
        Part("row_softmax", "row softmax kernel", 1, cases.row_softmax_reference,
             lambda rng: cases.row_softmax_cases(rng, [(4, 100)], ["float32"]),
             lambda rng: cases.row_softmax_cases(rng, [(int(rng.integers(1, 9)), int(rng.integers(1, 300))), (3, 1)],
                                            ["float32", "float16"], why="N not a power of two")
             + cases.row_softmax_cases(rng, [(5, 77)], ["float32"], scale=1000.0, why=cases.LARGE_LOGITS),
             ("BLOCK_N = triton.next_power_of_2(N); masked lanes load -inf so they add exp(-inf) = 0.",
              "Subtract tl.max(x, axis=0) before tl.exp."),
             tensors=True, must_launch=("softmax_kernel",), time_limit_s=60.0),
    ), needs_triton=True),
    Exercise("ex07_kernel_inner_loop", "the flash forward kernel's inner loop", (
        Part("flash_forward", "inner loop of the forward kernel", 3, cases.flash_reference,
             lambda rng: [cases.flash_case(rng, 1, 32, 32, 16, "float32")], lambda rng: cases.flash_hidden(rng, None),
             ("qk = tl.dot(q, k) * qk_scale; keys past N_K must score -inf (tl.where).",
              "m_ij = max(m_i, rowmax(qk)); p = exp(qk - m_ij); alpha = exp(m_i - m_ij).",
              "l_i = l_i * alpha + rowsum(p); acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v); m_i = m_ij."),
             tensors=True, gpu_tolerance=KERNEL_GPU_TOLERANCE, must_launch=("flash_fwd_kernel",),
             time_limit_s=60.0),
    ), needs_triton=True),
    Exercise("ex08_kernel_causal", "causal masking in the kernel", (
        Part("flash_forward", "causal forward kernel", 2, cases.flash_reference,
             lambda rng: [cases.flash_case(rng, 1, 32, 32, 16, "float32", True)], lambda rng: cases.flash_hidden(rng, True),
             ("Inside diagonal tiles: qk = tl.where(offs_m[:, None] >= offs_n[None, :], qk, -inf).",
              "Loop bound: hi = min(N_K, (start_m + 1) * BLOCK_M, N_Q); key blocks past the block's last real row are fully masked: never load them."),
             tensors=True, gpu_tolerance=KERNEL_GPU_TOLERANCE, must_launch=("flash_fwd_kernel",),
             time_limit_s=60.0),
    ), needs_triton=True),
    Exercise("ex09_backward_pieces", "backward: D and dS", (
        Part("rowsum_do_o", "D = rowsum(dO * O)", 1, cases.rowsum_reference,
             lambda rng: cases.rowsum_cases(rng, [(4, 3)]), lambda rng: cases.rowsum_cases(rng, [(1, 5), (2, 7, 3), (9, 1)]),
             ("Elementwise product, then sum over the last axis.",)),
        Part("softmax_backward", "dS = P * (dP - D)", 1, cases.ds_reference,
             lambda rng: cases.ds_cases(rng, [(3, 4)]), lambda rng: cases.ds_cases(rng, [(1, 6), (7, 2), (5, 5)]),
             ("D has one value per row: broadcast it with D[..., None].",)),
    )),
    Exercise("ex10_tiled_backward", "tiled backward (FlashAttention-2 Algorithm 2)", (
        Part("tiled_attention_backward", "tiled backward", 4, cases.backward_reference, cases.backward_public,
             cases.backward_hidden,
             ("Recompute P for each tile from the saved lse: P = exp(scale * Q_i K_j^T - lse_i).",
              "dV_j += P^T dO_i; dP = dO_i V_j^T; dS = P * (dP - D_i); dQ_i += scale dS K_j; "
              "dK_j += scale dS^T Q_i.",
              "Causal: mask the diagonal tiles with -inf before exp and skip fully masked tiles."),
             outputs=("dq", "dk", "dv"), tolerance=dict(GRAD_TOLERANCE), time_limit_s=30.0),
    )),
    Exercise("ex11_quiz", "self-test questions", _QUIZ),
)}


def get_exercise(name: str) -> Exercise:
    """The exercise with this id; ValueError listing the ids when there is none."""
    if not isinstance(name, str) or name not in EXERCISES:
        raise ValueError(f"exercise={name!r} is not a known exercise; expected one of {sorted(EXERCISES)}")
    return EXERCISES[name]


from flashlab import selftest as _selftest  # noqa: E402  (imports this module's Exercise/Part)

EXERCISES.update(_selftest.exercises())  # the notebooks' graded self-test questions
