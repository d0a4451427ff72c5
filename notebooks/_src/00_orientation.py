# %% [markdown]
# # 00 Orientation: what we build, and the memory it is built around
#
# **Study time:** about 20 minutes. **Needs:** NumPy only.
#
# This course builds FlashAttention end to end: the plain algorithm (01), the softmax trick that
# makes tiling exact (02), tiled attention in NumPy with every HBM transfer traced (03), the
# IO-complexity argument (04), Triton from first principles (05), the Triton forward and
# backward kernels (06, 07), their performance on an H200 (08), decoding (09), and attention
# split across GPUs by ring attention (10).
#
# Every notebook runs top to bottom on a laptop without a GPU: NumPy, plus Triton's CPU
# interpreter for the kernels. With a CUDA GPU the same cells use larger sizes and real timings.
# The first cell of every notebook is the same: it picks the device, puts Triton in interpreter
# mode when there is no GPU (this must happen before `triton` is imported), seeds the random
# generators and prints the environment in one line.

# %%
from flashlab import course

env = course.setup()

# %% [markdown]
# ## Check the installation
#
# `flashlab doctor` (also available from the shell) prints the versions, whether a GPU is
# present, whether Triton will compile for it or run in the interpreter, and known-bad version
# combinations with their fix. Every line marked `[error]` must be fixed before notebook 05.

# %%
from flashlab.doctor import diagnose, format_text

print(format_text(diagnose()))

# %% [markdown]
# ## The GPU memory hierarchy
#
# A GPU computes in its *streaming multiprocessors* (SMs). Each SM has a register file and a
# block of on-chip SRAM that a kernel can use as *shared memory*; all SMs share an L2 cache and
# the off-chip HBM, where tensors live between kernels. FlashAttention is about one fact:
# on-chip memory is small and fast, HBM is large and, relative to the arithmetic units, slow.
#
# The numbers below come from `flashlab.hardware`, which cites its sources (NVIDIA tuning guides,
# the H200 datasheet, and the measurements in `benchmarks/anchors` made on the H200 this course was
# benchmarked on). For the bandwidth of each level, the FlashAttention paper (Dao et al. 2022,
# Section 2.1 and Figure 1) gives the A100's: 192 KB of SRAM on each of 108 SMs, about 19 TB/s
# (estimated); 40 to 80 GB of HBM at 1.5 to 2.0 TB/s. The 192 KB are the SM's L1 cache and shared
# memory together; an SM can set at most 164 KB of them aside as shared memory, of which one
# thread block can use 163 KB (NVIDIA's Ampere tuning guide; `flashlab.hardware`,
# `flashlab.targets`); notebook 04 plots the 164 KB. On-chip memory is about 10 times faster
# than HBM and about 2,000 times smaller (20 MB against 40 GB).

# %%
from flashlab import hardware

print(hardware.memory_table())

# %% [markdown]
# The aggregate shared memory is the per-SM size times the SM count; it is **not** one pool. A
# thread block (one Triton *program*) sees only its own SM's shared memory, at most
# 227 KiB on an H200 (`hardware.H200_SMEM_PER_BLOCK`). The tiles FlashAttention keeps on chip must
# fit in that.
#
# ## Speeds: FLOPs are cheap, bytes are expensive
#
# `hardware.ceilings_table` lists the measured and the datasheet ceilings; given the committed
# benchmark run that notebook 08 plots, it adds the same two ceilings as re-measured there.

# %%
bench = course.load_results("bench_attention.json").get("bench_attention")  # None without the file
print(hardware.ceilings_table(bench))

# %% [markdown]
# The *ridge point* is the number of FLOPs a kernel must do per byte it moves to or from HBM
# before compute, not memory, limits it: 160 to 185 FLOP/byte on the measured H200 (above: the
# same GPU model measured on two days; the course quotes the anchors' 184). A
# softmax does a handful of FLOPs per element (2 bytes in bf16), far below the ridge: it is
# limited by HBM. That is why standard attention, which writes its N x N score matrix to HBM and
# reads it back, is slow, and why removing those bytes (not FLOPs) is the whole game.
#
# Try it: how long does it take just to *write and read back* one N x N bf16 matrix for one head
# at the measured bandwidth? Change `n` and `heads`.

# %%
from flashlab.viz.style import format_bytes

n, heads, itemsize = 8192, 32, 2  # tokens, heads, bytes per bf16 element
matrix_bytes = n * n * itemsize * heads  # one N x N matrix per head
seconds = 2 * matrix_bytes / hardware.H200_MEASURED.hbm_bytes_per_s  # written once, read once
print(f"{heads} heads x {n} x {n} bf16 = {format_bytes(matrix_bytes)}; write + read at "
      f"{hardware.H200_MEASURED.hbm_bytes_per_s / 1e12:.1f} TB/s: {seconds * 1e3:.2f} ms")

# %% [markdown]
# ## Three misconceptions this course answers with measurements
#
# 1. *FlashAttention is an approximation.* It is exact: notebooks 02, 03 and 06 compare it with
#    the reference on random inputs and find differences at the level of floating-point rounding.
# 2. *FlashAttention saves FLOPs.* It does the same matrix FLOPs (plus a recomputation in the
#    backward pass); it saves HBM traffic. Notebook 04 counts both.
# 3. *It drops in everywhere with the same gain.* It helps long-sequence prefill most and
#    single-token decode far less. Notebook 08 measures the gain over many shapes on an H200;
#    notebooks 04 and 09 count why it shrinks at decode.
#
# ## How to work through the course
#
# Read a cell, predict its output, run it, then change a parameter and run it again. Graded
# exercises live in `exercises/` (stubs you complete); a cell `check("...")` grades yours.
# `flashlab grade` does the same from a shell.
#
# Each open notebook keeps a Python kernel of its own, about 450 MB once torch is loaded (11
# kernels, one per notebook, held 5.3 GB on a CPU machine; measured for this repository,
# 2026-12-02). When you move on to the next notebook, close the one you finished with
# File > Close and Shut Down Notebook; the Running panel in the left sidebar lists the others.

# %% [markdown]
# ## Your progress
#
# Every exercise and every notebook's self-test, with points earned / possible, and what to do
# next. `fast=True` runs nothing: an exercise shows the result of its last graded run (a `check("...")`
# cell, or `progress()`) while its file is unchanged, else only whether it is still a stub. `progress()` (or `flashlab progress` in a
# shell) first grades the public cases of the exercises changed since its last run (an untouched
# stub and a finished, unchanged exercise are not run again): about 0.1 s for each NumPy exercise
# and 1.7 s for each Triton or torch one, on a 2-core CPU machine (measured for this repository,
# 2026-12-01). Only `flashlab grade` runs the hidden cases that decide the score. Self-tests count
# the first answer you gave to each question with `answer(...)` at the end of notebooks 01-10
# (`answer` shows the right one after any attempt, so later tries earn nothing).

# %%
from flashlab.progress import progress

progress(fast=True)

# %% [markdown]
# ## Self-test
#
# 1. Which memory does a Triton program's tile live in, and how large can it be on an H200?
# 2. Why is "total shared memory of the GPU" (about 29 MiB on an H200) the wrong number for the
#    size of a tile?
# 3. A kernel performs 10 FLOPs per byte it moves. Is it compute-bound or memory-bound on an H200?
# 4. What does FlashAttention reduce: FLOPs, HBM bytes, or both?
#
# ## Summary
#
# - Registers and shared memory are per SM and small (228 KiB of shared memory per H200 SM);
#   HBM is large, but in the time it moves one byte the tensor cores can do about 184 FLOPs.
# - Attention's cost on a GPU is dominated by bytes moved to and from HBM, not by FLOPs.
# - Next: notebook 01 writes attention plainly and counts those bytes.
