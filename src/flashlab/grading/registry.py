"""The exercise registry: every exercise, its parts, points, cases, tolerances and hints.

One :class:`Exercise` per module in ``exercises/`` (its id is the module name, e.g.
``ex03_tiled_forward``). Each exercise has parts, one per function (or quiz answer) the learner
writes; each part names its reference, public cases, hidden-case generator (from
:mod:`flashlab.grading.cases`), tolerance by dtype and hints in increasing detail.
Nothing here runs at import time beyond defining data: cases are built in the grading child.
"""
from __future__ import annotations

from flashlab.release import require_compiled_python

require_compiled_python()  # a student release compiled by another Python: say so first
from flashlab.grading import cases  # noqa: E402
from flashlab.grading.spec import (DEFAULT_TOLERANCE, GRAD_TOLERANCE, KERNEL_GPU_TOLERANCE, Case, Exercise,
                                   Part, answer_hash)

__all__ = ["DEFAULT_TOLERANCE", "EXERCISES", "Case", "Exercise", "Part", "answer_hash", "get_exercise"]


# The quiz answers are stored as hashes (answer_hash); the numbers come from flashlab.traffic.
# ``why``: what the question asks and what a typical wrong answer counted, never the answer; a wrong answer
# that matches a known mistake is named too (mistakes.py).
def _quiz_part(name, title, stored, kind="choice", hints=(), why=""):
    reference = (lambda: stored) if kind == "choice" else stored
    return Part(name, title, 1, reference, lambda rng: [Case(name, {}, why=why)], kind=kind, hints=hints)


_QUIZ = (
    _quiz_part("Q1", "resource FlashAttention saves", "a4b10e3dfbac39c20ccc",
               hints=("Count what moves between HBM and SRAM in naive attention (exercise 01).",
                      "Compare flashlab.flops.attention_flops for naive and tiled: what stays the same?",
                      "The FLOPs are equal; the S and P round trips through GPU main memory are gone."),
               why="which resource the tiling saves. A wrong letter usually takes arithmetic (FLOPs, exp() calls) or "
                   "on-chip memory for it: set what exercises 01 and 03 compute beside where each keeps S and P"),
    _quiz_part("Q2", "what it does not save", "d58e973f7d5dbd054f65",
               hints=("Compare flashlab.flops.attention_flops for naive and tiled: same matmuls.",
                      "Three of the four options are about S and P in HBM; the tiled loop never stores them.",
                      "Q K^T and P V are computed in full, tile by tile: their FLOPs do not shrink."),
               why="what FlashAttention leaves unchanged. A wrong letter usually takes something the tiled loop "
                   "removes for something it keeps: check each option against exercise 03's loop (what does it "
                   "store in HBM, which products does it compute?)"),
    _quiz_part("Q3", "why the online softmax is exact", "2bdaf6029225a400162c",
               hints=("Write l after two chunks with and without the rescale factor exp(m_old - m_new).",
                      "exp(x - m_old) * exp(m_old - m_new) = exp(x - m_new) holds exactly in real arithmetic.",
                      "So after the last chunk, l = sum_j exp(x_j - max): the same number a two-pass softmax "
                      "computes, whatever the chunking; no estimate is involved."),
               why="why the online softmax gives the two-pass result exactly. A wrong letter usually rests on "
                   "rounding, a guessed max or linearity: write l after two chunks, with and without the factor "
                   "exp(m_old - m_new)"),
    _quiz_part("Q4", "why prefill gains more than decode", "96b7f72cd6ad4ee71add",
               hints=("With Nq = 1, how big are S and P next to K and V?",
                      "FlashAttention removes the S and P traffic; K and V must be read by every method.",
                      "At Nq = 1, S and P are Nk values each, against 2 Nk d for K and V: little left to save."),
               why="why decode gains less than prefill. A wrong letter usually blames compute, the kernel or the "
                   "tiles: count the elements of S and P beside those of K and V when Nq = 1"),
    _quiz_part("Q5", "prefill traffic ratio", lambda: cases.traffic_ratio(4096), kind="number",
               hints=("Use your naive_hbm_bytes and fa2_forward_bytes with the sizes in the question.",
                      "naive_hbm_bytes(4096, 4096, 128, itemsize=2) / fa2_forward_bytes(4096, 4096, 128, "
                      "block_q=128, block_k=128, itemsize=2, stat_itemsize=4).",
                      "By hand: naive moves 4 N^2 + 4 N d elements; FA2 reads Q once, K and V once per query "
                      "block (N / 128 times), writes O and an fp32 lse."),
               why="naive attention's HBM bytes over the FlashAttention-2 forward's at Nq = Nk = 4096. A wrong ratio "
                   "usually counts K and V as read once (the forward reads them once per query block), S and P once "
                   "each (naive writes each and reads it back), or divides the other way"),
    _quiz_part("Q6", "decode traffic ratio", lambda: cases.traffic_ratio(1), kind="number",
               hints=("Same as Q5 with nq=1: one query block.",
                      "naive_hbm_bytes(1, 4096, 128, itemsize=2) / fa2_forward_bytes(1, 4096, 128, block_q=128, "
                      "block_k=128, itemsize=2, stat_itemsize=4).",
                      "Both read K and V once (2 * 4096 * 128 elements); naive adds only 4 * 4096 elements of "
                      "S and P traffic: the ratio is close to 1."),
               why="the same ratio at Nq = 1. A wrong ratio usually counts the one query row as a full block of 128 "
                   "rows (a ragged block moves only its real rows, exercise 05), uses Q5's shape, or divides the "
                   "other way"),
)


# ----------------------------------------------------------------------------- the registry
# The kernels of exercises 07/08 in float32: the interpreter's dot accumulates in float32 like the
# GPU's, so the large-logit case's scores (about 1e2) carry absolute errors near 1e-5; GRAD_TOLERANCE's
# float32 entry (1e-4 + 1e-3 |expected|) leaves room for any loop order while a real mistake is off by 1e-1.
_KERNEL_TOLERANCE = dict(DEFAULT_TOLERANCE, float32=GRAD_TOLERANCE["float32"])
# Hints unfold: level 1 the idea, level 2 the step, level 3 pseudocode (never the stub's business).
_ATTN_HINTS = (
    "Three steps: scores S = scale * Q K^T, a softmax along each row of S, then P V.",
    "Transpose k on its last two axes (np.swapaxes(k, -1, -2)) so batch dims broadcast; subtract each row's "
    "max before exp(); with causal, set S[i, j] = -inf where j > i before the softmax.",
    "s = scale * (q @ swapaxes(k)); if causal: s = where(col > row, -inf, s); m = s.max(-1, keepdims=True); "
    "p = exp(s - m); p /= p.sum(-1, keepdims=True); return (p @ v).astype(q.dtype)")
_TILED_HINTS = (
    "Two nested loops: query blocks outside, key blocks inside (FlashAttention-2 Algorithm 1, lines 3 and 6). "
    "Each query block keeps a running max m_i, a running sum l_i and an unnormalised output acc.",
    "For each tile: S = scale * Q_i K_j^T; m_new = max(m_i, rowmax(S)); rescale the old l_i and acc by "
    "alpha = exp(m_i - m_new) before adding the tile's exp(S - m_new) terms. Divide by l_i once, after the "
    "key loop. Ragged tiles: slice up to min(start + block, N).",
    "for q0 in range(0, nq, block_q): q1 = min(q0 + block_q, nq); m_i = -inf, l_i = 0, acc = 0; "
    "for k0 in range(0, nk, block_k): [causal: break when k0 > q1 - 1]; s = scale * Q_i K_j^T "
    "[causal: -inf where col > row]; m_new = max(m_i, s.max(-1)); alpha = exp(m_i - m_new); "
    "p = exp(s - m_new[..., None]); l_i = alpha l_i + p.sum(-1); acc = alpha[..., None] acc + p V_j; m_i = m_new; "
    "after the loop: o[q0:q1] = acc / l_i[..., None]")
_FLASH_KERNEL_HINTS = (
    "One program per (query block, batch element): grid = (cdiv(Nq, BLOCK_M), Z). The program loads its "
    "Q block once, loops over key blocks keeping m_i, l_i, acc in float32, and stores O_i once; it is "
    "exercise 03's inner loop with pointers.",
    "Pointers: base + off_z * stride_z + rows[:, None] * stride_row + offs_d[None, :] * stride_col, with "
    "rows = start * BLOCK + tl.arange(0, BLOCK). Load K_j transposed (rows along axis 1) so tl.dot(q, kT) is "
    "(BLOCK_M, BLOCK_N). Mask loads and the store with rows < N; give keys past N_K the score -inf "
    "(tl.where), or the padded zeros add exp(0 - m) to l_i.",
    "start_m, off_z = program_id(0), program_id(1); offs_m, offs_d = aranges; q = load(q_ptrs, "
    "mask=offs_m[:, None] < N_Q, other=0); m_i = full(-inf); l_i = 0; acc = 0; for start_n in range(0, N_K, "
    "BLOCK_N): offs_n = start_n + tl.arange(0, BLOCK_N); kT, v = masked loads; qk = tl.dot(q, kT) * qk_scale; qk = where(offs_n[None, :] < N_K, qk, -inf); "
    "m_new = maximum(m_i, max(qk, 1)); p = exp(qk - m_new[:, None]); alpha = exp(m_i - m_new); "
    "l_i = l_i * alpha + sum(p, 1); acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v); m_i = m_new; "
    "store(o_ptrs, (acc / l_i[:, None]).to(Out.dtype.element_ty), mask=offs_m[:, None] < N_Q). Wrapper: "
    "out = torch.empty_like(q); flash_fwd_kernel[grid](q, k, v, out, *q.stride(), ..., nq, nk, scale, "
    "BLOCK_M=..., BLOCK_N=..., HEAD_DIM=d)")
_CAUSAL_KERNEL_HINTS = (
    "Two changes to your exercise 07 kernel: stop the key loop early (blocks wholly to the right of the "
    "diagonal are never loaded: the grader fills them with NaN), and mask the blocks that cross it.",
    "The block's last real query row is min((start_m + 1) * BLOCK_M, N_Q) - 1: no key past it is visible, so "
    "the loop's upper bound is min(N_K, that row + 1). Inside the loop, -inf where the key column is past the "
    "query row. Pass CAUSAL as a tl.constexpr so the non-causal kernel pays nothing.",
    "hi = N_K; if CAUSAL: hi = minimum(N_K, minimum((start_m + 1) * BLOCK_M, N_Q)); for start_n in range(0, "
    "hi, BLOCK_N): ... qk = where(offs_n[None, :] < N_K, qk, -inf); if CAUSAL: qk = where(offs_n[None, :] <= "
    "offs_m[:, None], qk, -inf); ... (the rest as in exercise 07)")

# Exercises 13 and 14 leave the tile sizes to the learner: every integer constexpr at most this, and cases
# longer than it (ex13: more than 128 query rows and keys; ex14: splits of 136-150 keys), so a tile as long
# as the sequence, which leaves the loop one step, is refused (ex12 asks for its block_n instead).
MAX_TILE = 128

EXERCISES: dict[str, Exercise] = {e.name: e for e in (
    Exercise("ex01_naive", "naive attention and its HBM bytes", (
        Part("naive_attention", "naive attention", 2, cases.naive_reference, cases.naive_public, cases.naive_hidden,
             _ATTN_HINTS),
        Part("naive_hbm_bytes", "HBM bytes of naive attention", 1, cases.naive_bytes_reference, cases.naive_bytes_public,
             cases.naive_bytes_hidden, (
                 "Algorithm 0 writes S and P to HBM and reads each back once; count every array that moves.",
                 "Reads: Q, K, S, P, V. Writes: S, P, O. S and P are nq x nk; multiply elements by itemsize.",
                 "dv = d if dv is None; elements = nq*d + nk*d + 4*nq*nk + nk*dv + nq*dv; return elements * itemsize"),
             kind="exact"),
    )),
    Exercise("ex02_softmax", "safe softmax, online softmax, combining states", (
        Part("safe_softmax", "safe softmax", 1, cases.softmax_reference, cases.softmax_public, cases.softmax_hidden,
             ("exp(1000) is inf: softmax(x) = softmax(x - c) for any c per row, so pick c = the row max.",
              "m = x.max(axis=-1, keepdims=True) keeps it broadcastable; exp(x - m) is at most 1.",
              "m = x.max(-1, keepdims=True); e = np.exp(x - m); return e / e.sum(-1, keepdims=True)")),
        Part("online_softmax", "online softmax over chunks", 2, cases.softmax_reference, cases.online_public,
             cases.online_hidden, (
                 "Keep two numbers per row while reading the chunks: the max so far m and the sum so far "
                 "l of exp(x - m). The probabilities come in a second pass once m and l are final.",
                 "When a chunk raises the max from m to m_new, the old sum was taken relative to m: multiply it "
                 "by exp(m - m_new) before adding the chunk's exp(x - m_new). Start from m = -inf, l = 0.",
                 "for start in range(0, n, chunk): xc = x[..., start:start + chunk]; m_new = maximum(m, "
                 "xc.max(-1)); l = l * exp(m - m_new) + exp(xc - m_new[..., None]).sum(-1); m = m_new; "
                 "then return exp(x - m[..., None]) / l[..., None]")),
        Part("combine_states", "combine two (m, l, acc) states", 2, cases.combine_reference, cases.combine_public,
             cases.combine_hidden, (
                 "Both states must be brought to the same reference max before their sums can be added.",
                 "m = max(m_a, m_b); scale each side's l and acc by exp(m_side - m). exp(-inf - (-inf)) is NaN: "
                 "a side with m = -inf has factor 0.",
                 "m = maximum(m_a, m_b); m_ref = where(m == -inf, 0, m); alpha = where(m_a == -inf, 0, exp(m_a - "
                 "m_ref)); beta likewise; l = alpha l_a + beta l_b; acc = alpha[..., None] acc_a + beta[..., None] "
                 "acc_b"),
             outputs=("m", "l", "acc")),
    )),
    Exercise("ex03_tiled_forward", "tiled forward (FlashAttention-2 loop order)", (
        Part("tiled_attention", "tiled forward", 4, cases.naive_reference, cases.tiled_public, cases.tiled_hidden,
             _TILED_HINTS, time_limit_s=30.0),
    )),
    Exercise("ex04_causal_tiles", "causal tile skipping", (
        Part("causal_tile_skipped", "is tile (i, j) fully masked?", 1, cases.tile_skip_reference,
             cases.tile_skip_public, cases.tile_skip_hidden,
             ("Compare the tile's smallest key column with its largest query row.",
              "The block's last query row is min((i + 1) * block_q, nq) - 1 (the last block may be ragged).",
              "return j * block_k > min((i + 1) * block_q, nq) - 1"), kind="exact"),
        Part("count_computed_tiles", "tiles computed by the loop", 1, cases.count_tiles_reference,
             lambda rng: cases.count_tiles_cases([(16, 16, 4, 4, False), (16, 16, 4, 4, True)]),
             cases.count_tiles_hidden,
             ("ceil(n / block) blocks per axis; causal keeps only the tiles that are not skipped.",
              "Loop over every (i, j) and count those your causal_tile_skipped says are computed.",
              "n_i = -(-nq // block_q); n_j = -(-nk // block_k); return sum(not (causal and skipped(i, j)) "
              "for i in range(n_i) for j in range(n_j))"),
             kind="exact"),
    )),
    Exercise("ex05_traffic", "HBM traffic of the tiled forward", (
        Part("fa2_forward_bytes", "FlashAttention-2 forward bytes", 2, cases.fa2_bytes_reference, cases.fa2_bytes_public,
             cases.fa2_bytes_hidden, (
                 "Walk the loop of exercise 03 and add the bytes of every load and store it makes.",
                 "K and V are read once per query block, not once overall. Causal: a tile whose first key is "
                 "past its query block's last real row is skipped and reads nothing (exercise 04). A ragged last "
                 "block moves only the rows (or keys) it has. lse is stat_itemsize bytes per row.",
                 "for each query block: rows = its size; total += rows*d*itemsize; for each key block not skipped: "
                 "total += cols*(d + dv)*itemsize; total += rows*dv*itemsize + rows*stat_itemsize"),
             kind="exact"),
    )),
    Exercise("ex06_triton_primer", "Triton warm-up: vector add and row softmax", (
        Part("vector_add", "vector add kernel", 1, cases.add_reference,
             lambda rng: cases.add_cases(rng, [1000], ["float32"], hint=2),
             lambda rng: cases.add_cases(rng, [int(rng.integers(1, 5000)), 1, int(rng.integers(1, 3000))],
                                    ["float32", "float32", "float16"], why="n not a multiple of BLOCK", hint=2),
             ("Each program handles one block of BLOCK consecutive elements; the grid has cdiv(n, BLOCK) programs.",
              "offs = pid * BLOCK + tl.arange(0, BLOCK); the last block is ragged: mask = offs < n_elements on "
              "both loads and the store.",
              "pid = tl.program_id(0); offs = ...; mask = ...; tl.store(Out + offs, tl.load(X + offs, mask=mask) + "
              "tl.load(Y + offs, mask=mask), mask=mask); wrapper: out = torch.empty_like(x); "
              "add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=256)"),
             tensors=True, must_launch=("add_kernel",), time_limit_s=60.0),
        Part("row_softmax", "row softmax kernel", 1, cases.row_softmax_reference,
             lambda rng: cases.row_softmax_cases(rng, [(4, 100)], ["float32"]),
             lambda rng: cases.row_softmax_cases(rng, [(int(rng.integers(1, 9)), int(rng.integers(1, 300))), (3, 1)],
                                            ["float32", "float16"], why="N not a power of two")
             + cases.row_softmax_cases(rng, [(5, 77)], ["float32"], scale=1000.0, why=cases.LARGE_LOGITS)
             + [cases.strided_row_case(rng, int(rng.integers(20, 120)))],
             ("One program per row; the whole row fits in one block of BLOCK_N = next_power_of_2(N) lanes.",
              "Masked lanes load -inf so they add exp(-inf) = 0 to the sum; subtract tl.max(x, axis=0) before "
              "tl.exp; compute in float32 and cast on the store.",
              "row = program_id(0); offs = arange(0, BLOCK_N); x = load(X + row * stride_xm + offs, mask=offs < "
              "n_cols, other=-inf).to(float32); e = exp(x - max(x, 0)); store(..., (e / sum(e, 0)).to(...), mask=...)"),
             tensors=True, must_launch=("softmax_kernel",), time_limit_s=60.0),
    ), needs_triton=True),
    Exercise("ex07_kernel_inner_loop", "the flash forward kernel, written from its signature", (
        Part("flash_forward", "forward kernel, non-causal", 4, cases.flash_scaled_reference,
             lambda rng: cases.flash_kernel_public(rng, None), lambda rng: cases.flash_kernel_hidden(rng, None),
             _FLASH_KERNEL_HINTS, tolerance=dict(_KERNEL_TOLERANCE), gpu_tolerance=KERNEL_GPU_TOLERANCE, tensors=True,
             must_launch=("flash_fwd_kernel",), time_limit_s=60.0),
    ), needs_triton=True),
    Exercise("ex08_kernel_causal", "causal masking in the kernel", (
        Part("flash_forward", "causal forward kernel", 3, cases.flash_scaled_reference,
             lambda rng: cases.flash_kernel_public(rng, True), lambda rng: cases.flash_kernel_hidden(rng, True),
             _CAUSAL_KERNEL_HINTS, tolerance=dict(_KERNEL_TOLERANCE), gpu_tolerance=KERNEL_GPU_TOLERANCE, tensors=True,
             must_launch=("flash_fwd_kernel",), time_limit_s=60.0),
    ), needs_triton=True),
    Exercise("ex09_backward_pieces", "backward: D and dS", (
        Part("rowsum_do_o", "D = rowsum(dO * O)", 1, cases.rowsum_reference,
             lambda rng: cases.rowsum_cases(rng, [(4, 3)]), lambda rng: cases.rowsum_cases(rng, [(1, 5), (2, 7, 3), (9, 1)]),
             ("D_i = sum_j P_ij dP_ij, which equals sum_c dO_ic O_ic: no P needed.",
              "Elementwise product, then sum over the last axis.",
              "return (do * o).sum(axis=-1)")),
        Part("softmax_backward", "dS = P * (dP - D)", 1, cases.ds_reference,
             lambda rng: cases.ds_cases(rng, [(3, 4)]), lambda rng: cases.ds_cases(rng, [(1, 6), (7, 2), (5, 5), (2, 3, 5)]),
             ("The softmax Jacobian is diag(p) - p p^T; applied to dP row by row it gives P * (dP - D).",
              "D has one value per row: broadcast it along the columns with D[..., None].",
              "return p * (dp - D[..., None])")),
    )),
    Exercise("ex10_tiled_backward", "tiled backward (FlashAttention-2 Algorithm 2)", (
        Part("tiled_attention_backward", "tiled backward", 4, cases.backward_reference, cases.backward_public,
             cases.backward_hidden, (
                 "Loop over key blocks outside (dK_j, dV_j accumulate there) and query blocks inside; never store "
                 "P: recompute each tile of it from the saved lse.",
                 "Per tile: P = exp(scale * Q_i K_j^T - lse_i); dV_j += P^T dO_i; dP = dO_i V_j^T; "
                 "dS = P * (dP - D_i) with D = rowsum(dO * O); dQ_i += scale dS K_j; dK_j += scale dS^T Q_i. "
                 "Causal: skip fully masked tiles, mask the diagonal ones with -inf before exp.",
                 "D = (do * o).sum(-1); for k0 in key blocks: dk_j = dv_j = 0; for q0 in query blocks: [causal: "
                 "continue when k0 > q1 - 1]; s = scale * q_i @ k_j^T [causal mask]; p = exp(s - lse[q0:q1, None]); "
                 "dv_j += p^T @ do_i; ds = p * (do_i @ v_j^T - D[q0:q1, None]); dq[q0:q1] += scale * ds @ k_j; "
                 "dk_j += scale * ds^T @ q_i; after the inner loop: dk[k0:k1] = dk_j; dv[k0:k1] = dv_j"),
             outputs=("dq", "dk", "dv"), tolerance=dict(GRAD_TOLERANCE), time_limit_s=30.0),
    )),
    Exercise("ex11_quiz", "self-test questions", _QUIZ),
    Exercise("ex12_triton_online_softmax", "Triton: softmax of rows longer than one block", (
        Part("online_row_softmax", "online softmax kernel over column blocks", 3, cases.online_kernel_reference,
             cases.online_kernel_public, cases.online_kernel_hidden, (
                 "A row no longer fits in one block: read it block by block, keeping the running max m_i and "
                 "running sum l_i of exercise 02's online softmax, then read it a second time to write "
                 "exp(x - m_i) / l_i.",
                 "m_i and l_i are scalars (tl.full([], ...)); per block: m_new = max(m_i, tl.max(x, 0)), "
                 "l_i = l_i * exp(m_i - m_new) + tl.sum(exp(x - m_new), 0). If m_new is still -inf (every entry "
                 "so far masked), exp(-inf - (-inf)) is NaN: subtract 0 instead of m_new in that case.",
                 "row = program_id(0); m_i = full([], -inf); l_i = full([], 0.); for start in range(0, n_cols, "
                 "BLOCK_N): cols = start + arange; x = load(..., mask=cols < n_cols, other=-inf).to(float32); "
                 "m_new = maximum(m_i, max(x, 0)); m_ref = where(m_new == -inf, 0, m_new); l_i = l_i * exp(m_i - "
                 "m_ref) + sum(exp(x - m_ref), 0); m_i = m_new; second loop: store exp(x - m_i) / l_i; wrapper: "
                 "online_softmax_kernel[(M,)](x, out, x.stride(0), out.stride(0), N, BLOCK_N=block_n)"),
             tensors=True, must_launch=("online_softmax_kernel",), time_limit_s=60.0,
             launch_blocks=(("BLOCK_N", "block_n"),)),
    ), needs_triton=True),
    Exercise("ex13_triton_backward", "Triton backward: dK, dV per key block, dQ per query block", (
        Part("flash_backward_dkdv", "dK, dV kernel recomputing P from lse", 4, cases.dkdv_reference,
             cases.dkdv_public, cases.dkdv_hidden, (
                 "One program per (key block j, batch element): K_j, V_j stay on chip while the program loops "
                 "over query blocks i, accumulating dK_j and dV_j in float32 (FlashAttention-2 Algorithm 2, "
                 "lines 5-19). P is never stored: recompute each tile from the saved lse.",
                 "Per query block: S = scale Q_i K_j^T; P = exp(S - lse_i[:, None]), set to 0 for query rows past "
                 "N_Q and (causal) where the key is past the query row (key c > query r; the diagonal c = r "
                 "counts); dV_j += P^T dO_i; dP = dO_i V_j^T; "
                 "dS = P * (dP - D_i[:, None]); dK_j += scale dS^T Q_i. Compute D = rowsum(dO * O) in the wrapper "
                 "(torch) and pass it in. Causal: query blocks that end before the key block starts are skipped.",
                 "start_n = program_id(0) * BLOCK_N; k, v = masked loads (BLOCK_N, d); dk = dv = zeros; lo = 0 "
                 "[causal: (start_n // BLOCK_M) * BLOCK_M]; for start_m in range(lo, N_Q, BLOCK_M): q, do = "
                 "masked loads; lse, delta = masked loads (BLOCK_M,); s = tl.dot(q, tl.trans(k)) * scale; "
                 "keep = (offs_m < N_Q)[:, None] [causal: & (offs_n[None, :] <= offs_m[:, None])]; "
                 "p = where(keep, exp(s - lse[:, None]), 0); dv += tl.dot(tl.trans(p).to(do.dtype), do); "
                 "ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None]); dk += tl.dot(tl.trans(ds).to(q.dtype), q) "
                 "* scale; store dk, dv masked; grid = (cdiv(Nk, BLOCK_N), Z)"),
             outputs=("dk", "dv"), tolerance=dict(GRAD_TOLERANCE), gpu_tolerance=KERNEL_GPU_TOLERANCE, tensors=True,
             must_launch=("flash_bwd_dkdv_kernel",), time_limit_s=60.0,
             max_launch_block=MAX_TILE),
        Part("flash_backward_dq", "dQ kernel, one query block per program", 2, cases.dq_reference,
             cases.dkdv_public, cases.dkdv_hidden, (
                 "The mirror image of part 1: one program per (query block i, batch element) keeps Q_i, dO_i, "
                 "lse_i and D_i on chip and loops over the key blocks, accumulating dQ_i in float32; each row of "
                 "dQ is written by one program only, so no atomics are needed.",
                 "Per key block: P = exp(scale Q_i K_j^T - lse_i[:, None]), 0 for keys past N_K and (causal) "
                 "past the query row; dS = P * (dO_i V_j^T - D_i[:, None]); dQ_i += scale dS K_j. Causal: stop "
                 "the loop after the block's last real query row, as in the forward kernel.",
                 "start_m = program_id(0); q, do, lse, delta = masked loads; dq = zeros; hi = N_K [causal: "
                 "minimum(N_K, minimum((start_m + 1) * BLOCK_M, N_Q))]; for start_n in range(0, hi, BLOCK_N): "
                 "k, v = masked loads; keep = (offs_n < N_K)[None, :] [causal: & (offs_n[None, :] <= "
                 "offs_m[:, None])]; p = where(keep, exp(tl.dot(q, tl.trans(k)) * scale - lse[:, None]), 0); "
                 "ds = p * (tl.dot(do, tl.trans(v)) - delta[:, None]); dq += tl.dot(ds.to(k.dtype), k) * scale; "
                 "store dq masked; grid = (cdiv(Nq, BLOCK_M), Z)"),
             outputs=("dq",), tolerance=dict(GRAD_TOLERANCE), gpu_tolerance=KERNEL_GPU_TOLERANCE, tensors=True,
             must_launch=("flash_bwd_dq_kernel",), time_limit_s=60.0,
             max_launch_block=MAX_TILE),
    ), needs_triton=True),
    Exercise("ex14_split_kv_decode", "split-KV decoding: partial states and their combine", (
        Part("split_kv_partials", "partial (o, lse) per key split, in Triton", 3, cases.partials_reference,
             cases.partials_public, cases.partials_hidden, (
                 "One program per (sequence, split): each runs the online softmax of one query row over its own "
                 "slice of the keys and writes a normalised partial output and its log-sum-exp.",
                 "Split s covers keys [s * per, min((s + 1) * per, Nk)) with per = cdiv(Nk, num_splits). One query "
                 "row is too small for tl.dot (dot shapes need >= 16): score with tl.sum(k * q[None, :], 1). "
                 "An empty split never enters its loop: guard o = acc / l against l = 0; lse = m + log(l) is "
                 "then -inf by itself.",
                 "z, s = program_id(0), program_id(1); lo = s * per; hi = minimum(lo + per, N_K); q = load "
                 "(HEAD_DIM,); m_i = full([], -inf); l_i = 0; acc = zeros([HEAD_DIM]); for start_n in range(lo, "
                 "hi, BLOCK_N): k, v masked by offs_n < hi; sc = where(mask, sum(k * q[None, :], 1) * scale, -inf); "
                 "m_new = maximum(m_i, max(sc, 0)); p = exp(sc - m_new); alpha = exp(m_i - m_new); l_i = l_i * "
                 "alpha + sum(p, 0); acc = acc * alpha + sum(p[:, None] * v, 0); m_i = m_new; store acc / where(l_i > "
                 "0, l_i, 1) and m_i + log(l_i); grid = (Z, num_splits)"),
             outputs=("o_part", "lse_part"), tensors=True, must_launch=("decode_partial_kernel",), time_limit_s=60.0,
             max_launch_block=MAX_TILE),
        Part("combine_splits", "combine the partial states", 2, cases.combine_splits_reference,
             cases.combine_splits_public, cases.combine_splits_hidden, (
                 "Each split's o_s is normalised by its own sum exp(lse_s); the whole row's sum is "
                 "sum_s exp(lse_s) = exp(lse).",
                 "lse = logsumexp over the splits; o = sum_s exp(lse_s - lse) o_s, never exp(lse_s) alone: lse_s "
                 "can be large (exp overflows past 88 in float32). torch.logsumexp and torch.exp(-inf) = 0 take "
                 "care of empty splits; a row whose splits are all empty has lse = -inf: subtract 0 there, since "
                 "exp(-inf - (-inf)) is NaN.",
                 "lse = torch.logsumexp(lse_part, -1, keepdim=True); lse = torch.where(torch.isneginf(lse), 0, lse); "
                 "w = torch.exp(lse_part - lse); return (w[..., None] * o_part).sum(1)"),
             tensors=True),
    ), needs_triton=True),
    Exercise("ex15_autograd_flash", "FlashAttention-2 as a torch.autograd.Function", (
        Part("flash_forward_lse", "tiled forward returning (o, lse)", 2, cases.lse_forward_reference,
             cases.lse_forward_public, cases.lse_forward_hidden, _TILED_HINTS[:2] + (
                 "exercise 03's loop in torch (transpose(-1, -2), amax, masked_fill), plus, after each query "
                 "block's key loop: lse[..., q0:q1] = m_i + torch.log(l_i)",),
             outputs=("o", "lse"), tolerance=dict(GRAD_TOLERANCE), tensors=True, time_limit_s=30.0, torch_only=True),
        Part("forward_and_backward", "autograd Function: o, dq, dk, dv", 3, cases.grads_reference,
             cases.grads_public, cases.grads_hidden, (
                 "forward runs flash_forward_lse and saves q, k, v, o, lse with ctx.save_for_backward; backward "
                 "receives dO and returns one gradient per input of forward (None for causal).",
                 "backward is exercise 10's loop in torch: D = rowsum(dO * O); per tile recompute P = exp(scale "
                 "Q_i K_j^T - lse_i) (0 where causal hides the key), then dV_j += P^T dO_i, dS = P * (dO_i V_j^T - "
                 "D_i), dQ_i += scale dS K_j, dK_j += scale dS^T Q_i. forward_and_backward: make leaf copies "
                 "that require grad, call FlashAttention2.apply, then o.backward(do).",
                 "q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v)); o = "
                 "FlashAttention2.apply(q, k, v, causal); o.backward(do); return o.detach(), q.grad, k.grad, v.grad"),
             outputs=("o", "dq", "dk", "dv"), tolerance=dict(GRAD_TOLERANCE), tensors=True, time_limit_s=120.0,
             gradients_from="FlashAttention2", torch_only=True),
    )),
)}


def get_exercise(name: str) -> Exercise:
    """The exercise with this id; ValueError listing the ids when there is none."""
    if not isinstance(name, str) or name not in EXERCISES:
        raise ValueError(f"exercise={name!r} is not a known exercise; expected one of {sorted(EXERCISES)}")
    return EXERCISES[name]


from flashlab import selftest as _selftest  # noqa: E402  (imports this module's Exercise/Part)

EXERCISES.update(_selftest.exercises())  # the notebooks' graded self-test questions
