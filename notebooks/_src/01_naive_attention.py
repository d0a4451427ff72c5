# %% [markdown]
# # 01 Naive attention: the reference, its FLOPs and its bytes
#
# **Study time:** about 30 minutes. **Needs:** NumPy (torch, if installed, for one comparison).
#
# Standard attention (FlashAttention paper, Dao et al. 2022, Algorithm 0) for one head, with
# queries $Q \in \mathbb{R}^{N_q \times d}$, keys $K \in \mathbb{R}^{N_k \times d}$ and values
# $V \in \mathbb{R}^{N_k \times d_v}$:
#
# $$S = \tau\, Q K^\top \;(N_q \times N_k), \qquad P = \mathrm{softmax}_{\text{row}}(S), \qquad O = P V \;(N_q \times d_v),$$
#
# with $\tau = 1/\sqrt{d}$. On a GPU each of the three steps is its own kernel, so $S$ and $P$
# are written to HBM and read back. This notebook measures what that costs.

# %%
import numpy as np

import flashlab
from flashlab import course
from flashlab.viz.style import format_bytes

env = course.setup()
rng = np.random.default_rng(0)

# %% [markdown]
# ## The reference
#
# `flashlab.naive_attention(q, k, v, causal=False, scale=None)` works on NumPy arrays of shape
# `(..., N, d)` (any leading batch and head dimensions). Every fast path in the course is checked
# against it. With `causal=True` query row $i$ sees key columns $j \le i$ (top-left aligned,
# as in PyTorch's `scaled_dot_product_attention(is_causal=True)`).

# %%
B, H, N, d = 2, 3, 100, 16
q, k, v = (rng.standard_normal((B, H, N, d)) for _ in range(3))  # (B, H, N, d) each
o = flashlab.naive_attention(q, k, v)  # (B, H, N, d)
o_causal = flashlab.naive_attention(q, k, v, causal=True)  # (B, H, N, d)
print(o.shape, o.dtype)
# causal row 0 sees only key 0, so its output is exactly v[..., 0, :]
print("causal row 0 == v row 0:", np.allclose(o_causal[..., 0, :], v[..., 0, :]))

# %% [markdown]
# A reference is only as good as the thing it was checked against. Here it is PyTorch's own
# attention, in float64, on the same random inputs (skipped if torch is not installed).

# %%
try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None
    print("torch is not installed: skipping the comparison")
if torch is not None:
    for causal in (False, True):
        ref = F.scaled_dot_product_attention(*(torch.from_numpy(x) for x in (q, k, v)), is_causal=causal)
        ours = flashlab.naive_attention(q, k, v, causal=causal)
        print(f"causal={causal!s:<5} max |flashlab - torch| = {np.abs(ours - ref.numpy()).max():.1e}")

# %% [markdown]
# ### Exercise 1: write it yourself
#
# Open `exercises/ex01_naive.py` and complete `naive_attention` (and `naive_hbm_bytes`, used
# below). Then run the check. It compares your function with the reference on fixed cases and on
# fresh random ones (ragged shapes, causal, large logits that overflow a softmax computed without
# subtracting the row maximum).

# %%
from flashlab.grading import check

check("ex01_naive")

# %% [markdown]
# ## FLOPs
#
# `flashlab.flops.attention_flops` counts matmul FLOPs, 2 per multiply-add. Two matrix
# products: $QK^\top$ costs $2 N_q N_k d$ FLOPs (one multiply and one add per term)
# and $PV$ costs $2 N_q N_k d_v$; the softmax adds $O(N_q N_k)$ non-matmul operations.

# %%
from flashlab.flops import attention_flops

for n in (1024, 4096, 16384):
    print(f"N = {n:>6}, d = 128: {attention_flops(n, n, 128) / 1e9:8.1f} GFLOP per head")

# %% [markdown]
# ## Bytes: what crosses between HBM and the chip
#
# `flashlab.traffic.naive_traffic` counts every transfer of Algorithm 0: read Q and K, write S,
# read S, write P, read P and V, write O. `naive_traffic_table` prints its count tensor by tensor,
# per head, in fp16/bf16 (2 bytes per element), with the total and the arithmetic intensity.

# %%
from flashlab.traffic import naive_traffic_table

print(naive_traffic_table(n=4096, d=128, itemsize=2))

# %% [markdown]
# Nearly all the bytes are the $N \times N$ matrices. They grow as $N^2$ while Q, K, V and O grow
# as $N d$; at $N = 4096$, $d = 128$ the score matrices already outweigh the inputs 32 to 1.
#
# ### Exercise 2: count them
#
# `naive_hbm_bytes(nq, nk, d, dv=None, itemsize=2)` in `exercises/ex01_naive.py` returns the
# total above; the check of exercise 1 grades it too, against this formula on random shapes.

# %% [markdown]
# ## Memory grows as N^2: measured
#
# The reference allocates S and P in full. `flashlab.cpu_cost.naive_cost_table` measures one
# call on this machine as N doubles (float32, one head, d = 64): the peak extra memory that
# `tracemalloc` records of NumPy's allocations, and the time of the fastest of several calls made
# after an untimed warm-up call (the first call of a process also pays for starting BLAS).
# The times are this CPU's and move with whatever else it runs; the memory does not.

# %%
from flashlab import cpu_cost

print(cpu_cost.naive_cost_table(env.pick(cpu=[256, 512, 1024, 2048], gpu=[512, 1024, 2048, 4096, 8192])))

# %% [markdown]
# Doubling N multiplies the peak by 4: at its peak the reference holds three $N \times N$ float32
# arrays (the printed ratio). Extrapolate: at $N = 32768$ one fp16 $N \times N$ matrix is

# %%
n = 32768
print(f"{format_bytes(n * n * 2)} per head; for 32 heads: {format_bytes(32 * n * n * 2)}")

# %% [markdown]
# On a GPU the same growth ends in an out-of-memory error. The repository's H200 measurement
# (`benchmarks/results/bench_memory.json`: one head, d = 128, bf16, peak extra memory of one
# forward pass; the GPU's memory as torch reports it, 139.8 GiB) shows where:

# %%
from flashlab import perf

memory = course.load_results("bench_memory.json").get("bench_memory")
if memory is None:
    print("no benchmarks/results/bench_memory.json yet (run `flashlab bench memory` on a GPU)")
else:
    print(perf.naive_memory_table(memory))

# %% [markdown]
# The measured peak is S and P, two bf16 N x N matrices (plus O, a rounding error at this size):
# 4 GiB at N = 32768, where each matrix is the 2 GiB computed above. At the largest N, 262,144,
# the two matrices need 256 GiB, more than the 139.8 GiB the GPU holds, and the forward pass
# fails with `oom`.

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
# **01.1** Which two intermediate matrices does standard attention write to HBM, and what shape are
# they?
#
# - (a) Q and K, each N x d
# - (b) O and lse, N x d and N
# - (c) S and P, each Nq x Nk
# - (d) K^T and V^T, each d x N

# %%
answer("01.1", None)  # your letter, e.g. "b"

# %% [markdown]
# **01.2** Per head, at N = 8192 in fp16, how many MiB do S and P move in total (each written once and
# read back once)?

# %%
answer("01.2", None)  # your number (MiB)

# %% [markdown]
# **01.3** Why does causal=True not reduce the naive algorithm's memory?
#
# - (a) the mask is applied to a full S: S and P are still materialised as Nq x Nk matrices
# - (b) the mask itself is an extra Nq x Nk matrix that cancels the saving
# - (c) causal attention needs float32 scores
# - (d) it does: causal halves the bytes

# %%
answer("01.3", None)  # your letter, e.g. "b"

# %% [markdown]
# **01.4** Naive attention at N = 4096, d = 128, fp16: is its arithmetic intensity (FLOPs per HBM
# byte) above or below the H200's ridge point?
#
# - (a) above: compute-bound, limited by the tensor cores
# - (b) below: memory-bound, limited by HBM bandwidth
# - (c) exactly at the ridge point
# - (d) intensity does not apply to attention

# %%
answer("01.4", None)  # your letter, e.g. "b"

# %% [markdown]
# ## Summary
#
# - Naive attention does $4 N^2 d$ matmul FLOPs (for $d_v = d$) and moves $\Theta(N d + N^2)$ bytes;
#   the $N^2$ part (S and P written and read back) dominates.
# - Its memory grows as $N^2$: 2 GiB per head for one fp16 matrix at 32k tokens.
# - Next: notebook 02 shows how to compute the softmax without ever holding a whole row of S.
