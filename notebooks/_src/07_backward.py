# %% [markdown]
# # 07 The backward pass: the math, recomputation, NumPy then Triton
#
# **Study time:** about 45 minutes. **Needs:** NumPy and torch; triton for the last part.
#
# Training needs $dQ, dK, dV$ given $dO = \partial L / \partial O$. Standard attention keeps $P$
# ($N_q \times N_k$) from the forward pass for this. FlashAttention keeps only $O$ and the per-row
# $\mathrm{lse}$, and *recomputes* $P$ tile by tile (FlashAttention paper, Section 3.1 and
# Appendix B; FlashAttention-2, Algorithm 2).

# %%
from flashlab import course

env = course.setup()

import numpy as np

import flashlab

rng = np.random.default_rng(0)

# %% [markdown]
# ## The backward, derived
#
# Take one query row $i$ and write $s = S_{i,:}$, $p = P_{i,:} = \mathrm{softmax}(s)$. Since
# $p_j = e^{s_j} / \sum_k e^{s_k}$,
#
# $$\frac{\partial p_j}{\partial s_k} = p_j\,(\delta_{jk} - p_k), \qquad
#   J = \mathrm{diag}(p) - p\,p^\top \quad (\text{symmetric}).$$
#
# The chain rule gives $ds = J^\top dp = J\,dp$, component by component
#
# $$ds_k = p_k\, dp_k - p_k \sum_j p_j\, dp_j = p_k\,(dp_k - D_i), \qquad D_i = \sum_j p_j\, dp_j,$$
#
# which is $dS = P \circ (dP - D)$ for all rows at once: the $N_k \times N_k$ Jacobian never has to
# be formed, only one number $D_i$ per row. And $D_i$ needs no $P$ at all: with $dP = dO\,V^\top$
# and $O = P V$,
#
# $$D_i = \sum_j P_{ij}\,(dO_i \cdot V_j) = dO_i \cdot \Big(\sum_j P_{ij} V_j\Big) = dO_i \cdot O_i,$$
#
# so $D = \mathrm{rowsum}(dO \circ O)$, computed from two $N \times d$ arrays before the tiled
# loop starts. `flashlab.derive` checks each step in float64 on random inputs: the Jacobian route
# against the closed form, $D$ from $P$ against $D$ from $O$, and $dS$ against central finite
# differences of the loss $L = \sum dO \circ O$:

# %%
from flashlab import derive

for step, err in derive.check_backward_derivation(n=12, d=8).items():
    print(f"{step:<38} max abs difference {err:.1e}")

# %% [markdown]
# ## The math, in one place
#
# With $S = \tau Q K^\top$, $P = \mathrm{softmax}(S)$, $O = P V$:
#
# $$dV = P^\top dO, \qquad dP = dO\, V^\top, \qquad dS_{ij} = P_{ij}\,(dP_{ij} - D_i), \qquad dQ = \tau\, dS\, K, \qquad dK = \tau\, dS^\top Q,$$
#
# with $D = \mathrm{rowsum}(dO \circ O)$ as derived above (checked there: it never needs $P$). What
# the backward does need is $P$ itself, and FlashAttention recovers it from the stored log-sum-exp,
# $P_{ij} = \exp(S_{ij} - \mathrm{lse}_i)$. On one random head (N = 50, d = 16):

# %%
n, d = 50, 16
q, k, v = (rng.standard_normal((n, d)) for _ in range(3))  # (N, d) each
p = flashlab.safe_softmax(q @ k.T / np.sqrt(d))  # (N, N)
_, lse = flashlab.naive_attention(q, k, v, return_lse=True)  # (N,)
print("max |exp(S - lse) - P| =", np.abs(np.exp(q @ k.T / np.sqrt(d) - lse[:, None]) - p).max())

# %% [markdown]
# ### Exercise 9: D and dS
#
# `exercises/ex09_backward_pieces.py`: `rowsum_do_o(do, o)` and `softmax_backward(p, dp, D)`.

# %%
from flashlab.grading import check

check("ex09_backward_pieces")

# %% [markdown]
# ## NumPy: the reference backward, and the tiled one
#
# `flashlab.naive_attention_backward` materialises P; `flashlab.tiled_attention_backward` follows
# FlashAttention-2's Algorithm 2: compute D, then an outer loop over key blocks $K_j, V_j$ that
# accumulates $dK_j, dV_j$ on chip, an inner loop over query blocks that recomputes $P$ from lse
# and adds into $dQ_i$ in HBM. Both against PyTorch's autograd in float64:

# %%
print(derive.backward_error_table(n_q=70, n_k=45, d=16, batch=2, block_q=16, block_k=32))

# %% [markdown]
# ### Exercise 10: the tiled backward
#
# `exercises/ex10_tiled_backward.py`: `tiled_attention_backward(q, k, v, o, lse, do, causal=False,
# scale=None, block_q=64, block_k=64)` returns `(dq, dk, dv)` shaped like q, k, v, by Algorithm 2's
# loops (key blocks outside, query blocks inside), recomputing each tile of P from lse and never
# building an Nq x Nk array (the grader measures peak memory).

# %%
from flashlab.grading import check

check("ex10_tiled_backward")

# %% [markdown]
# ### Exercise 15: FlashAttention-2 as a `torch.autograd.Function`
#
# In `exercises/ex15_autograd_flash.py` write `flash_forward_lse` (exercise 3's loop in torch,
# also returning lse), the class `FlashAttention2(torch.autograd.Function)` whose `forward` saves
# lse and whose `backward` recomputes P tile by tile (exercise 10's loop in torch), and
# `forward_and_backward(q, k, v, do, causal)`, which runs it through autograd. The grader
# compares o, dq, dk, dv with float64 references, gradcheck-style.

# %%
from flashlab.grading import check

check("ex15_autograd_flash")

# %% [markdown]
# ## What recomputation buys and costs
#
# Storing $P$ costs $N_q N_k$ elements per head; storing lse costs $N_q$. Recomputing $P$ costs
# matmuls. FlashAttention-2's backward (Algorithm 2) does 5 per tile: $S = Q_i K_j^\top$ again,
# $dV$, $dP$, $dK$, and $dQ$, which it adds into HBM with atomic adds in the same pass. The
# course's kernels (`flashlab.kernels.flash_bwd`) avoid atomics by running two passes: one
# program per key block for $dK, dV$ (4 matmuls: $S$, $dV$, $dP$, $dK$) and one per query block
# for $dQ$, which must recompute $S$ and $dP$ (3 more): **7 matmuls per tile**, against 4 for the
# standard backward that keeps $P$. `flashlab.derive.backward_matmuls` lists them:

# %%
print(derive.matmul_table())

# %% [markdown]
# Which count do the TFLOP/s figures use? `benchmarks/bench_attention.py` (and notebook 08)
# count forward + backward as 3.5 x the forward's $4 B H N^2 d$, the FlashAttention-2 paper's
# convention (Section 4.1): 2 forward + 5 backward matmuls. The course's two-pass Triton backward
# (`flash_bwd`) executes 2 + 7 = 9, so its tensor cores really do $4.5 / 3.5 = 1.29$ x the FLOPs the
# figures credit: the convention measures useful work, and the extra recomputation shows up as
# lower TFLOP/s. The one-pass backward that `flash_attention` runs on an H200 from N = 1024 (fp16
# and bf16, d = 64 and 128; `bwd_gluon_ws`, below) executes FA2's 5: there the figures count what
# it does.
# `flashlab.attention_flops(..., pass_="backward", block_q=..., block_k=...)` counts FA2's 5 per
# tile. So the flash backward does *more* FLOPs than the standard one. It still wins on a GPU
# because it moves fewer bytes (in this model, which counts K/V re-reads that a GPU's L2 mostly
# absorbs: notebook 04), and above all because it never allocates the $N^2$ matrices. Counted for
# one head, d = 128, fp16, 128 x 128 tiles (FLOPs with FA2's 5 matmuls per tile):

# %%
print(derive.recompute_cost_table(ns=(1024, 4096, 16384), d=128, block=128))

# %% [markdown]
# ## Triton: the backward kernels
#
# `flashlab.flash_attention` is a `torch.autograd.Function`. Its backward runs three Triton
# kernels (`flashlab.kernels.flash_bwd`): a preprocessing kernel for $D$, a kernel with one
# program per key block for $dK, dV$ (summing over the query heads of a group for grouped-query
# attention), and one per query block for $dQ$.
#
# ### Exercise 13: the backward kernels
#
# In `exercises/ex13_triton_backward.py` write `flash_bwd_dkdv_kernel`, one program per key
# block, and its wrapper `flash_backward_dkdv(q, k, v, o, lse, do, causal, scale)`: keep $K_j$,
# $V_j$ on chip, loop over the query blocks recomputing $P$ from lse, accumulate $dK_j$ and
# $dV_j$, store them once. Then `flash_bwd_dq_kernel` and `flash_backward_dq`, one program per
# query block.

# %%
from flashlab.grading import check

check("ex13_triton_backward")

# %% [markdown]
# Once your check passes, the next cell shows the library's $dK, dV$ kernel's inner loop to compare
# with yours:

# %%
from flashlab import course
from flashlab.kernels import attention, flash_bwd

print(course.source_once_solved("ex13_triton_backward", flash_bwd._bwd_dkdv_inner))

# %% [markdown]
# Gradient check against float64 autograd through the plain PyTorch attention, with grouped-query
# attention (4 query heads sharing 2 kv heads) and ragged lengths:

# %%
from flashlab.kernels import ladder

print(ladder.gradient_error_table(n=env.pick(cpu=33, gpu=1000), d=32, heads=4, kv_heads=2, device=env.device))

# %% [markdown]
# ## The backward ladder: three rungs, chosen by measurement
#
# `flash_attention`'s backward has three rungs (`flashlab.kernels.ladder.BWD_RUNGS`):
#
# - `bwd_two_pass` (`kernels/flash_bwd.py`): the kernels above. One pass keeps $K_j, V_j$ on chip
#   for $dK, dV$, the other keeps $Q_i$ for $dQ$, so $S$ and $dP$ are computed in both: 7 matrix
#   products per tile, no atomics. Where that was measured faster (`flash_bwd.concurrent_dq`: causal,
#   grouped-query, shorter sequences) its dQ kernel runs on a second CUDA stream beside the dK/dV one.
# - `bwd_fused` (`kernels/flash_bwd_hopper.py`): FlashAttention-2's Algorithm 2 as the paper
#   writes it, in Triton: one pass per key block with 5 products per tile; each key block adds its
#   share of $dQ$ into an fp32 buffer (atomic adds, or the Hopper copy engine's tile reduce).
# - `bwd_gluon_ws` (`kernels/flash_bwd_gluon.py`): the same one pass written in Gluon, Triton's
#   lower-level language, with the warps specialised as in the forward rung v5: a producer warp
#   copies $Q_i$ and $dO_i$ tiles into shared memory with TMA while two consumer warpgroups (64
#   keys each) do the 5 products, and $dQ$'s share leaves through the copy engine's tile reduce
#   while the next products run.
#
# Fewer products should win. In Triton the one-pass rung did not (0.65-0.74x cuDNN against the
# two-pass rung's 0.68-0.82x, forward+backward over 16 bf16 shapes in
# `benchmarks/results/bench_backward_call2_proto_bf16.json`): the
# compiler waits for each $dQ$ reduce before the next products, and that wait costs more than the
# two products it saves. Written by hand, with the wait overlapped, the one pass wins. The table
# below (bf16, one run per file, `benchmarks/results/bench_backward_s6_call3_*.json`) times the
# rungs side by side; the last column is the rung `flash_attention` runs for that shape now
# (`ladder.measured_backward`). Its schedule matters as much as its product count: letting each
# step's $dQ$ product run one step behind, so the two consumer warpgroups stop waiting for each
# other at the exchange of $dS$, is the `lag` column.

# %%
from flashlab import perf

print(perf.backward_ladder_table(course.load_results("bench_backward_s6_call3_n*.json")))

# %% [markdown]
# Why were the causal rows at d = 128 slow? The compiler's resource report answered it without a
# GPU: at d = 128 each consumer thread holds $dK$, $dV$ and the tiles of a step in registers, and
# the causal kernel, which compiles its masked and unmasked loops side by side, spilled to local
# memory inside the loop. Two schedule changes free registers: the producer warp stages
# $\mathrm{lse}_i$ and $D_i$ in shared memory (`rows`), and one loop applies the mask under a
# run-time branch (`one`). Both were timed against the schedules before them in one run of their
# own (`benchmarks/results/bench_backward_s6c_d128.json`, bf16, d = 128): another run than the
# table above, so the same schedule's numbers differ between the two:

# %%
schedules = ["cudnn", "gw:2,lag", "gw:2,lag,rows", "gw:2,lag,g0", "gw:2,lag,g0,rows,one"]
print(perf.backward_ladder_table(course.load_results("bench_backward_s6c_d128.json"), contenders=schedules))

# %% [markdown]
# Causal, from the schedule shipped before (`Gluon lag g0`: heavy key blocks first within head
# groups) to both changes (`Gluon lag g0 rows one`), forward+backward moved from 0.79-0.84x to
# 0.95-1.05x cuDNN; dense, which runs without `g0`, from `Gluon lag` 0.92-0.94x to `Gluon lag rows`
# 1.03-1.04x. Registers are a budget: a kernel that spills waits on memory it never meant to touch.
# The same two changes, and at d = 64 the consumers exchanging halves of $dS^T$ and each adding
# half of $dQ$'s columns (as at d = 128, where each otherwise adds its own keys' share of all
# columns), took d = 64 from
# 0.80-0.90x to 0.95-1.03x and grouped-query attention from 0.82x to 0.99-1.00x
# (`benchmarks/results/bench_backward_s7_call1_*.json`); `flash_bwd_gluon.default_config` holds the
# schedule each shape runs.
#
# Where the library stands now against cuDNN on every shape the project targets (bf16 and fp16,
# head dims 64 and 128, N from 2048 to 16384, causal and not; one run,
# `benchmarks/results/bench_backward_s7_call2_matrix.json`): `flash_attention` (the `library`
# column: forward and backward through autograd) runs at 0.91-1.12x cuDNN's forward+backward.

# %%
print(perf.backward_ladder_table(course.load_results("bench_backward_s7_call2_matrix.json")))

# %% [markdown]
# And with grouped-query attention at a language model's shape (B = 1, 32 query heads sharing 8 kv
# heads, d = 128, causal, bf16; `benchmarks/results/bench_backward_s7_call2_gqa.json`): the
# backward sums $dK$ and $dV$ over the group's query heads in registers, one program per key block
# of a kv head, so no separate reduction follows.

# %%
print(perf.backward_ladder_table(course.load_results("bench_backward_s7_call2_gqa.json")))

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
# **07.1** Which facts turn D_i = sum_j P_ij dP_ij into D_i = dO_i . O_i?
#
# - (a) P is symmetric
# - (b) each row of P sums to 1
# - (c) dP_ij = dO_i . V_j and O_i = sum_j P_ij V_j
# - (d) dO = O

# %%
answer("07.1", None)  # your letter, e.g. "b"

# %% [markdown]
# **07.2** Besides O, the forward saves lse for the backward. How many KiB is lse per head at N =
# 16384 in float32?

# %%
answer("07.2", None)  # your number (KiB)

# %% [markdown]
# **07.3** How many matmuls per tile does FlashAttention-2's backward (one pass, atomic dQ) do, one of
# them recomputing S?

# %%
answer("07.3", None)  # your number (matmuls)

# %% [markdown]
# **07.4** Why does the dK/dV kernel loop over query blocks?
#
# - (a) query blocks are smaller
# - (b) so each program accumulates its dK_j, dV_j on chip and writes them once
# - (c) the forward did the same
# - (d) to recompute lse

# %%
answer("07.4", None)  # your letter, e.g. "b"

# %% [markdown]
# **07.5** Forward + FlashAttention-2 backward matmul FLOPs, divided by the forward's (non-causal, d = dv)?

# %%
answer("07.5", None)  # your number

# %% [markdown]
# To think about (not graded):
#
# 1. With grouped-query attention, where are the gradients of the query heads that share a kv head
#    summed?

# %% [markdown]
# ## Summary
#
# - The backward needs $P$; FlashAttention recomputes it from lse instead of storing $N^2$ numbers,
#   and $D = \mathrm{rowsum}(dO \circ O)$ replaces the softmax Jacobian's row sums.
# - FlashAttention-2's backward does 5 matmuls per tile (4 for the standard one); the course's
#   two-pass kernels do 7 (S and dP recomputed in the dK/dV pass and again in the dQ pass): more
#   FLOPs, fewer bytes, another count against "FlashAttention saves FLOPs". Benchmarks count
#   forward + backward as 3.5 times the forward's FLOPs (2 + 5 matmuls; FlashAttention-2 paper,
#   Section 4.1; notebook 08), so the two-pass kernels execute 4.5/3.5 of what is credited.
# - On an H200 the one-pass rung wins only when written by hand (`bwd_gluon_ws`, Gluon, warp
#   specialised): `flash_attention` runs it from N = 1024 for fp16/bf16 at d = 64 and 128.
# - NumPy and Triton gradients match float64 autograd.
# - Next: notebook 08 measures all of this on an H200.
