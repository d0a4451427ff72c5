# %% [markdown]
# # 10 Beyond one GPU: ring attention
#
# **Study time:** about 30 minutes. **Needs:** torch and triton (the ring runs in CPU processes
# here, joined by `torch.distributed`'s gloo backend; Triton kernels in its interpreter).
#
# Notebooks 02 and 09 combined partial softmax states exactly: over tiles (FlashAttention's
# inner loop) and over chunks of a KV cache (split-KV decode). The same combine lets attention
# run across *devices*. Split the sequence across $W$ GPUs; each GPU (a *rank*) keeps its own
# queries and passes its keys and values around a ring. After $W$ steps every query has met every
# key, and the partial results were merged exactly. This is ring attention (Liu et al. 2023,
# "Ring Attention with Blockwise Transformers for Near-Infinite Context"), the core of *context
# parallelism* for long-context training.

# %%
from flashlab import course

env = course.setup()

import torch

from flashlab import distributed
from flashlab.kernels.attention import flash_attention
from flashlab.viz import ring as ring_viz

# %% [markdown]
# ## One combine, two key sets
#
# `flash_attention(..., return_lse=True)` returns the normalised output $o$ of a block and its
# log-sum-exp $\mathrm{lse} = m + \log \ell$ per query row. Two results over disjoint key sets
# $A$ and $B$ merge into the result over $A \cup B$:
#
# $$\mathrm{lse} = \log\left(e^{\mathrm{lse}_A} + e^{\mathrm{lse}_B}\right), \qquad
#   o = o_A\, e^{\mathrm{lse}_A - \mathrm{lse}} + o_B\, e^{\mathrm{lse}_B - \mathrm{lse}}.$$
#
# It is `combine_states` of notebook 02 written on $(o, \mathrm{lse})$ instead of
# $(m, \ell, \mathrm{acc})$: $e^{\mathrm{lse}_A - \mathrm{lse}}$ is the share of the softmax's mass
# that falls on $A$. Check it: attention over all keys against the merge of two halves.

# %%
q, k, v = (torch.randn(1, 2, 64, 16, device=env.device) for _ in range(3))  # (B, H, N, d)
o_a, lse_a = flash_attention(q, k[..., :32, :], v[..., :32, :], return_lse=True)  # keys 0..31
o_b, lse_b = flash_attention(q, k[..., 32:, :], v[..., 32:, :], return_lse=True)  # keys 32..63
o_merged, _ = distributed.merge_partials(o_a.float(), lse_a, o_b.float(), lse_b)
print(f"max |merge(halves) - attention(all keys)| = {(o_merged - flash_attention(q, k, v)).abs().max():.1e}")

# %% [markdown]
# ## The ring's schedule
#
# Rank $r$ starts with its own K/V shard. At step $s$ it holds the shard that started on rank
# $(r - s) \bmod W$: it computes its queries against that shard, merges, and passes the shard on
# to rank $r + 1$ *while it computes* (a point-to-point send overlapped with the kernel), so the
# communication hides behind compute as long as one block's attention takes longer than one
# shard's transfer.
#
# With causal attention a contiguous split is unbalanced: rank 0's queries see only its own keys,
# the last rank's see every key. The *zigzag* layout cuts the sequence into $2W$ chunks and gives
# rank $r$ chunks $r$ and $2W-1-r$, one early and one late, so every rank does the same work. In
# the grid below each cell says which rank's K/V a rank holds at a step and how many full
# $(N_\text{local} \times N_\text{local})$ blocks of attention it computes there.

# %%
course.show(ring_viz.plot_ring_schedule(world_size=4, causal=True))

# %% [markdown]
# The ring is as fast as its busiest rank. With 4 ranks the contiguous layout's last rank does
# 3.5 blocks while the first does 0.5 (7x); zigzag gives every rank 2 (the totals are
# `distributed.work_per_rank`).

# %%
print(distributed.work_table(world_size=4, causal=True))

# %% [markdown]
# ## Run it: two CPU processes joined by gloo
#
# `distributed.demo` starts `world_size` processes, joins them with `torch.distributed`'s gloo
# backend, gives each its zigzag shard of one random problem, runs `ring_attention` (K/V shards
# travel with `isend`/`irecv`), and compares each rank's output shard with float64 attention over
# the whole sequence on one device.

# %%
print(distributed.demo_table(world_size=2, n=128, causal=True, layout="zigzag"))

# %% [markdown]
# ## On two H200 GPUs
#
# `benchmarks/bench_ring.py` runs the same code with NCCL on two GPUs (B = 1, 32 heads, d = 128,
# bf16) and times, in one run: flash attention over the whole sequence on one GPU, the ring over
# two, and the ring's steps without communication (`no-comm`; the ring's time minus it is the
# communication left exposed, `exposed`). The last column says whether naive attention, which
# materialises S and P, fits one 141 GB GPU at that length. Times in ms, the median of 5 runs,
# slowest rank (`benchmarks/results/bench_ring.json`, `benchmarks/NOTES.md`).

# %%
results = course.load_results("bench_ring.json").get("bench_ring")
print(ring_viz.ring_results_table(results) if results else "no committed two-GPU results yet (benchmarks/bench_ring.py)")

# %% [markdown]
# From N = 65,536 the ring is 1.62-1.93x faster than one GPU. At N = 16,384 causal it is slower
# (0.88x): its steps without messages already take as long as one GPU (3.55 ms against 3.57 ms),
# because each zigzag step runs four (query chunk, key chunk) pairs of 4,096 rows, each its own
# kernel launch and merge, where one GPU runs one kernel over the whole sequence; and 0.53 ms of
# communication (13% of the ring's 4.08 ms) is left exposed, which self-test question 10.3 below
# explains. Non-causal at 16,384 the ring still wins (1.53x): twice the work per pair.

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
# **10.1** With W = 8 ranks and a contiguous causal split, how many times more attention work does
# the last rank do than the first?

# %%
answer("10.1", None)  # your number (x)

# %% [markdown]
# **10.2** Why is merging two partial results through their lse exact, not an approximation?
#
# - (a) the merge averages the two outputs, which is exact when the key sets have equal size
# - (b) each partial result carries its lse, the log of its softmax denominator, so both are
#   rescaled to the common denominator
# - (c) bf16 rounding cancels between the two halves
# - (d) the ring sends the scores S along with K and V

# %%
answer("10.2", None)  # your letter, e.g. "b"

# %% [markdown]
# **10.3** When does the ring's communication stop hiding behind compute?
#
# - (a) at long N_local: the transfer grows faster than the compute
# - (b) never: point-to-point sends are free on NVLink
# - (c) at short N_local: the transfer grows like N_local, the block's attention like N_local^2
# - (d) only with causal attention

# %%
answer("10.3", None)  # your letter, e.g. "b"

# %% [markdown]
# ## Summary
#
# - Partial attention results over disjoint key sets merge exactly through their lse: the same
#   combine as tiles (notebook 03) and split-KV chunks (notebook 09).
# - Ring attention keeps each rank's queries in place and moves K/V shards around a ring, one hop
#   per step, overlapped with the block's attention; `distributed.ring_attention` runs it on any
#   `torch.distributed` group (gloo on CPUs, NCCL on GPUs).
# - Causal attention needs a balanced layout: zigzag gives every rank one early and one late chunk.
