# %% [markdown]
# # 03 Tiled attention in NumPy: FlashAttention-1 and -2, traced tile by tile
#
# **Study time:** about 45 minutes. **Needs:** NumPy, matplotlib, ipywidgets.
#
# With the online softmax of notebook 02 we can compute attention one
# `block_q x block_k` tile of $S$ at a time and never hold $S$ or $P$ whole. The NumPy code in
# `flashlab/tiled.py` does exactly what the GPU kernel of notebook 06 does, with the same names
# (`m_i`, `l_i`, `acc`, `lse`), and reports every simulated HBM <-> SRAM transfer to a
# `TrafficTracer`. Here we check it against the reference, compare the two loop orders, and watch
# the schedule step by step.

# %%
import flashlab
from flashlab import course, tiled

env = course.setup()

# %% [markdown]
# ## The FlashAttention-2 forward loop
#
# FlashAttention-2 (Dao 2023, Algorithm 1): the **outer** loop runs over query blocks $Q_i$; for
# each, the **inner** loop streams key/value blocks $K_j, V_j$ through SRAM and updates the
# on-chip state with `online_update`. $O_i$ and $\mathrm{lse}_i$ are written once, at the end.
# You write this loop yourself in exercise 3 below; the library's version is shown after it.

# %% [markdown]
# ## Exact, for any block size
#
# Compare with the reference on fresh random inputs, including ragged last tiles (block sizes
# that do not divide N), $N_q \ne N_k$, blocks larger than N, and causal masking. In float64
# the differences are rounding only. Each line runs `flashlab.tiled_attention` and
# `flashlab.naive_attention` on the same fresh inputs of shape `(2, N, d)` and gives the largest
# absolute difference of their outputs:

# %%
# (Nq, Nk, block_q, block_k, d): ragged tiles, Nq != Nk, blocks larger than N, one exact fit
cases = [(100, 100, 32, 32, 16), (100, 37, 16, 64, 8), (5, 200, 64, 7, 40), (64, 64, 64, 64, 64)]
print(tiled.tiled_vs_naive_table(cases, seed=0))

# %% [markdown]
# ### Exercise 3: the tiled forward
#
# Complete `exercises/ex03_tiled_forward.py`: `tiled_attention(q, k, v, causal, scale, block_q,
# block_k)`, FlashAttention-2's Algorithm 1 (lines 3-16) in NumPy, with ragged tiles and causal
# tile skipping. The stub states the contract; `check("ex03_tiled_forward", hint=1)` (then 2, 3)
# unfolds the idea, the step, the pseudocode. The grader also measures your function's peak
# memory: a solution that allocates an $N_q \times N_k$ array fails with a message saying so.

# %%
from flashlab.grading import check

check("ex03_tiled_forward")

# %% [markdown]
# Once your check passes, the next cell shows the library's loop to compare with yours, then the
# `online_update` it calls for every tile. The loop is about 40 lines, most of them `trace` calls:
# the bookkeeping that the schedule widget below draws. The arithmetic is the one `online_update`
# call (the update of notebook 02: new maximum, rescale, exponentials, sums) and the epilogue's
# two lines that form $O_i$ and $\mathrm{lse}_i$. Until then the cell only says so:

# %%
import flashlab
from flashlab import course

print(course.source_once_solved("ex03_tiled_forward", (flashlab.tiled_attention, "for b in range", "return _outputs"),
                                (flashlab.online_update, "with np.errstate", None)))

# %% [markdown]
# **Predict, then check.** Before the trace below: how many times more HBM bytes does FlashAttention-1
# move than FlashAttention-2, at N = 1024, d = 64, 64 x 64 tiles, fp16 tensors and fp32 statistics?
# Write your number in place of `None` and run the cell: `predict` shows your number, the course's
# value and the relative error, and records them. Within 10% counts.

# %%
from flashlab.selftest import predict

predict("fa1_vs_fa2_bytes", None)  # your number

# %% [markdown]
# ## FlashAttention-1 against FlashAttention-2
#
# FlashAttention-1 (Dao et al. 2022, Algorithm 1) swaps the loops: outer over $K_j, V_j$, inner
# over $Q_i$. Its running $O_i$, $\ell_i$, $m_i$ then cannot stay on chip; every inner step reads
# them from HBM, rescales, and writes them back. Trace both on the same random inputs
# (`traced_forward` runs one on random `(N, d)` inputs with a `TrafficTracer` that counts 2 bytes
# per element, as fp16, and 4 per row statistic):

# %%
from flashlab.viz.traffic_plots import bytes_by_tensor_table, trace_table, traced_forward

n, d, block = 1024, 64, 64  # the prediction's sizes (a trace, not a timed run: fast on any machine)
t2 = traced_forward(n, d, block, block, algorithm="fa2")
t1 = traced_forward(n, d, block, block, algorithm="fa1")
print(trace_table({"FA1": t1, "FA2": t2}))

# %% [markdown]
# Same FLOPs, different bytes: here, with equal 64 x 64 blocks, FA1's loop order moves more,
# because it round-trips $O_i$ (read and written) and re-reads $Q_i$ per key block, where FA2
# re-reads only $K_j, V_j$ per query block. That is a property of the block shapes, not FA2's
# purpose: notebook 04 shows that with the FlashAttention paper's block sizes (a long key block,
# a short query block) FA1's order moves *fewer* bytes. What FlashAttention-2 changed (Dao 2023,
# Section 3) is three things:
#
# 1. **Fewer non-matmul FLOPs** (Section 3.1). (a) *Normalise once.* FA1 keeps $O_i$
#    normalised: every step (FlashAttention paper, Algorithm 1, line 12) multiplies $O_i$ by the
#    old $\ell_i$ (undoing the last normalisation), rescales, adds $\tilde P_{ij} V_j$, and divides
#    by the new $\ell_i^{\text{new}}$. FA2 keeps the unnormalised `acc` and divides by `l_i` once,
#    in the epilogue. (b) *Store one statistic.* FA1 writes both $m$ and $\ell$ for the backward;
#    FA2 writes only $L = m + \log \ell$ (`lse`), from which the backward recomputes
#    $P = \exp(S - L)$ (notebook 07). Non-matmul operations matter because a GPU's matmul units
#    are 16x faster than its other units (A100: 312 vs 19.5 TFLOP/s, FlashAttention-2 paper,
#    Section 3.1); the "bytes touched in SRAM" row above includes them.
# 2. **Parallelism over the sequence** (Section 3.2). The outer loop runs over query blocks, and
#    each query block is independent, so a GPU runs one program per (query block, head, batch).
#    (With this loop order $O_i$, $\ell_i$, $m_i$ also stay on chip for the whole inner loop: the
#    round trips above disappear as a consequence.) FA1's implementation parallelised over batch
#    and heads only, which leaves most SMs idle at long N and small batch (next cell).
# 3. **Work partitioning between warps** (Section 3.3). Inside one program, FA1 splits each
#    $K_j, V_j$ tile between the warps (*split-K*), so the warps' partial results must be combined
#    through shared memory; FA2 splits the query rows (*split-Q*), so they need no combine. The
#    section "Warps: split-K against split-Q" below simulates both.

# %%
from flashlab import hardware

batch, heads, n_long, block_q = 1, 16, 16384, 128
fa2_programs = batch * heads * tiled.num_blocks(n_long, block_q)
print(f"B={batch}, H={heads}, N={n_long}: grid over (batch, heads) = {batch * heads} programs; "
      f"with query blocks of {block_q}: {fa2_programs} programs; an H200 has {hardware.H200.sms} SMs")

# %% [markdown]
# ## Warps: split-K against split-Q
#
# One program (thread block) runs 4 to 8 warps on the same tile. `flashlab.warps` simulates
# both partitions in NumPy on one head: with **split-K** (FlashAttention-1) every warp holds all
# of $Q_i$ and a quarter of the key columns, so its $P V$ product is a partial output with its own
# $(m, \ell)$; the warps write these to shared memory, wait at a barrier and combine them
# (notebook 02's `combine_states`). With **split-Q** (FlashAttention-2) every warp holds a quarter
# of the query rows and reads all of $K_j, V_j$: a row's softmax lives in one warp, and nothing is
# combined. Both are exact; the printout gives what each warp holds and what crossed shared memory:

# %%
from flashlab import warps

print(warps.compare(n=256, d=64, warps=4, block_q=64, block_k=64))

# %% [markdown]
# ## Where the bytes go, tensor by tensor
#
# Each entry is (tensor, direction): bytes. FA1 re-reads Q and round-trips O, m, l once per key
# block; FA2 reads K and V once per query block.

# %%
print(bytes_by_tensor_table({"FA1": t1, "FA2": t2}))

# %% [markdown]
# The reuse heatmap shows the same from the events: how many times each tile was loaded.

# %%
from flashlab.viz import plot_reuse_heatmap

course.show(plot_reuse_heatmap(t2))

# %% [markdown]
# ## Causal: skip the tiles above the diagonal
#
# With `causal=True`, query row $i$ sees keys $j \le i$. A tile whose first key column lies past
# its last query row is entirely masked: the loop never visits it, so its K and V are never
# loaded and its FLOPs are never spent. Tiles that straddle the diagonal are computed with the
# mask applied inside. `tiled.causal_skip_table` counts, for each N, the tiles (i, j) for which
# `tiled.causal_tile_skipped` is true:

# %%
print(tiled.causal_skip_table(ns=(256, 1000, 4096), block=64))

# %% [markdown]
# ### When $N_q \ne N_k$: which corner the diagonal starts from
#
# The course's causal convention is **top-left** (as PyTorch SDPA's `is_causal=True`): query row
# $i$ sees keys $j \le i$, counted from the first position of both. flash-attn 2.1 and later use
# **bottom-right**: the $N_q$ queries are the *last* $N_q$ positions, so row $i$ sees
# $j \le i + N_k - N_q$. The two agree when $N_q = N_k$. Decode ($N_q = 1$, a KV cache of $N_k$)
# and chunked prefill (a chunk of new tokens after cached ones) need bottom-right: with top-left,
# the newest token would see only the first keys. `flashlab.masks` draws both:

# %%
from flashlab import masks

print(masks.show_causal_masks(nq=3, nk=10))

# %% [markdown]
# ### Exercise 4: which tiles to skip
#
# Complete `exercises/ex04_causal_tiles.py`: `causal_tile_skipped(i, j, block_q, block_k, nq)`
# and `count_computed_tiles(nq, nk, block_q, block_k, causal)`.

# %%
from flashlab.grading import check

check("ex04_causal_tiles")

# %% [markdown]
# ## The tile schedule, step by step
#
# The widget below is drawn from the tracer's events alone. Left: query-side tiles (Q, O, lse);
# top: key-side tiles (K, V); centre: the $S/P$ tiles done, current, or skipped; right, above: the
# bytes in SRAM this step against the shared memory of one H200 SM (228 KiB, dashed); right, below:
# the HBM bytes moved so far beside the flash total and naive attention's total, on their own
# (log) axis, since HBM totals are not bounded by the SRAM's size. Move the slider or press play.
# Try `causal=False`, other block sizes, or `algorithm="fa1"`.

# %%
from flashlab.viz import tile_schedule_widget

schedule_tracer = traced_forward(256, 64, block_q=64, block_k=64, causal=True, algorithm="fa2")
widget = tile_schedule_widget(schedule_tracer, sram_capacity=hardware.H200.smem_per_sm)
widget

# %% [markdown]
# Without a browser (or to keep a picture) the same view is a static figure at any step:

# %%
from flashlab.viz import plot_tile_schedule

course.show(plot_tile_schedule(schedule_tracer, step=5, sram_capacity=hardware.H200.smem_per_sm))

# %% [markdown]
# ## Self-test
#
# Under each question, replace `None` with your answer and run the cell: `answer` grades it at once,
# shows why, and records it in your exercises folder (`flashlab progress` lists it, `flashlab grade
# selftest` grades them all). Multiple choice: one letter. Numbers: within 1% of what flashlab
# computes. Each question is worth a quarter point, for your first answer: `answer` shows the right
# one after any attempt, so a second try is for understanding, not points. The answers ship with
# the course, hashed but not secret, so the points only tell you where you stand.

# %%
from flashlab.selftest import answer

# %% [markdown]
# **03.1** In FlashAttention-2's loop order, how often is each Q_i read from HBM, and each K_j?
#
# - (a) both once
# - (b) Q_i once; K_j once per query block
# - (c) Q_i once per key block; K_j once
# - (d) both once per tile

# %%
answer("03.1", None)  # your letter, e.g. "b"

# %% [markdown]
# **03.2** What does FlashAttention-1 read and write back per inner step that FlashAttention-2 does
# not?
#
# - (a) S and P
# - (b) K_j and V_j
# - (c) O_i, l_i and m_i (and Q_i again)
# - (d) only lse

# %%
answer("03.2", None)  # your letter, e.g. "b"

# %% [markdown]
# **03.3** With N = 1000 and 64 x 64 tiles, how many rows does the last (ragged) query block have?

# %%
answer("03.3", None)  # your number (rows)

# %% [markdown]
# **03.4** Causal attention, N = 1024, 64 x 64 tiles: of the 256 tiles, how many does the loop compute
# (diagonal tiles included)?

# %%
answer("03.4", None)  # your number (tiles)

# %% [markdown]
# **03.5** Why can FlashAttention-2 run one GPU program per query block?
#
# - (a) each query block's outputs depend only on its Q_i and all of K, V: no other program touches
#   them
# - (b) query blocks are smaller than key blocks
# - (c) GPUs cannot loop over key blocks
# - (d) FA2 stores S in shared memory

# %%
answer("03.5", None)  # your letter, e.g. "b"

# %% [markdown]
# ## Summary
#
# - Tiled attention equals naive attention to rounding, for any block sizes and ragged tiles.
# - FA2 (outer loop over query blocks) keeps `m_i`, `l_i`, `acc` on chip, normalises once, stores
#   only lse, parallelises over query blocks, and splits each tile's query rows between warps
#   (split-Q) so the warps never combine partial results; FA1 round-trips O, m, l through HBM
#   every step and splits the key columns (split-K).
# - Causal with $N_q \ne N_k$: top-left (SDPA, this course) against bottom-right (flash-attn 2.1
#   and later; what decode and chunked prefill need).
# - Causal attention skips the tiles above the diagonal: about half of them at long N.
# - Next: notebook 04 counts the bytes as formulas and asks how they scale with N and SRAM size.
