# %% [markdown]
# # 09 Beyond prefill: decoding with a KV cache
#
# **Study time:** about 35 minutes. **Needs:** NumPy; torch and triton for the kernel cells.
#
# A language model *generates* one token at a time. Each new token's query attends to the keys
# and values of every earlier token, kept in a *KV cache*: $N_q = 1$, $N_k = N$. This is
# *decode*, as opposed to *prefill* (the prompt, $N_q = N_k = N$). Decode changes what limits
# attention, and what FlashAttention can do about it.

# %%
from flashlab import course

env = course.setup()

import flashlab
from flashlab import hardware

# %% [markdown]
# **Predict, then check.** Before this section: for one decode step (Nq = 1) over a cache of Nk =
# 16384 keys, d = 128, fp16, how many times more HBM bytes does naive attention move than
# FlashAttention-2? Write your number in place of `None` and run the cell: `predict` shows your
# number, the course's value and the relative error, and records them. Within 10% counts.

# %%
from flashlab.selftest import predict

predict("decode_traffic_ratio", None)  # your number

# %% [markdown]
# ## Decode is memory-bound, whatever the algorithm
#
# One decode step reads the whole cache (K and V: $2 N d$ elements per head) and does
# $4 N d$ FLOPs: about 1 FLOP per byte in fp16, against the H200's ridge point of about 184
# FLOP/byte (790 TFLOP/s over 4.3 TB/s, measured: `benchmarks/anchors/README.md`, notebook 00). There is no $N \times N$ matrix: S and P are one row. So the naive algorithm
# moves almost exactly what FlashAttention moves:

# %%
from flashlab import decode_results

print(decode_results.traffic_table(ns=(1024, 8192, 65536), d=128))

# %% [markdown]
# Compare prefill at the same N (notebook 04): there the naive/flash traffic ratio grows with N
# and the intensity is two orders of magnitude higher. A decode step's time is therefore about
# (bytes of the KV cache) / (HBM bandwidth). For a model with 32 query heads, d = 128, fp16, one
# layer: no step can be faster than the cache's bytes at the datasheet's 4.8 TB/s; a kernel that
# only reads gets close to that (flash_decode reads at up to 4.6 TB/s in the tables below), above
# the 4.3 TB/s a device-to-device copy measures (bytes read plus bytes written).

# %%
print(decode_results.cache_floor_table(heads=32, n_ctx=32768, d=128, itemsize=2, kv_heads=(32, 8, 1)))

# %% [markdown]
# Grouped-query attention (Ainslie et al. 2023) shares each K/V head among several query heads:
# the cache, and so the decode time, shrink by H / H_kv, if each K/V byte is read from HBM about
# once. The course's prefill kernels do not arrange that themselves. Grouped-query shapes run on
# every forward rung of notebook 06 (v0-v5): each query block of each query head is its own
# program (on v5's persistent grid, its own tile), and it loads K and V of kv head `h // GROUP`
# on its own. The GROUP query heads that share
# a kv head therefore issue GROUP separate loads of the same tiles, and the sharing happens only
# when those loads hit in the L2 cache (likely when the programs run at about the same time, not
# guaranteed). A decode kernel can do better by packing the query heads of one group into the
# rows of one program, so that each K/V tile is loaded once for the whole group.
#
# ## Split-KV decoding
#
# With $N_q = 1$ the FA2 grid has one program per (batch, head): at batch 1 and 32 heads, 32
# programs for an H200's 132 SMs. Flash-Decoding (Dao et al. 2023, "Flash-Decoding for
# long-context inference") splits the cache into chunks processed by separate programs, each
# returning a partial output and its log-sum-exp; a final step combines them. The combine is
# notebook 02's `combine_states`: a normalised partial output $o_c$ with log-sum-exp
# $\mathrm{lse}_c$ is the state $(m, l, \mathrm{acc}) = (\mathrm{lse}_c, 1, o_c)$. The loop in NumPy
# (`flashlab.decode.split_kv_decode`), then how exact it is:

# %%
from flashlab import decode

print(course.source(decode.split_kv_decode))

# %%
print(decode_results.split_kv_table(splits=(1, 4, 16, 64), n_cache=1000, d=64, heads=4))

# %% [markdown]
# ## How many splits? The rule
#
# `flashlab.flash_decode` decides from the shape and the GPU how many splits to cut the cache
# into, which tile config to run and who merges the partial states (`flashlab.split_rule`).
# Every program streams the same number of keys, so what costs time is an idle tail (a partly
# filled last wave of programs, late programs finishing alone) and, for every split, merging its
# partial state. On the H200 (`benchmarks/results/decode_sweep_combine_call5.json`): a grid that
# already gives each of the 132 SMs a program runs unsplit, with a *wide* tile (128 keys, one
# program per SM): 128 programs took 75.6 us against 78.4 us cut into 2 splits of the default
# config (64 keys, two programs per SM). A smaller grid is split until every SM holds one wide
# program (`benchmarks/results/bench_decode.json`, `split_wide`): one sequence with 8 kv heads
# and 128k keys took 138.7 us in 16 splits of the wide config against 141.3 us in 16 of the
# default one and 141.1 us in 32 wide splits (two waves; medians of 3 rounds, 2026-12-02). Where those splits would spill into a
# second wave (124 programs: 2 splits make 248 for 132 SMs) the grid runs one partial wave instead
# if it keeps 70 % of the SMs busy: unsplit, 124 programs took 474.8 us against 486.2 us in 2 splits
# at 32k keys (`benchmarks/results/decode_wave_probe_call15.json`). Up to 16 splits the last program
# to finish merges them; above, a second kernel does. A grid of 7 waves or more runs unsplit as it is.
# Between one wave and 7, when every sequence has all N_max keys, N_max is at most 4k and the ranges
# divide evenly among the SMs (512 ranges: 128 programs of 4), one program per SM walks its ranges in
# one pipelined loop instead of waves of one program per range, so an SM never waits for a new
# program's first loads: 251.8 us against 253.7 us in waves at 16 sequences x 32 kv heads x 4k keys,
# 252.5 us against 254.8 us at 64 x 8 (`benchmarks/results/decode_flat_library.json`). At 32k keys
# the fixed walk waits for its slowest SM, where the waves hand each new range to whichever SM is
# free: its rounds took 1885-2094 us against the waves' 1896-1902 us, so longer ranges keep the waves.

# %%
from flashlab import decode, decode_results

print(decode_results.split_rule_table())

# %% [markdown]
# ## Split-KV in Triton: `flashlab.flash_decode`
#
# `flash_decode(q, k_cache, v_cache, cache_seqlens)` runs the split-KV loop above as one Triton
# kernel (`flashlab/kernels/flash_decode.py`). Two ideas beyond the NumPy version:
#
# - **GQA packing.** The query heads that share one kv head, times the $N_q$ new queries, are
#   the rows of one query tile, so each K/V tile loaded from HBM serves the whole group.
# - **The combine in the same launch.** Each program writes its partial $(o_s, \mathrm{lse}_s)$
#   in fp32; the last program of a tile to finish (an atomic counter tells it) merges them with
#   `combine_states`' arithmetic, loading 8 splits' partials at a time so their latencies overlap
#   (above 16 splits a second kernel merges them, one program per query row).
#
# `cache_seqlens` gives each sequence's valid length, counting the new queries' own keys; the
# cache past it is never read. Query $i$ of $N_q$ sees keys $j \le L - N_q + i$: the causal
# mask aligned bottom-right. Checked against a float64 reference:

# %%
if env.triton_mode == "missing":
    print("triton is not installed: skipping the kernel cells; see `flashlab doctor`")
else:
    import torch

    q_d = torch.randn(2, 8, 3, 64, device=env.device)  # (B, H, Nq, d): three new tokens per sequence
    k_c, v_c = (torch.randn(2, 2, 90, 64, device=env.device) for _ in range(2))  # (B, Hkv, N_max, d)
    lengths = torch.tensor([90, 41], dtype=torch.int32, device=env.device)  # valid keys per sequence
    o_d = flashlab.flash_decode(q_d, k_c, v_c, cache_seqlens=lengths, num_splits=3)
    print(f"flash_decode vs float64 reference: max error "
          f"{(o_d.double().cpu() - decode.decode_reference(q_d, k_c, v_c, lengths)[0]).abs().max().item():.1e}")

# %% [markdown]
# ## Measured: naive, the unsplit kernel and split-KV
#
# Decode steps on an H200 (`benchmarks/results/bench_decode.json`, from
# `benchmarks/bench_decode.py`): naive attention, the course's FlashAttention-2 kernel with
# one program per query block and head ("unsplit"), `flash_decode`, and PyTorch's SDPA. Two
# more columns separate the GPU's time from the host's: "host us" is the wall time per call of
# 1000 back-to-back calls, "graph us" one call's share of a CUDA-graph replay (no host work).

# %%
print(decode_results.results_table())

# %% [markdown]
# What the table says (`benchmarks/results/bench_decode.json`; `benchmarks/NOTES.md`, decode
# section), counted in the summary under this cell. From 32k keys up `flash_decode` reads K and V
# near the rate of the device copy on every row but the smallest, one sequence with 8 kv heads
# (134 MB, that is 128 MiB), where SDPA is no faster. There even a kernel that does nothing but
# read those 134 MB takes 42.8 us (3.1 TB/s; `read_ceilings` in the same file). Part of it is the timing method, not the kernel: before each run the
# bench empties L2 by writing 256 MB (as `triton.testing.do_bench` does), and L2 then writes those
# dirty lines back to HBM while the kernel reads. After a flush that only reads, the pure read
# takes 34.1 us (3.9 TB/s), `flash_decode` 39.7 us and SDPA 40.6 us
# (`benchmarks/results/decode_probe_call9.json`; `benchmarks/NOTES.md`, decode section, "Call 9
# outcomes"): about 8.5 us of the row's time was the write-back. Against SDPA's time the summary
# names the rows over it and says which differ by more than the spread of three interleaved
# timing rounds: on those rows both kernels run at the speed of a kernel that only reads the same
# bytes, and launch and L2 effects under 1 % decide the order. Python matters at decode: each call
# once took 82-195 us of host time (Triton's generic launch plus checks; NOTES.md, "Call 2
# outcomes") for 10-50 us of GPU work; with a launch plan per shape (checks once, scratch reused,
# the compiled kernel launched directly) the host lines of the summary show what is left: 16-26 us
# to issue a call, less than the GPU's work on every row but the smallest, where the GPU needs
# 10.5 us (one CUDA-graph replay, `graph us` in the table) and back-to-back calls take the host's
# 16.0 us each. Checking the values in `cache_seqlens` on the host, which `flash_decode`
# does by default, costs a synchronisation: 32-45 us per call on that machine
# (`benchmarks/results/decode_paged_call8.json`); `check_lengths=False` skips it (a bad length
# then gives NaN for its sequence instead of an error).

# %%
print(decode_results.results_summary())

# %% [markdown]
# Three rounds per row cannot tell a gap of a few tenths of a percent from chance. Twelve
# interleaved rounds per row on one H200 (`benchmarks/decode_repeat.py`, committed results) can:
# a sign test of how many rounds each kernel won says which rows differ at all.

# %%
print(decode_results.repeat_summary())

# %% [markdown]
# With a GPU, time the same three on this machine:

# %%
if env.has_gpu:
    print(decode_results.time_live())
else:
    print("No CUDA GPU: no live timing; the table above is the H200's.")

# %% [markdown]
# ### Exercise 14: split-KV decoding in Triton
#
# In `exercises/ex14_split_kv_decode.py` write `decode_partial_kernel`, one program per
# (sequence, split) computing the split's normalised partial output and log-sum-exp, its wrapper
# `split_kv_partials(q, k, v, num_splits)`, and `combine_splits(o_part, lse_part)`, which merges
# the partial states in torch. Write the weights $e^{\mathrm{lse}_s - \mathrm{lse}}$ yourself: torch's
# softmax and flashlab's `combine_states` (the cells above use it) do that merge for you and get no
# credit there. Some splits may be empty.

# %%
from flashlab.grading import check

check("ex14_split_kv_decode")

# %% [markdown]
# ## The kernel on a decode shape
#
# `flashlab.flash_attention` accepts $N_q = 1$ and grouped-query shapes; check one decode step
# against the reference (in the interpreter on a CPU):

# %%
if env.triton_mode == "missing":
    print("triton is not installed (macOS has no wheels): skipping the kernel cells; see `flashlab doctor`")
else:
    import torch

    from flashlab.kernels import attention

    device = env.device
    dtype = env.pick(cpu=torch.float32, gpu=torch.float16)
    n_kv = env.pick(cpu=100, gpu=8192)
    q_t = torch.randn(2, 8, 1, 64, device=device, dtype=dtype)  # (B, H, 1, d): one new token
    k_t, v_t = (torch.randn(2, 2, n_kv, 64, device=device, dtype=dtype) for _ in range(2))  # (B, Hkv, N, d)
    o_t = flashlab.flash_attention(q_t, k_t, v_t)
    print(f"decode step, GQA 8 query heads on 2 kv heads, cache {n_kv}: "
          f"max error {attention.max_error(o_t, attention.attention_reference(q_t, k_t, v_t)):.1e}")

# %% [markdown]
# Careful with `causal=True` at decode: the course's causal convention is top-left aligned (query
# row $i$ sees keys $j \le i$), so a single query row would see only key 0. A decode query is the
# *last* position and must see the whole cache: call it with `causal=False`, as above.

# %% [markdown]
# `flash_attention(q, k, v, causal=True, causal_align="bottom_right")` aligns the last query with
# the last key instead (query $i$ sees keys $j \le N_k - N_q + i$), which a chunk of several new
# tokens needs; `flash_decode` always uses that alignment. `return_lse=True` also returns the
# log-sum-exp, the state that `combine_states` merges.
#
# ## Beyond causal: one rule decides which tiles run
#
# Causal attention is one rule for which keys a query sees. Models use others: a *sliding
# window* (query $i$ sees only the last $w$ keys up to itself; Mistral 7B, Jiang et al. 2023) or *packed
# documents* (several sequences share one row of the batch, and a token sees only the earlier
# tokens of its own document). In flashlab each is a field of one description of the problem,
# `flashlab.attnspec.AttnSpec` (`causal`, `causal_align`, `window`, or any
# `mask_mod(q_idx, kv_idx)` in the manner of PyTorch's FlexAttention), and one model,
# `flashlab.visibility`, turns it into the state of every tile: **full** (no mask needed),
# **masked** (some entries hidden: computed with the mask) or **skipped** (never loaded). The
# NumPy loops, the traffic and FLOP counts, the pictures and every Triton kernel read that same
# model, so a skipped tile is skipped everywhere. The rules side by side, with what each costs a
# FlashAttention-2 forward:

# %%
from flashlab import masks

print(masks.show_rules(n=512, d=64, block=64))

# %% [markdown]
# The bytes and FLOPs fall with the skipped tiles: a window of $w$ keys makes attention linear
# in $N$ (about $N w$ entries instead of $N^2/2$). The masked tiles on each rule's edges are
# computed in full and then masked, which is why the documents rule (many short edges) computes
# more than its visible entries. The NumPy forward under each rule against naive attention with
# the same rule, on fresh random inputs:

# %%
print(masks.check_rules(n=200, d=16, block=32))

# %% [markdown]
# The same options reach the kernels: `flash_attention(q, k, v, causal=True, window=256)`, or a
# `@triton.jit` `mask_mod` function (the kernels then walk each query block's list of masked and
# full tiles, so a skipped tile is never loaded), or `seqlens_q=`/`seqlens_k=` for a padded batch
# of sequences of different lengths.
#
# ## Misconception: "FlashAttention drops in everywhere with the same gain"
#
# At prefill, FlashAttention removes the $N^2$ traffic (notebook 04). Its measured speed-up over
# naive attention on the H200 spans a wide range of shapes (`benchmarks/results/bench_attention.json`,
# plotted in notebook 08):

# %%
bench = course.load_results("bench_attention.json").get("bench_attention")
if bench is None:
    print("no benchmarks/results/bench_attention.json yet (run `flashlab bench` on a GPU)")
else:
    from flashlab import perf

    print(perf.naive_forward_gain_range(bench))

# %% [markdown]
# The committed results hold prefill shapes only. With a GPU, measure both sides yourself: the
# time of naive attention (matmul, softmax, matmul in bf16) over `flash_attention`'s, for one
# prefill and one decode step of the same model (batch 1, 32 heads, d = 128):

# %%
if not env.has_gpu:
    print("No CUDA GPU: no live timing. On a CPU the answer is the traffic count above: at decode "
          "naive and flash move about the same bytes.")
else:
    print(decode_results.naive_vs_flash_live(shapes=(("prefill", 4096, 4096), ("decode", 1, 32768))))

# %% [markdown]
# At decode the traffic ratio computed above is about 1.0x: there is nothing to remove. What speeds
# decode up is reading fewer bytes (GQA/MQA, a quantised cache) and using more SMs (split-KV).
#
# ## The course card's claims, checked
#
# The card this course was written from makes six claims. Each verdict below is computed from a
# committed results file or a model (`flashlab.claims`), with its assumptions stated.
#
# **1. "At 8k, naive prefill attention takes 3-7x FlashAttention's time."** The committed H200
# run (`bench_attention.json`, N = 8192, B = 2, bf16 and fp16, d = 64 and 128):

# %%
from flashlab import claims

results = course.load_results()
if "bench_attention" in results:
    print(claims.slowdown_table(results["bench_attention"], n=8192))

# %% [markdown]
# Verdict: "3-7x" fits only some cells of this table: not causal, the forward against SDPA's FA2
# backend (3.8-6.8x) and forward + backward (2.5-4.5x against flashlab, 2.0-3.7x against FA2).
# Against the Hopper kernels (flashlab, cuDNN) the non-causal forward is 6.6-10.4x, and causal
# attention is far more (12-36x forward: naive attention computes the masked half, then masks it).
#
# **2. "An order of magnitude fewer HBM accesses, because d is 64-128."** The paper's model with
# M = 228 KiB (all of an H200 SM's shared memory) and M = 100 KiB (nearer what one program's
# tiles get), N = 8192, fp16; and the kernels' 128 x 128 tiles without any cache:

# %%
print(claims.hbm_table(n=8192, ncu=results.get("ncu_traffic")))

# %% [markdown]
# Verdict: the model's saving is about $M / 3 d^2$, so a *larger* d saves *less*: 4-9x at d = 64,
# 1-2.3x at d = 128, an order of magnitude only at small d with a large SRAM. The measured DRAM
# saving is about 94x (d = 64) because the L2 cache serves the K/V re-reads the model counts. The
# claim's number is roughly right for d = 64 on a GPU, for a different reason than the card gives.
#
# **3. "16k and beyond is infeasible with naive attention."** The anchors measured naive causal
# forward attention with 32 heads, d = 128, B = 1 (`benchmarks/anchors/h200_sdpa.txt`); the room
# left is out of the H200's 139.8 GiB (torch's total memory, `bench_memory.json`); a training
# step also keeps P ($B H N^2$ bf16 values) per layer for the backward:

# %%
anchor_path = course.repo_root() / "benchmarks" / "anchors" / "h200_sdpa.txt" if course.repo_root() else None
if anchor_path and anchor_path.exists():
    capacity = results.get("bench_memory", {}).get("environment", {}).get("memory_gib")
    print(claims.memory_table(anchor_path.read_text(), heads=32, layers=32, capacity_gib=capacity))

# %% [markdown]
# Verdict: not as stated. One naive forward at 16k fits an H200 with 106.9 GiB of its 139.8 GiB to
# spare; at 32k its 130.1 GiB peak leaves 9.7 GiB, so it fits, but a second such batch or a
# slightly longer sequence would not; at 64k it runs out of memory (the table above). Training is where 16k fails: a 32-layer model
# would keep 16 GiB of P per layer, 512 GiB in all, before any activation or weight.
#
# **4. "Exact, unlike linear or sparse approximations."** One random head (N = 512, d = 64,
# scores with standard deviation 2), relative error against float64 attention:

# %%
print(claims.approximation_table(n=512, d=64, score_std=2.0))

# %% [markdown]
# Verdict: true. The tiled algorithm's error is float32 rounding (below $10^{-6}$, printed); the
# approximations are off by tens of per cent of the output's norm or more on data like this (on
# random inputs attention is spread thinly, so a window or a few top scores miss much of its
# weight, and 256 random features estimate the exponential kernel with a large variance). On trained models, where
# attention is concentrated, sparse methods do better; they remain a different function.
#
# **5. "Decode is bound by reading the weights."** One decode step reads every weight once (shared
# by the batch) and every sequence's KV cache once. Assumptions: an 8B-parameter model with GQA
# (32 layers, 8 kv heads of d = 128, Llama-3-8B-like), bf16 weights and cache, the H200's measured
# copy bandwidth (`flashlab.hardware.H200_MEASURED`):

# %%
bandwidth = hardware.H200_MEASURED.hbm_bytes_per_s  # the measured copy bandwidth (read + written)
print(claims.decode_table(claims.DecodeModel(params=8.0e9, layers=32, kv_heads=8, head_dim=128), bandwidth))

# %% [markdown]
# Verdict: true at batch 1 and short context; false once the batch holds more than about 122k
# cached tokens in all (about 30 sequences of 4k), which is where serving runs. There the KV cache is
# most of the bytes, and attention's own reading of it (GQA, split-KV, a quantised cache) decides
# the step time.
#
# **6. "Serving engines use FlashAttention by default."** From the engines' documentation, read
# on the date printed:

# %%
print(claims.serving_table())

# %% [markdown]
# Verdict: true for vLLM and SGLang on Hopper (the H200's architecture), with versions and GPU
# generations as conditions: on Blackwell both pick other backends (FlashInfer, TensorRT-LLM's
# kernels), and FlashInfer, SGLang's default before Hopper, is a FlashAttention-style kernel
# library rather than flash-attn itself.
#
# ## Graded self-test
#
# `exercises/ex11_quiz.py` holds multiple-choice and numeric questions from the whole course
# (which resource FlashAttention saves and which it does not, why the online softmax is exact,
# why prefill gains more than decode).

# %%
from flashlab.grading import check

check("ex11_quiz")

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
# **09.1** In a decode step, what are Nq and Nk, and how large are S and P?
#
# - (a) Nq = 1, Nk = the cache length: S and P are 1 x Nk
# - (b) Nq = Nk = the cache length
# - (c) Nq = the cache length, Nk = 1
# - (d) Nq = Nk = 1

# %%
answer("09.1", None)  # your letter, e.g. "b"

# %% [markdown]
# **09.2** Arithmetic intensity (matmul FLOPs per HBM byte) of one decode step, Nk = 4096, d = 128,
# fp16?

# %%
answer("09.2", None)  # your number (FLOP/B)

# %% [markdown]
# **09.3** Grouped-query attention with 8 kv heads for 32 query heads: how does a decode step's time
# change?
#
# - (a) unchanged: the FLOPs are the same
# - (b) 4x slower
# - (c) up to about 4x faster: it reads 4x fewer K/V bytes
# - (d) 32x faster

# %%
answer("09.3", None)  # your letter, e.g. "b"

# %% [markdown]
# **09.4** Why does split-KV decoding help at batch 1?
#
# - (a) it reduces the FLOPs
# - (b) more programs fill the SMs; the combine merges (m, l, acc) states exactly
# - (c) it avoids reading V
# - (d) it approximates softmax

# %%
answer("09.4", None)  # your letter, e.g. "b"

# %% [markdown]
# **09.5** Why must a decode query not use the top-left causal mask?
#
# - (a) top-left is slower
# - (b) it doubles the traffic
# - (c) decode has no keys
# - (d) top-left would let the one query see only key 0; it is the last position and must see every
#   key

# %%
answer("09.5", None)  # your letter, e.g. "b"

# %% [markdown]
# ## Summary
#
# - Decode reads the whole KV cache for about 1 FLOP per byte: memory-bound, with no $N^2$
#   matrix for FlashAttention to avoid.
# - Faster decode comes from fewer cache bytes (GQA, MQA) and more parallelism (split-KV, whose
#   combine is the exact online-softmax combine of notebook 02).
# - The course in one line: FlashAttention is exact, does the same forward FLOPs (the backward
#   recomputes P, notebook 07), and wins by moving fewer bytes, which matters most where many query rows share each K/V tile.
