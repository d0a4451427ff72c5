# %% [markdown]
# # 04 IO complexity: counting the bytes, and what they cost
#
# **Study time:** about 40 minutes. **Needs:** NumPy, matplotlib, ipywidgets.
#
# Notebook 03 traced the transfers of a tiled run. Here they become formulas
# (`flashlab.traffic`), tested to equal the traced bytes exactly, so we can ask questions at
# sizes no NumPy run could reach: how does traffic grow with sequence length N, with SRAM size M,
# and how does that compare with the FLOPs? The theory is Section 3.2 of the FlashAttention paper
# (Dao et al. 2022): standard attention makes $\Theta(N d + N^2)$ HBM accesses, FlashAttention
# $\Theta(N^2 d^2 / M)$, and no exact algorithm can do asymptotically better for all M
# (Proposition 3).

# %%
import flashlab
from flashlab import course, hardware
from flashlab import traffic as tr
from flashlab.flops import attention_flops
from flashlab.viz.style import format_bytes

env = course.setup()

# %% [markdown]
# ## The formulas equal the traced runs
#
# The traffic functions follow the accounting rules of `docs/ARCHITECTURE.md` transfer by
# transfer. Check a few random shapes (ragged, causal, FA1, FA2 and the backward) against traced
# NumPy runs: for each shape, the HBM bytes that `traced_forward(..., algorithm="fa2")` records
# against `tr.fa2_forward_traffic(...).total`, and the same for FA1 and the backward:

# %%
from flashlab.viz.traffic_plots import formulas_vs_traces_table, traced_forward

print(formulas_vs_traces_table(trials=6, seed=0))

# %% [markdown]
# ### Exercise 5: the traffic formula of the tiled forward
#
# Complete `exercises/ex05_traffic.py`: `fa2_forward_bytes(nq, nk, d, ...)`, the bytes of the
# FlashAttention-2 forward including causal skipping and ragged tiles.

# %%
from flashlab.grading import check

check("ex05_traffic")

# %% [markdown]
# ## Misconception: "FlashAttention saves FLOPs"
#
# It does not: it does the same matrix products, tile by tile. Count both for one head, d = 128,
# fp16, 128 x 128 tiles, non-causal. The FLOPs are equal; the bytes are not.

# %%
print(tr.flops_and_bytes_table(ns=(1024, 4096, 16384, 65536), d=128, block=128))

# %% [markdown]
# In this model the saving is only $2 B_q / d$ = 2x at d = 128 with 128-row query blocks: the
# FA2 loop re-reads K and V once per query block. A real GPU does much better, because the
# programs working on neighbouring query blocks run at the same time and share K and V through
# the L2 cache (60 MiB on the H200). Nsight Compute measured the DRAM bytes of both on the H200
# at B = 1, H = 16, N = 4096, d = 64, fp16 (`flashlab.hardware.NCU_*`, from
# `benchmarks/anchors/h200_ncu_naive_vs_flash.csv`):

# %%
from flashlab import perf

print(perf.ncu_anchor_table())
print(f"FLOPs, both: {hardware.NCU_FLASH.matmul_flops:.3e}")

# %% [markdown]
# The naive row measures 2.95 GiB where Algorithm 0's model counts 2.03 GiB. The measured naive
# attention runs four kernels, not Algorithm 0's three steps: `torch.matmul(q, k^T) * scale`
# (`benchmarks/_common.py`) writes S, then scales it in an elementwise kernel of its own, which
# reads all of S and writes it back: $2 \times 16 \times 4096^2 \times 2$ bytes = 1 GiB more (ncu measured 999 MiB
# for that kernel). `tr.naive_traffic(..., scale_pass=True)` counts that pass: 3.03 GiB, within 3%
# of the measurement (ncu misses the writes still in L2 when a kernel ends; here O's 8 MiB and a
# few per cent of each S and P write).
#
# One caveat before taking the ratio: ncu under-counts writes that are still in the L2 cache when
# the kernel ends, and the flash kernel's output O (8 MiB here) mostly is (the naive kernels' S
# and P, gigabytes, are not). `flashlab.perf.ncu_dram_ratio` computes the ratio from the committed
# Nsight Compute run (`benchmarks/results/ncu_traffic.json`), once as measured and once counting
# O's compulsory write:

# %%
ncu = course.load_results().get("ncu_traffic")
if ncu:
    for variant in ("sdpa_flash", "hopper"):
        r = perf.ncu_dram_ratio(ncu, n=4096, variant=variant)
        print(f"naive / {variant:<10}: {r['measured_ratio']:5.0f}x fewer DRAM bytes as ncu measured them, "
              f"{r['ratio_with_o']:5.0f}x counting O's write ({format_bytes(r['o_bytes'])})")

# %% [markdown]
# Same FLOPs; about 94 times fewer DRAM bytes once O's write is counted (about 120 as ncu
# reports them), because FA2 reads Q, K and V from DRAM essentially once (the model's K, V
# re-reads are served by L2). The traced NumPy runs agree on the FLOPs too: a run records its
# FLOPs tile by tile, and they equal the naive count.

# %%
t = traced_forward(512, 64, 64, 64)
print(f"traced tiled FLOPs {t.flops:,} = naive FLOPs {attention_flops(512, 512, 64):,}: "
      f"{t.flops == attention_flops(512, 512, 64)}")

# %% [markdown]
# Causal attention is the one case where tiling does save FLOPs, by skipping the tiles above the
# diagonal (about half); the naive algorithm computes the full matrices and masks them.
#
# ## Traffic against N
#
# Naive traffic grows as $N^2$ (S and P: $4 N^2$ elements). The flash curves use the paper's
# block sizes for an SRAM of M elements ($B_c = \lceil M / 4d \rceil$, $B_r = \min(B_c, d)$),
# and the two loop orders depend on different blocks (`flashlab.loop_order`): FA1's order moves
# about $3 N^2 d / B_c \approx 12 N^2 d^2 / M$ elements (the paper's $\Theta(N^2 d^2 / M)$, a
# constant smaller than naive's by about $M / 3d^2$: 5x at the widget's default, M = 128 KiB,
# d = 64), while FA2's order moves about $2 N^2 d / B_r$. $B_r$ reaches its cap $d$ once
# $M > 4d(d - 1)$ (`flashlab.loop_order.fa2_floor_sram`: 16,129 elements, 31.5 KiB of fp16 at
# d = 64); from there FA2's order moves about $2 N^2$, half of naive attention, however large M
# grows. Below it $B_r < d$ and FA2's order moves about $8 N^2 d^2 / M$: more than half of naive,
# and as much as naive at $M = 2 d^2$ (16 KiB at d = 64, the table below). All three are quadratic
# in N. The dots are traced NumPy runs of FA2, sitting on its formula curve. Move the sliders.

# %%
from flashlab.viz import traffic_vs_n_widget

traffic_vs_n_widget(d=64, sram_kib=128, traced_ns=env.pick(cpu=(128, 256), gpu=(128, 256, 512)))

# %% [markdown]
# ## Traffic against SRAM size M
#
# At fixed N and d, doubling M halves the traffic of FA1's loop order (its key block $B_c$ doubles)
# until one key block holds all of K ($B_c = N$): then Q, K and V are read once and O, which FA1's
# Algorithm 1 keeps in HBM between key blocks, is initialised, read and written back once, about
# $6 N d$ elements (12 MiB at N = 16384, d = 64, fp16, above the plot's 8 MiB band of reading Q, K,
# V and writing O once). FA2's loop order with
# the same paper block sizes stops improving once $B_r$ reaches $d$ (M > $4 d (d - 1)$ elements,
# just under 32 KiB at d = 64): from there it re-reads K and V $N / d$ times, about 1 GiB at
# N = 16384. So at large M
# the model has FA1's order moving *fewer* bytes than FA2's (0.40 against 1.00 GiB at 128 KiB).
# With equal blocks the opposite holds (FA2 about 2/3 of FA1). Bytes at equal SRAM are not what
# FlashAttention-2 improved: its gains are parallelism over query blocks, fewer non-matmul FLOPs
# and split-Q between warps (notebook 03), and on a GPU the L2 cache absorbs most K/V re-reads
# (the ncu measurement above). With a very small M (16 KiB below) the paper's FA1 schedule moves
# *more* than standard attention: tiling pays only when a tile holds enough. The marks on the plot
# are real shared-memory sizes: per SM (what one thread block can use) and summed over all SMs
# (which no single block can use).

# %%
from flashlab.loop_order import loop_order_table

print(loop_order_table(n=16384, d=64, sram_kib=(16, 32, 64, 128, 228)))

# %% [markdown]
# The paper's accesses (elements, FA1's order) against its lower bound and standard attention; an
# SRAM of `sram_kib` KiB holds M = sram_kib x 1024 / 2 fp16 elements:

# %%
print(tr.paper_accesses_table(n=16384, d=64, sram_kib=(16, 32, 64, 128, 228), itemsize=2))

# %%
from flashlab.viz import plot_traffic_vs_sram

course.show(plot_traffic_vs_sram(n=16384, d=64))

# %% [markdown]
# ## The roofline: why bytes decide the speed
#
# A kernel's arithmetic intensity is FLOPs per HBM byte. Below the ridge point
# (about 184 FLOP/byte on the measured H200, notebook 00) it is limited by bandwidth; above, by
# compute. Naive attention's softmax kernel sits near 1 FLOP/byte. In the model the flash forward
# and backward sit two orders of magnitude higher, just under the ridge; with the DRAM bytes
# measured on the H200 (hollow markers) the flash forward is far into the compute-bound region.
# Decode (one query row against a KV cache) stays near 1 FLOP/byte whatever the algorithm:
# notebook 09 returns to this.

# %%
from flashlab.viz import plot_roofline, roofline_data, roofline_table

data = roofline_data(n=4096, d=64)
print(roofline_table(data))
course.show(plot_roofline(data))

# %% [markdown]
# ## Bytes moved vs bytes touched on chip
#
# FlashAttention does not touch fewer bytes: its matmuls still read and write every tile, but
# inside SRAM, which is an order of magnitude faster than HBM. The figure puts the two side by side.

# %%
from flashlab.viz import plot_moved_vs_touched

course.show(plot_moved_vs_touched(n=env.pick(cpu=512, gpu=1024), d=64))

# %% [markdown]
# ## Prefill against decode
#
# In *prefill* a whole prompt of N tokens attends to itself: $N_q = N_k = N$, and each K, V tile
# loaded serves `block_q` query rows. In *decode* one new token attends to the cache:
# $N_q = 1$. There is no N x N matrix to avoid, so there is little for FlashAttention to save:

# %%
print(tr.prefill_decode_table(n=8192, d=128, block=128))

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
# **04.1** N = 16384, d = 64, SRAM of M = 65536 elements, the paper's block sizes: how many times
# fewer HBM accesses does FlashAttention make than standard attention?

# %%
answer("04.1", None)  # your number

# %% [markdown]
# **04.2** Why does doubling the SRAM size M roughly halve FlashAttention's traffic, and where does
# that stop?
#
# - (a) FLOPs halve with M
# - (b) the GPU clock rises with M
# - (c) key blocks get twice as large, halving the passes over Q and O; it stops once one key block holds
#   all of K (Q, K, V read once, O initialised, read and written once)
# - (d) it never stops: traffic falls to 0

# %%
answer("04.2", None)  # your letter, e.g. "b"

# %% [markdown]
# **04.3** Why is shared memory summed over all SMs not the M of the theorem?
#
# - (a) the sum is too small
# - (b) shared memory is slower than HBM
# - (c) M counts registers only
# - (d) each thread block sees only its own SM's shared memory

# %%
answer("04.3", None)  # your letter, e.g. "b"

# %% [markdown]
# **04.4** Non-causal: does tiled attention do more matmul FLOPs than naive attention, fewer, or the
# same?
#
# - (a) more
# - (b) the same
# - (c) fewer
# - (d) it depends on the block size

# %%
answer("04.4", None)  # your letter, e.g. "b"

# %% [markdown]
# To think about (not graded):
#
# 1. Why does FlashAttention speed up prefill far more than decode? (Notebook 09 measures it.)

# %% [markdown]
# ## Summary
#
# - The traffic formulas equal traced runs exactly; FLOPs are unchanged by tiling (non-causal).
# - Naive: $\Theta(N d + N^2)$ bytes; flash (FA1's loop order, paper blocks):
#   $\Theta(N^2 d^2 / M)$, falling as 1/M towards about $6 N d$ elements (Q, K, V read once; O
#   initialised, read and written once); Proposition 3
#   says no exact method does asymptotically better.
# - Intensity decides: the flash kernels move from memory-bound towards compute-bound; decode
#   stays memory-bound.
# - Next: notebook 05 introduces Triton, to write the kernel for real.
