# %% [markdown]
# # 08 Performance on an H200
#
# **Study time:** about 50 minutes. **Needs:** matplotlib; a CUDA GPU for live timings.
#
# Without a GPU this notebook reads the results committed in `benchmarks/results/`, measured on
# one NVIDIA H200 by the scripts in `benchmarks/` (each file records its environment: torch,
# triton, cuDNN, date). With a GPU it first re-runs a reduced version on yours. The protocol is
# the FlashAttention-2 paper's (Section 4.1): B x N = 16384 tokens, H x d = 2048, d in {64, 128};
# forward FLOPs $4 B H N^2 d$ (halved when causal), forward + backward 3.5x that (FA2's count;
# the course's backward executes more, notebook 07); time is the median of
# `triton.testing.do_bench`. Every number below is computed by `flashlab.perf` from a results
# file; the figures come from `flashlab.viz`. You will read them as an engineer would: how close
# to the hardware's peak, whether a speed-up was predictable, what the profiler's bytes say.

# %%
from flashlab import course

env = course.setup()

from flashlab import hardware, perf, viz

results = course.load_results()
if not results:
    print(f"No results file yet in {course.results_dir()}: run `flashlab bench` on a GPU to create "
          "them. The tables and plots below are skipped.")
print(perf.describe_environments(results))
bench, memory, ncu = results.get("bench_attention"), results.get("bench_memory"), results.get("ncu_traffic")
baselines = results.get("bench_baselines")
where = "H200, benchmarks/results/"

# %% [markdown]
# ## Live timings (GPU only)
#
# On a GPU, this cell times every variant below on your GPU (bf16, the N you list) and the memory
# benchmark, writing to `artifacts/` (the committed files are left alone); every plot after it
# then shows your GPU. On a CPU it does nothing: interpreter time measures NumPy, not a GPU.

# %%
LIVE_SEQ_LENS = (1024, 8192)  # N values to time live; more values, more minutes
LIVE_MEMORY_SEQ_LENS = (1024, 4096, 16384, 65536, 262144)

if bench:
    print(f"the committed run: {len(bench['rows'])} rows in {bench['elapsed_s']:.0f} s on the H200")
if not env.has_gpu:
    print("No CUDA GPU: reading the committed H200 results (interpreter time says nothing about GPU speed).")
else:
    bench = course.run_benchmark("attention", ["--dtypes", "bfloat16", "--seq-lens", *LIVE_SEQ_LENS],
                                 "bench_attention_live")
    memory = course.run_benchmark("memory", ["--seq-lens", *LIVE_MEMORY_SEQ_LENS], "bench_memory_live")
    where = f"{env.gpu_name}, live (artifacts/)"

# %% [markdown]
# ## Throughput against N, beside PyTorch's backends
#
# Forward TFLOP/s in bf16 for flashlab's kernel, the three SDPA backends and naive PyTorch
# attention (matmul, softmax, matmul). FLASH_ATTENTION is FlashAttention-2; EFFICIENT_ATTENTION is
# memory-efficient attention; CUDNN_ATTENTION is cuDNN's fused attention, which SDPA chose by
# default on the measured H200 with torch 2.11 and cuDNN 9.19 (`torch._fused_sdp_choice` returned
# cuDNN for d = 64 and 128, causal and not, `benchmarks/anchors/h200_sdpa.txt`). SDPA's choice
# depends on the torch and cuDNN versions and on the GPU; do not assume it elsewhere.

# %%
if bench:
    course.show(viz.plot_throughput(bench, "fwd", where))

# %% [markdown]
# Forward + backward (3.5x the forward FLOPs):

# %%
if bench:
    course.show(viz.plot_throughput(bench, "fwdbwd", where))

# %% [markdown]
# ## Percent of peak
#
# A TFLOP/s number means little alone. Divide it by what the chip can do: the tensor cores' rate
# on a large bf16 matmul, measured on the same machine (the `ceilings` block of each results
# file; an 8192^3 matmul). For example, 450 TFLOP/s against a 780 TFLOP/s matmul is 58% of peak.
# Every backend's range over the rows with N >= 4096, against the highest matmul rate measured in
# these runs (the two runs measured different matmul rates: one ceiling measurement is itself
# uncertain by that much):

# %%
if bench:
    print(perf.peak_table(results, "fwd"))

# %% [markdown]
# The reference measurements the project was given (`benchmarks/anchors/h200_sdpa.txt`, another
# session on an H200, against its ~790 TFLOP/s matmul, `flashlab.hardware.H200_MEASURED`) put
# SDPA's backends in the same places:

# %%
anchors = course.repo_root() / "benchmarks" / "anchors" / "h200_sdpa.txt" if course.repo_root() else None
if anchors and anchors.exists():
    print(perf.anchor_peak_table(anchors.read_text(), hardware.H200_MEASURED.flops_per_s / 1e12))

# %% [markdown]
# Attention cannot reach 100%: between its two matmuls sits the softmax, whose exponentials run
# on the special-function units (an H100 SXM5 has 3.9 TFLOP/s of them against 989 TFLOP/s of
# FP16 matmul, FlashAttention-3 paper), and the rescaling of the accumulator. How close a kernel
# gets depends on hiding that work behind the matmuls.
#
# ## FlashAttention-3: what Hopper adds, and where the course's rungs stand
#
# FlashAttention-3 (Shah, Bikshandi, Zhang, Thakkar, Ramani, Dao 2024) keeps FA2's algorithm and
# re-schedules it for Hopper (sm90):
#
# - **TMA** (Tensor Memory Accelerator): one thread issues the copy of a whole tile from HBM to
#   shared memory; the hardware computes the addresses and signals an `mbarrier` when the tile
#   lands, so the other threads keep their registers and cycles for arithmetic.
# - **wgmma**: Hopper's tensor-core instruction is issued by a *warpgroup* (4 warps), runs
#   asynchronously, and reads its operands from shared memory. Ampere's `mma.sync` (what FA2 is
#   written for, sm80) is a synchronous per-warp instruction; FlashAttention-2 reaches about 35%
#   of an H100's peak with it (FlashAttention-3 paper, abstract).
# - **Producer/consumer warp specialisation**: a producer warp only issues TMA copies into a ring
#   of shared-memory buffers; consumer warpgroups only compute. Registers are re-allocated
#   towards the consumers (`setmaxnreg`).
# - **Ping-pong between warpgroups**: two consumer warpgroups are ordered with barriers so that
#   one's softmax runs while the other's GEMMs use the tensor cores.
# - **Softmax overlapped with the GEMMs inside a warpgroup**: the softmax of block j runs while
#   the asynchronous GEMMs $Q K_{j+1}^\top$ and $P_j V_j$ are in flight.
# - **FP8**: wgmma in FP8 doubles the tensor-core rate; FA3 rearranges the layout FP8 needs for
#   the second GEMM and uses block quantisation and incoherent processing (multiplying Q and K by
#   a random orthogonal matrix) to keep the error down.
#
# The course's last two rungs take part of this. **v4_hopper** (`kernels/flash_fwd_hopper.py`)
# loads Q, K, V through tensor descriptors (TMA) and lets Triton's compiler emit wgmma and
# software-pipeline the K/V loads; it has no warp specialisation (Triton's automatic version
# measured no faster, benchmarks/NOTES.md). **v5_gluon_ws** (`kernels/flash_fwd_gluon.py`, in
# Gluon) writes the FA3 schedule by hand: one producer warp with TMA and an mbarrier ring, two
# consumer warpgroups each overlapping its softmax with its own wgmma products, without forced
# ping-pong (the warp schedulers interleave the two). Neither does FP8. SDPA's FLASH backend is
# FlashAttention-2's CUDA code, written for sm80's `mma.sync`, with no TMA and no warp
# specialisation; on the H200 it stays near 40% of the matmul peak (the table above), which is why
# every Hopper rung and cuDNN (which uses Hopper's instructions) pass it. What v5 buys over v4,
# row by row, and where `flash_attention` uses it:

# %%
if bench:
    print(perf.gluon_gain_table(bench))

# %% [markdown]
# The causal row at N = 1024 is short work per program: a 1024-key causal head has 8 query
# blocks of 1 to 8 key steps, and a program that owns one tile pays its prologue (barriers, the Q
# load, the first product alone) and epilogue (the last product, the O store) with nothing else on
# its SM. There v5 runs a persistent grid: one program per SM walks the tiles, heaviest first in
# groups of 4 heads, and its producer loads the next tile while the consumers finish this one.
# Beside cuDNN in one run (B = 16, H = 16, d = 128; `benchmarks/results/bench_fwd_short_s7_final.json`):
# 375 against 415 TFLOP/s in bf16 (0.90x) and 363 against 396 in fp16 (0.92x), where v4 ran
# 0.81-0.83x (`benchmarks/NOTES.md`, "Session 7").

# %% [markdown]
# ## Compiler baselines: torch.compile and FlexAttention
#
# How far does a compiler get on its own? `benchmarks/bench_baselines.py` timed
# `torch.compile`d naive attention and FlexAttention (`torch.nn.attention.flex_attention`,
# compiled; causal through a block mask) beside SDPA's default and `flash_attention`, at a few
# protocol shapes (bf16, torch 2.11 on the H200), TFLOP/s:

# %%
if baselines:
    print(perf.baselines_table(baselines, "fwd"))
    print()
    print(perf.baselines_table(baselines, "fwdbwd"))

# %% [markdown]
# Two findings. FlexAttention, which generates a FlashAttention-style Triton kernel from a mask
# function, runs at 44-61% of the matmul peak: ahead of SDPA's FA2, behind cuDNN and the
# hand-scheduled rungs at d = 128 in the forward, and ahead of flashlab's two-pass backward in
# forward + backward at d = 128 (7 matmuls per tile; `flash_attention` ran it when this file was
# measured, and now runs the one-pass Gluon rung from N = 1024 on sm90: notebook 07). And
# compiled naive attention is as fast as SDPA
# when not causal but only 2-4x eager when causal, far behind every fused kernel. The correctness check each variant
# passed before timing (relative error against float32 attention) shows why: not causal, the
# compiled version's error is SDPA's (about half of eager naive's), because Inductor recognised the
# matmul-softmax-matmul pattern and replaced it by a call to SDPA (its fused-attention pattern
# rewrite); with the causal `masked_fill` the pattern did not match, so S and P were materialised:

# %%
if baselines:
    print(perf.baseline_errors(baselines))

# %% [markdown]
# ## How close to the references
#
# flashlab's kernel against SDPA's FLASH backend (FlashAttention-2) and cuDNN, row by row. A
# ratio is the reference's time over flashlab's (`course.speedup`); above 1 is faster. (The
# project's targets for these ratios, and how they were reached, are in `benchmarks/NOTES.md`.)

# %%
if bench:
    print(perf.ratio_table(bench))

# %% [markdown]
# One row stands out: fp16, d = 128, N = 512, causal, at 0.48x cuDNN's forward (0.85x FA2's).
# The same row timed the library's own kernels again under other names, and they ran at 209
# (`gluon`) and 247 (`hopper`) TFLOP/s against `flashlab`'s 154 (`benchmarks/results/
# bench_attention.json`). The first timing in a row is sometimes low at N = 512 (also bf16 d = 128
# and fp16 d = 64 in earlier calls); the cause was not established (`benchmarks/NOTES.md`). N = 512
# is not a target row.
#
# Timings also spread from run to run. Each bf16 row of the run timed the same forward kernels
# twice: the Hopper rung as `hopper` and `rung:v4_hopper`, the Gluon rung as `gluon` and
# `rung:v5_gluon_ws`. How far apart were the two timings of one kernel (N >= 4096, where the
# host's overhead is negligible)?

# %%
if bench:
    print(perf.timing_spread_line(bench))

# %% [markdown]
# A ratio within that spread of 1 is a tie, not a verdict.
#
# ## The optimisation ladder, and a speed-up you can predict
#
# Each rung of notebook 06 was timed in the same run. `v0_grid_bh` launches one program per
# (batch, head), FA1's parallelism; `v1_minimal` adds FA2's grid over query blocks and is
# otherwise the same kernel. Predict the v1 / v0 speed-up before reading it. Under the protocol,
# long N means small batch: at N = 16384 (d = 128), B = 1 and H = 16. Count the programs each grid
# launches (v1's query blocks have 128 rows), compare with the H200's 132 SMs, and assume each
# program runs on one SM at a time and does the same work in both grids.

# %% [markdown]
# **Predict, then check.** Before the plot below: at N = 16384, B = 1, H = 16 (bf16, d = 128, not
# causal), how many times faster did `v1_minimal` run than `v0_grid_bh` on the H200 (132 SMs)? Write
# your number in place of `None` and run the cell: `predict` shows your number, the course's value and
# the relative error, and records them. Within 25% counts: a measured number.

# %%
from flashlab.selftest import predict

predict("v1_over_v0_speedup", None)  # your number

# %%
if bench:
    print(perf.grid_prediction_table(bench, d=128, block_m=128))

# %% [markdown]
# v0 has 16 programs for 132 SMs; v1 has 16 x 16384 / 128 = 2048. A grid keeps
# min(programs, SMs) of the SMs busy, so the speed-up is the ratio of busy SMs: 132 / 16 = 8.25
# at N = 16384, and 1.0 whenever B x H >= 132 (`perf.predicted_grid_speedup`). This occupancy
# model predicts the measurement to within 6 % (8.25x predicted, 8.73x measured at N = 16384, the
# table above). The rungs after v1 (exp2 and the
# causal two-stage loop, autotuning, the Hopper rung, the Gluon rung) add the rest:

# %%
if bench:
    course.show(viz.plot_ladder(bench, 128, where))

# %% [markdown]
# ## Memory against N
#
# Peak extra memory of one forward pass (one head, d = 128, bf16), measured with PyTorch's
# allocator (`bench_memory.json`). Naive attention allocates S and P; the flash kernel allocates
# only O and lse. A dotted vertical line marks an out-of-memory failure. From N = 16384 SDPA FLASH's
# line lies on flashlab's (crosses inside the squares): the same O and lse, plus 1 KiB.

# %%
if memory:
    course.show(viz.plot_memory(memory, where))
    print(viz.largest_common_memory(memory))

# %% [markdown]
# Below N = 16384 SDPA FLASH holds 4 MiB (N = 1024) to 8 MiB (N = 2048 to 8192) more than flashlab,
# about as much as naive attention's whole peak at N = 1024 (4.25 MiB, notebook 01). The
# extra is, to the byte, a whole number of fp32 copies of (O, lse) plus 1 KiB: 8 copies at N = 1024
# and 2048, 4 at 4096, 2 at 8192, none from 16384 on. That is the shape of FlashAttention-2's
# split-KV forward, which splits the keys when one head's grid of query blocks would leave SMs
# idle, and keeps one fp32 partial (O, lse) per split to merge (notebook 09's combine). With
# 128-row query blocks, copies x N / 128 is 64 to 128 programs in every row that split, against
# the H200's 132 SMs, and N = 16384 has 128 blocks without splitting. The run did not record the
# splits SDPA chose, so this is read from the bytes, not measured:

# %%
if memory:
    print(perf.sdpa_flash_memory_extra(memory))

# %% [markdown]
# ## Your kernel beside the course's
#
# On a GPU, this times your `flash_forward` (exercise 07's kernel, or a full-kernel exercise if your
# exercises folder has one) beside rungs v0 to v3, `flash_attention` and PyTorch's SDPA, at a few fp16
# shapes, and checks its output first. Without a GPU it says why it does not time: the interpreter's
# time measures Python, not a GPU. `flashlab bench --mine` does the same from a shell.

# %%
from flashlab.bench import mine

print(mine())

# %% [markdown]
# ## Bytes through DRAM, measured, against the model
#
# Reading the profiler. Nsight Compute's `dram__bytes_read.sum` and `dram__bytes_write.sum` over every kernel of one
# call (fp16, B = 1, H = 16, d = 64, forward, committed H200 run), beside `flashlab.traffic`'s
# model. The last columns give the size of one S matrix for all heads, against the 60 MiB L2
# cache (`flashlab.hardware.H200_L2_BYTES`). Read the table before the prose below it: in each
# row, is measured/model above or below 1? What could move bytes the model does not count, and
# what could serve bytes the model counts from somewhere other than DRAM?

# %% [markdown]
# **Predict, then check.** Before the table below: how many GiB did Nsight Compute measure through
# DRAM for one naive forward at N = 4096, B = 1, H = 16, d = 64, fp16 (its S and P are 16 x 4096 x
# 4096 each)? Notebook 04's model counted this shape; the question is what the hardware did: does
# anything in PyTorch's naive attention move bytes the model leaves out, or does the L2 cache keep
# some away from DRAM? Write your number in place of `None` and run the cell: `predict` shows your
# number, the course's value and the relative error, and records them. Within 25% counts: a
# measured number.

# %%
from flashlab.selftest import predict

predict("ncu_naive_dram_gib", None)  # your number

# %%
if ncu:
    print(perf.ncu_table(ncu, hardware.H200_L2_BYTES))

# %% [markdown]
# Where S for all heads is larger than the L2 cache, the naive rows measure more than the model:
# S and P really go through DRAM, and PyTorch's naive attention runs four kernels (the extra
# scaling pass reads and writes S once more). Where S fits in L2 (N = 1024), part of it is read
# back from L2 before it ever reaches DRAM, and the naive row measures less than the model.
# The flash rows read far less than the model's K/V re-reads predict (about Q + K + V once):
# programs working on neighbouring query blocks share K and V through L2, and the model counts
# loads from global memory, not DRAM traffic. ncu also under-counts writes still in L2 when a
# kernel ends: the flash rows' writes are below the size of O (notebook 04 corrects for it).
#
# ## Misconception: "it drops in everywhere with the same gain"
#
# The speed-up of flash over naive attention depends on the shape. From the same results, the time
# ratio naive / flashlab (bf16):

# %%
if bench:
    print(perf.naive_gain_table(bench))

# %% [markdown]
# The gain ranges over an order of magnitude. It is larger when causal (naive attention computes
# the masked half and then masks it; flash skips those tiles), larger at d = 64 than at d = 128
# (the protocol fixes H x d, so d = 64 has twice the heads, and so twice the N x N matrices for
# naive attention to move, for the same FLOPs), and smaller for forward + backward. It grows with N
# up to N = 8192 and falls at N = 16384 (9.3x to 6.4x not causal at d = 64). The lines under the
# table say which side moved: flashlab's rate keeps rising slowly (414 to 421 TFLOP/s at d = 64),
# while naive attention runs faster at N = 16384 than at 8192 (66 against 45 TFLOP/s; 130 against 89
# at d = 128). The protocol keeps B x N = 16384, so that row is batch 1, one batched matrix product
# over 32 (or 16) heads of 16384 x 16384; the results do not record which matrix-product kernels
# PyTorch picked there, so why naive attention speeds up is not established. For decode (one query
# row), notebook 09 shows the gain almost vanishes.

# %% [markdown]
# ### The same kernel on other GPUs
#
# The gain also depends on the GPU: how much shared memory one program may use decides which tiles
# fit (a T4 allows 64 KiB per block, an H200 227 KiB; `flashlab.targets`), the tile height
# `BLOCK_M` decides how often K and V are re-read from HBM, the bandwidth decides how long those
# bytes take, and the SM count how many query-block programs run at once. Below, for each common
# GPU: the v3 tiles that fit at d = 128 in fp16, the traffic model's bytes for naive and
# FlashAttention-2 with the tallest tile that fits, their ratio (the gain if both were
# memory-bound), the time those bytes take at the datasheet bandwidth, and your own GPU.

# %%
from flashlab import targets

print(targets.gain_table_text(n=4096, d=128, batch_heads=16))

# %% [markdown]
# At d = 128 a T4 fits only 64 x 32 tiles, so FlashAttention-2 re-reads K and V twice as often as
# on the other GPUs and the model predicts almost no saving there; a model also only switches to
# FlashAttention where the kernel supports its dtype and head dim (bf16 needs sm80: a T4 runs
# fp16 only, and the Hopper rungs v4/v5 run on sm90 only; `flashlab doctor` says what yours runs).

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
# **08.1** At N = 16384, B = 1, H = 16, v0_grid_bh launches one program per (batch, head). By what
# factor does that fall short of the H200's SM count?

# %%
answer("08.1", None)  # your number

# %% [markdown]
# **08.2** Why does the flash kernel read fewer DRAM bytes than the traffic model predicts?
#
# - (a) ncu does not count reads
# - (b) neighbouring programs share K and V through the L2 cache
# - (c) the kernel compresses K and V
# - (d) the model counts FLOPs

# %%
answer("08.2", None)  # your letter, e.g. "b"

# %% [markdown]
# **08.3** From the ncu table: naive attention at N = 4096, measured DRAM bytes divided by the model's
# bytes?

# %%
answer("08.3", None)  # your number

# %% [markdown]
# **08.4** A row is 0.98x its target at N = 1024. What do you check before calling the kernel slower?
#
# - (a) the kernel's FLOPs
# - (b) the GPU's clock speed only
# - (c) the number of registers
# - (d) the spread between repeated runs: within it, a 0.98x is a tie

# %%
answer("08.4", None)  # your letter, e.g. "b"

# %% [markdown]
# To think about (not graded):
#
# 1. Which SDPA backend is fastest on the H200, and how far is flashlab from it (read the ratio
#    table)?
# 2. At which N did naive attention run out of the H200's memory for one head, and why there?
# 3. Give two shapes where FlashAttention's speed-up over naive attention differs by more than 2x.

# %% [markdown]
# ## Summary
#
# - On the H200, flashlab's kernel is measured beside SDPA's FlashAttention-2, cuDNN and
#   memory-efficient backends, beside FlexAttention and torch.compile; percent of the matmul peak
#   puts every one against the hardware (FA2's sm80 code near 40% on the H200, the Hopper-specific
#   kernels well above), and the ratio table states where flashlab stands on every row.
# - FA2's grid over query blocks is what keeps the GPU busy at small batch, by the factor an
#   occupancy count predicts; the later rungs (exp2,
#   causal two-stage loop, autotuning, tensor-descriptor loads on Hopper, a warp-specialised
#   Gluon kernel) add the rest.
# - Naive attention's memory grows as $N^2$ and runs out; the flash kernel's grows as $N$.
# - Next: notebook 09 looks at decoding, where the picture changes.
