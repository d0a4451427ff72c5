# %% [markdown]
# # 05 Triton primer: programs, blocks, masks and `tl.dot`
#
# **Study time:** about 40 minutes. **Needs:** torch and triton (Linux). Without a GPU the
# kernels run in Triton's CPU interpreter, which `course.setup()` switches on before triton is
# imported.
#
# Triton (Tillet et al. 2019) is a Python language for GPU kernels in which you write what *one
# program* does to *one block* of data; the compiler decides how the threads of that program
# share the work. Three kernels in `flashlab.kernels.primer` teach everything the FlashAttention
# kernel needs: a vector add (programs, masks), a row softmax (reductions), a tiled matmul
# (`tl.dot`, accumulation over tiles).

# %%
from flashlab import course

env = course.setup()

import torch
import triton

from flashlab.kernels import primer

device = env.device  # "cuda" with a GPU, else "cpu" (the interpreter runs on CPU tensors)


# %% [markdown]
# ## 1. Vector add: one program per block, a mask for the ragged end
#
# The launch `kernel[grid](...)` starts `grid` programs. Program `pid` (from `tl.program_id(0)`)
# handles elements `pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)`. `BLOCK_SIZE` is a
# `tl.constexpr`: known when the kernel is compiled, so blocks have static shapes. The last block
# usually runs past the end of the vector; the mask turns those loads and stores off. (You write
# this kernel in exercise 6 below; its source is shown after your check.)

# %%
n, block = 1000, 256
x, y = torch.randn(n, device=device), torch.randn(n, device=device)
out = primer.add(x, y, block_size=block)
print(f"n = {n}, BLOCK_SIZE = {block}: {triton.cdiv(n, block)} programs, "
      f"the last covers {n - (triton.cdiv(n, block) - 1) * block} real elements")
print("max |triton - torch| =", (out - (x + y)).abs().max().item())

# %% [markdown]
# ## 2. Row softmax: a reduction inside a program
#
# One program per row; the whole row (padded to a power of two, `BLOCK_N`) is loaded at once.
# Padding lanes load $-\infty$, so they get weight $e^{-\infty} = 0$. `tl.max` and `tl.sum`
# reduce along the block: this is the safe softmax of notebook 02, in one program. (Exercise 6
# too: the source comes after your check.)

# %%
scores = torch.randn(37, 100, device=device) * 50  # (rows, cols): scores up to about 200
out = primer.softmax(scores)
print(f"largest score {scores.max().item():.0f}: exp of it in fp32 is {torch.exp(scores.max()).item()} "
      "(fp32's exp overflows past 88.7), so an unshifted softmax would divide inf by inf")
print("max |triton - torch| =", (out - torch.softmax(scores, dim=-1)).abs().max().item())

# %% [markdown]
# A whole row must fit in one program's registers and shared memory, so this kernel stops
# working for long rows: exactly the limit the online softmax removes.
#
# ## 3. Tiled matmul: `tl.dot` and accumulation
#
# One program computes one `(BLOCK_M, BLOCK_N)` tile of $C = AB$ by walking over the inner
# dimension `BLOCK_K` at a time, accumulating in fp32. `tl.dot` of two tiles runs on the tensor
# cores of a GPU; its tiles must be at least 16 x 16 on a GPU. FlashAttention's inner loop is
# this loop, with a softmax between two `tl.dot`s.

# %%
print(course.source(primer._matmul_kernel))

# %%
a = torch.randn(100, 72, device=device)  # (M, K) ragged against 32-wide tiles
b = torch.randn(72, 50, device=device)  # (K, N)
c = primer.matmul(a, b, block_m=32, block_n=32, block_k=32)  # (M, N)
grid = (triton.cdiv(100, 32), triton.cdiv(50, 32))
print(f"grid {grid} = {grid[0] * grid[1]} programs; max |triton - torch| = {(c - a @ b).abs().max().item():.2e}")

# %% [markdown]
# ## The interpreter is not a GPU
#
# `TRITON_INTERPRET=1` runs each program one after another with NumPy. It lets you `print` inside
# a kernel, but it differs from a GPU in ways that matter. The interpreter column was measured with
# triton 3.6.0 and 3.7.1, the two this course is tested with on a CPU (`flashlab/kernels/_mode.py`;
# `flashlab doctor` prints yours); the GPU column is Triton's documented default for `tl.dot`
# (`input_precision`), which the course's kernels ran with on an H200 (triton 3.6.0):
#
# | | interpreter (CPU) | GPU |
# | --- | --- | --- |
# | program order | one after another: races never show | concurrent |
# | fp32 `tl.dot` | plain fp32: fp32 products and sums, no tf32 rounding (it differs from torch's fp32 matmul only by summation order, about 1e-5 above) | tf32 by default (10-bit mantissa inputs) |
# | bf16 `tl.dot` | wrong results (flashlab upcasts operands to fp32) | correct |
# | `tl.dot` tiles < 16 | accepted | rejected at compile time |
# | time | CPU time of NumPy; says nothing about GPU speed | what you measure |
#
# The fp32 row, measured: cut the inputs to tf32's 10-bit mantissa, as a GPU's tensor cores do by
# default for fp32 (`primer.to_tf32`), and compare both products with the one in float64.

# %%
print(primer.tf32_comparison(a, b, c))

# %% [markdown]
# Tests of a kernel therefore use tolerances that hold on a GPU, not the interpreter's close
# agreement; the course's rule (from the flash-attention tests) is: the kernel's error may be at
# most twice that of PyTorch's own attention in the same dtype, plus a small floor.
#
# ### Exercise 6: your own vector add and row softmax
#
# Complete the two kernels and their wrappers in `exercises/ex06_triton_primer.py`: every line
# inside `add_kernel` and `softmax_kernel`, the grid and the launch. The matmul kernel above shows
# the vocabulary (`tl.program_id`, `tl.arange`, masked `tl.load` / `tl.store`).

# %%
from flashlab.grading import check

check("ex06_triton_primer")

# %% [markdown]
# Once your check passes, the next cell shows the library's two kernels to compare with yours:

# %%
from flashlab import course
from flashlab.kernels import primer

print(course.source_once_solved("ex06_triton_primer", primer._add_kernel, primer._softmax_kernel))

# %% [markdown]
# ### Exercise 12: a softmax for rows longer than one block
#
# `softmax_kernel` needs the whole row in one block. In `exercises/ex12_triton_online_softmax.py`
# write `online_softmax_kernel` and its wrapper `online_row_softmax(x, block_n=32)`: one program
# per row that walks the row `BLOCK_N` columns at a time with the running max and sum of
# notebook 02's online softmax, then writes the probabilities in a second pass. This is the
# softmax half of the FlashAttention kernel of notebook 06.

# %%
from flashlab.grading import check

check("ex12_triton_online_softmax")

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
# **05.1** How many programs does the vector add launch for n = 1000 with BLOCK_SIZE = 256?

# %%
answer("05.1", None)  # your number (programs)

# %% [markdown]
# **05.2** Why must BLOCK_SIZE be a tl.constexpr?
#
# - (a) tensor shapes in a Triton kernel are fixed at compile time
# - (b) it makes the kernel run in float32
# - (c) Python requires constants in upper case
# - (d) it lets the grid change size at run time

# %%
answer("05.2", None)  # your letter, e.g. "b"

# %% [markdown]
# **05.3** Why does the row softmax load padding lanes as -inf rather than 0?
#
# - (a) -inf is faster to load
# - (b) 0 would be rounded in float16
# - (c) exp(-inf) = 0: padding neither wins the max nor adds to the sum
# - (d) Triton cannot load 0

# %%
answer("05.3", None)  # your letter, e.g. "b"

# %% [markdown]
# **05.4** Which is true of Triton's CPU interpreter (TRITON_INTERPRET=1)?
#
# - (a) it is faster than a GPU for large inputs
# - (b) it runs programs one at a time with plain fp32 dots, so races and tf32 rounding never show
# - (c) it rejects every kernel a GPU would reject
# - (d) it compiles to PTX

# %%
answer("05.4", None)  # your letter, e.g. "b"

# %% [markdown]
# To think about (not graded):
#
# 1. What does the mask do in the last program of `add`, and what would go wrong on a GPU without it?

# %% [markdown]
# ## Summary
#
# - A Triton kernel describes one program acting on blocks; the grid says how many programs run.
# - Masks make ragged blocks safe; `tl.constexpr` sizes make block shapes static.
# - `tl.dot` multiplies tiles (tensor cores on a GPU); a tiled matmul accumulates tile products in
#   fp32. The interpreter runs programs in sequence with plain fp32 dots; a GPU uses tf32 for fp32
#   dots by default and runs programs concurrently.
# - Next: notebook 06 writes the FlashAttention forward kernel from these pieces.
