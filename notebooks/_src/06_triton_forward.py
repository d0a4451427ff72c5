# %% [markdown]
# # 06 The FlashAttention forward kernel in Triton
#
# **Study time:** about 45 minutes. **Needs:** torch and triton (the CPU interpreter without a GPU).
#
# The kernel is the NumPy loop of notebook 03 with one change of viewpoint: the *outer* loop over
# query blocks becomes the grid (one Triton program per query block, batch and head), and the
# inner loop over key/value blocks stays a loop inside the program. The state `m_i`, `l_i`, `acc`
# lives in registers. You write that kernel in exercises 7 and 8; the library holds a minimal
# version of it to read beside yours (shown once your exercise 8 passes) and a ladder of named,
# tested rungs (`flashlab.kernels.ladder.RUNGS`). We check every rung against the reference, and
# then use `flashlab.flash_attention`.

# %%
from flashlab import course

env = course.setup()

import torch

import flashlab
from flashlab.kernels import attention, flash_fwd, ladder

device = env.device
dtype = env.pick(cpu=torch.float32, gpu=torch.float16)

def rand(*shape, dtype=dtype):
    return torch.randn(*shape, device=device, dtype=dtype)

# %% [markdown]
# ## The kernel you will write, beside the NumPy loop
#
# The kernel is the NumPy loop printed in notebook 03, in the same order (FlashAttention-2,
# Algorithm 1, Dao 2023): `tl.load` of $K_j$, $V_j$ replaces the traced read, `tl.dot` replaces
# `@`, and the online-softmax update is the same five lines (notebook 02's `online_update`). You write it in exercises 7 and 8
# below. After your exercise 8 passes, this notebook prints the library's minimal version,
# `flash_fwd._fwd_minimal` (dense and causal attention only), with comments `(line n)` that point
# to Algorithm 1.

# %% [markdown]
# Two details the NumPy code did not need, which your kernel and the library's both handle, and a
# third that only the library's does:
#
# - **Masks.** Key columns past $N_k$ are loaded as 0 and their scores set to $-\infty$, so they
#   get zero weight in the softmax. Query rows past $N_q$ are loaded as 0 and computed like any
#   row (their scores are finite, so no NaN appears), and the store at the end drops them. So any
#   length works with no "multiple of 128" rule.
# - **Strides.** The kernel gets pointers and strides, not arrays, so non-contiguous inputs work.
# - **Beyond the exercise (the library only).** Head-dim lanes past $d$ (the library pads the
#   block to a power of two, `HEAD_DIM`) are loaded as 0 in Q, K and V, so they add 0 to every dot
#   product and produce output lanes that are not stored; and query head `h` reads key/value head
#   `h // GROUP` (grouped-query attention). The exercises keep $d$ a power of two and one head.
#
# ## Every rung equals the reference
#
# The rungs, from `flashlab.kernels.ladder`:
#
# | rung | what it adds |
# | --- | --- |
# | `v0_grid_bh` | one program per (batch, head) looping over all query blocks (FA1's parallelism) |
# | `v1_minimal` | FA2's grid over (query block, batch x head): the minimal kernel's loop, plus notebook 09's options (sliding window, `mask_mod`, per-sequence lengths) through the helpers of `kernels/visible.py` |
# | `v2_exp2_causal` | `exp2` with $\log_2 e$ folded into the scale; a causal two-stage loop |
# | `v3_autotuned` | `triton.autotune` over block sizes, warps and stages |
# | `v4_hopper` | Hopper (sm90): tiles loaded through tensor descriptors (TMA), block sizes measured on an H200 (`benchmarks/NOTES.md`); elsewhere, and in the interpreter, it runs v3 |
# | `v5_gluon_ws` | Hopper (sm90), written in Gluon, Triton's lower-level language: one producer warp loads K and V while two consumer warpgroups overlap each block's softmax with the tensor-core products (warp specialisation, `kernels/flash_fwd_gluon.py`); elsewhere, and in the interpreter, it runs what `v4_hopper` runs |
#
# Check each, and the minimal kernel (`ladder.minimal`, not a rung: `flash_attention` never picks
# it), against the float64 reference on random inputs with ragged lengths, using the
# flash-attention test rule: error at most twice that of PyTorch's own attention in the same dtype,
# plus a small floor (`attention.allowed_error`).

# %%
B, H, n_q, n_k, d = 1, 2, env.pick(cpu=40, gpu=1000), env.pick(cpu=56, gpu=1500), 32
q, k, v = rand(B, H, n_q, d), rand(B, H, n_k, d), rand(B, H, n_k, d)
print(ladder.error_table(q, k, v))

# %% [markdown]
# ### Exercise 7: the forward kernel, from its signature
#
# `exercises/ex07_kernel_inner_loop.py` gives the signature of `flash_fwd_kernel` and of the
# wrapper `flash_forward(q, k, v, causal=False, scale=None)` on `(Z, N, d)` tensors, and nothing
# else: write the program ids, the pointers, the masks, the loop over key blocks, the store, and
# in the wrapper the output, the grid and the launch. Non-causal here; exercise 8 adds causal.

# %%
from flashlab.grading import check

check("ex07_kernel_inner_loop")

# %% [markdown]
# ## Causal in the kernel
#
# A program owns query rows `[start_m * BLOCK_M, (start_m + 1) * BLOCK_M)`. Key blocks that start
# past its last row are never loaded (the loop bound `hi` stops before them); blocks that cross
# the diagonal apply the mask `offs_n <= offs_m`. Rung 2 splits the loop into the blocks fully
# below the diagonal (no mask needed) and the diagonal blocks (mask), saving the mask arithmetic
# on most blocks.
#
# ### Exercise 8: causal masking in the kernel
#
# Copy your exercise 7 kernel and wrapper into `exercises/ex08_kernel_causal.py`, add the
# `CAUSAL` argument, stop the loop before the fully masked key blocks, and mask the diagonal ones.

# %%
from flashlab.grading import check

check("ex08_kernel_causal")

# %% [markdown]
# Once your exercise 8 passes, the next cell shows the library's minimal kernel to compare with
# yours, and `_dot`, the one helper it calls (`tl.dot`, with the interpreter's bf16 work-around).
# Rung `v1_minimal` runs the same loop with notebook 09's options (a sliding window, a `mask_mod`,
# per-sequence lengths) through the helpers of `kernels/visible.py`.

# %%
from flashlab import course
from flashlab.kernels import flash_fwd

print(course.source_once_solved("ex08_kernel_causal", flash_fwd._fwd_minimal, flash_fwd._dot))

# %% [markdown]
# ## The public function: `flashlab.flash_attention`
#
# `flash_attention(q, k, v, causal=False, scale=None)` takes `(B, H, N, d)` tensors, with
# `k`, `v` of shape `(B, H_kv, N_k, d)` where `H` is a multiple of `H_kv` (grouped-query
# attention; `H_kv = 1` is multi-query attention). It picks the best rung and is differentiable
# (notebook 07).

# %%
print(ladder.head_sharing_table(n_q, n_k, d, heads=4, kv_heads=(4, 2, 1), device=device, dtype=dtype))

# %% [markdown]
# ## Misconception: "FlashAttention is approximate"
#
# Measure it in the precisions GPUs use. For each dtype, compare the kernel and PyTorch's plain
# attention *in the same dtype* with the float64 reference. If FlashAttention approximated, its
# error would be far larger than PyTorch's; it is of the same size, because both only round.
# (bf16 in the interpreter: flashlab upcasts the dot operands, since the interpreter's bf16
# `tl.dot` is wrong; notebook 05.)

# %%
print(ladder.dtype_error_table(n_q, n_k, d, dtypes=("float32", "float16", "bfloat16"), device=device))

# %% [markdown]
# ## Bad input is refused at the boundary
#
# Errors name the argument, what was given and what is expected:

# %%
print(attention.refusal_messages(attention.REFUSED_SHAPES, device=device))

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
# **06.1** Which loop of the NumPy FA2 code became the kernel's grid?
#
# - (a) the inner loop over key blocks
# - (b) the outer loop over query blocks
# - (c) the loop over d
# - (d) none: the kernel has a single program

# %%
answer("06.1", None)  # your letter, e.g. "b"

# %% [markdown]
# **06.2** Where do m_i, l_i and acc live while a program runs?
#
# - (a) in registers: O_i and lse_i go to HBM once at the end
# - (b) in HBM, updated every step
# - (c) in the L2 cache
# - (d) in host memory

# %%
answer("06.2", None)  # your letter, e.g. "b"

# %% [markdown]
# **06.3** Causal, N = 4096, BLOCK_M = BLOCK_N = 128: how many K/V blocks does the program of query
# block 10 (counting from 0) load?

# %%
answer("06.3", None)  # your number (blocks)

# %% [markdown]
# **06.4** Why does rung 2 use exp2, and what must change in the scale?
#
# - (a) exp2 is more accurate than exp
# - (b) exp is not available in Triton
# - (c) exp2 avoids the max subtraction
# - (d) exp2 is one fast instruction; the scale is multiplied by log2(e)

# %%
answer("06.4", None)  # your letter, e.g. "b"

# %% [markdown]
# **06.5** Non-causal, B = 2, H = 8, N = 1000, BLOCK_M = 64: how many programs does the FA2 grid
# launch?

# %%
answer("06.5", None)  # your number (programs)

# %% [markdown]
# To think about (not graded):
#
# 1. With `H = 8` query heads and `H_kv = 2`, which kv head does query head 5 read?

# %% [markdown]
# ## Summary
#
# - The Triton forward is the FA2 NumPy loop: grid over query blocks, inner loop over K/V blocks,
#   online softmax in registers, `O_i` and `lse_i` written once.
# - Masks make any length and head dim work; strides make any layout work; `h // GROUP` gives
#   grouped-query attention.
# - Measured: the kernel's error is the size of PyTorch's own in the same dtype (printed above):
#   exact up to rounding.
# - Next: notebook 07 derives and runs the backward pass.
