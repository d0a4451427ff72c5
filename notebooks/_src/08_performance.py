# %% [markdown]
# # 08 Performance on an H200
#
# **Study time:** about 35 minutes. **Needs:** matplotlib; a CUDA GPU for live timings.
#
# Without a GPU this notebook plots the results committed in `benchmarks/results/`, measured on
# one NVIDIA H200 by `benchmarks/bench_attention.py`, `bench_memory.py` and `ncu_traffic.py`
# (each file records its environment: torch, triton, cuDNN, date). With a GPU it first re-runs a
# reduced version of the same benchmarks on yours and draws the same plots from those timings.
# The protocol is the FlashAttention-2 paper's (Section 4.1): B x N = 16384 tokens, H x d = 2048,
# d in {64, 128}; forward FLOPs $4 B H N^2 d$ (halved when causal), forward + backward 3.5x that
# (notebook 07); time is the median of `triton.testing.do_bench`. Every number printed below is
# computed from a results file; the prose only describes them.

# %%
from flashlab import course

env = course.setup()

import matplotlib.pyplot as plt

from flashlab.viz.style import format_bytes

results = course.load_results()
if not results:
    print(f"No results file yet in {course.results_dir()}: run `flashlab bench` on a GPU to create "
          "them. The plots below are skipped.")
for name in ("bench_attention", "bench_attention_host_overhead", "bench_memory", "ncu_traffic"):
    e = results.get(name, {}).get("environment")
    if e:
        print(f"{name}.json: {e['device']}, torch {e['torch']}, triton {e['triton']}, "
              f"cuDNN {e['cudnn']}, {e['date_utc']}")
bench = results.get("bench_attention")
memory = results.get("bench_memory")
ncu = results.get("ncu_traffic")
where = "H200, benchmarks/results/"

# %% [markdown]
# ## Live timings (GPU only)
#
# On a GPU, this cell times every variant below on your GPU (bf16, the N you list) and the memory
# benchmark, writing to `artifacts/` (the committed files are left alone); every plot after it
# then shows your GPU. The committed H200 run of the full protocol took the time printed here.
# On a CPU it does nothing: interpreter time measures NumPy, not a GPU.

# %%
LIVE_SEQ_LENS = (1024, 8192)  # N values to time live; more values, more minutes
LIVE_MEMORY_SEQ_LENS = (1024, 4096, 16384, 65536, 262144)

if bench:
    print(f"the committed run: {len(bench['rows'])} rows in {bench['elapsed_s']:.0f} s on the H200")
if not env.has_gpu:
    print("No CUDA GPU: plotting the committed H200 results (interpreter time says nothing about GPU speed).")
else:
    bench = course.run_benchmark("attention", ["--dtypes", "bfloat16", "--seq-lens", *LIVE_SEQ_LENS],
                                 "bench_attention_live")
    memory = course.run_benchmark("memory", ["--seq-lens", *LIVE_MEMORY_SEQ_LENS], "bench_memory_live")
    where = f"{env.gpu_name}, live (artifacts/)"

# %% [markdown]
# ## Throughput against N, beside PyTorch's backends
#
# Forward TFLOP/s in bf16 for flashlab's kernel, the three SDPA backends (FLASH_ATTENTION is
# FlashAttention-2, CUDNN_ATTENTION is SDPA's default on Hopper, EFFICIENT_ATTENTION is
# memory-efficient attention) and naive PyTorch attention (matmul, softmax, matmul).

# %%
IMPLS = {"flashlab": "flashlab", "sdpa_flash": "SDPA FLASH (FA2)", "sdpa_cudnn": "SDPA cuDNN",
         "sdpa_efficient": "SDPA EFFICIENT", "naive": "naive PyTorch"}

def series(rows, impl, key):
    """(N, value) pairs of one implementation over rows, skipping failed or missing entries."""
    pts = [(r["n"], r["results"].get(impl, {}).get(key)) for r in rows]
    return [p for p in pts if p[1] is not None]

def bf16_rows(d, causal):
    """The bf16 rows of one (d, causal) panel, by increasing N."""
    return sorted((r for r in bench["rows"] if r["dtype"] == "bfloat16" and r["d"] == d
                   and r["causal"] == causal), key=lambda r: r["n"])

def throughput_figure(mode):
    fig, axes = plt.subplots(1, 4, figsize=(16, 3.8), sharey=True, layout="constrained")
    for ax, (d, causal) in zip(axes, [(64, False), (64, True), (128, False), (128, True)]):
        for impl, label in IMPLS.items():
            pts = series(bf16_rows(d, causal), impl, f"{mode}_tflops")
            if pts:
                ax.plot(*zip(*pts), marker="o", label=label)
        ax.set_xscale("log", base=2)
        ax.set_title(f"d={d}, {'causal' if causal else 'not causal'}")
        ax.set_xlabel("sequence length N (B x N = 16384)")
    axes[0].set_ylabel(f"{mode} TFLOP/s (bf16)")
    axes[-1].legend(fontsize=8)
    fig.suptitle(f"{mode}: {where}")
    return fig

if bench:
    course.show(throughput_figure("fwd"))

# %% [markdown]
# Forward + backward (3.5x the forward FLOPs):

# %%
if bench:
    course.show(throughput_figure("fwdbwd"))

# %% [markdown]
# ## How close to the references: the ratios
#
# The targets set for flashlab's kernel: forward and forward + backward at least 1.0x SDPA's
# FLASH backend (FlashAttention-2) for N >= 1024, and forward at least 0.85x cuDNN at d = 128,
# N >= 4096. A ratio is the reference's time over flashlab's (`course.speedup`); above 1 is
# faster. Every row, then the count of rows that meet each target:

# %%
if bench:
    print(f"{'dtype':<9}{'d':>4}{'N':>7}{'causal':>7}  {'fwd/FA2':>8}{'fwdbwd/FA2':>11}{'fwd/cuDNN':>10}")
    for r in bench["rows"]:
        cells = [course.speedup(r, "flashlab", ref, mode) for ref, mode in
                 (("sdpa_flash", "fwd"), ("sdpa_flash", "fwdbwd"), ("sdpa_cudnn", "fwd"))]
        cells = [f"{c:.2f}" if c else "n/a" for c in cells]
        print(f"{r['dtype']:<9}{r['d']:>4}{r['n']:>7}{int(r['causal']):>7}  {cells[0]:>8}{cells[1]:>11}{cells[2]:>10}")
    targets = [("fwd >= 1.0x FA2, N >= 1024", "sdpa_flash", "fwd", 1.0, lambda r: r["n"] >= 1024),
               ("fwd+bwd >= 1.0x FA2, N >= 1024", "sdpa_flash", "fwdbwd", 1.0, lambda r: r["n"] >= 1024),
               ("fwd >= 0.85x cuDNN, d = 128, N >= 4096", "sdpa_cudnn", "fwd", 0.85,
                lambda r: r["d"] == 128 and r["n"] >= 4096)]
    print()
    for label, ref, mode, goal, applies in targets:
        ratios = {(r["dtype"], r["d"], r["n"], r["causal"]): course.speedup(r, "flashlab", ref, mode)
                  for r in bench["rows"] if applies(r)}
        short = {key: x for key, x in ratios.items() if x is None or x < goal}
        print(f"{label:<40} met on {len(ratios) - len(short)} of {len(ratios)} rows; short: "
              + (", ".join(f"{k} {x:.4f}" if x else f"{k} not timed" for k, x in short.items()) or "none"))
    worst = min((r for r in bench["rows"] if course.speedup(r, "flashlab", "sdpa_flash")),
                key=lambda r: course.speedup(r, "flashlab", "sdpa_flash"))
    print(f"lowest fwd/FA2 of any row: {course.speedup(worst, 'flashlab', 'sdpa_flash'):.2f} at N = {worst['n']}, "
          f"d = {worst['d']}, {worst['dtype']}, causal = {worst['causal']}: flashlab's forward took "
          f"{worst['results']['flashlab']['fwd_ms']:.3f} ms")

# %% [markdown]
# A row short by a few per cent at N = 1024 is not necessarily the kernel. One forward there is
# tens of GFLOP, a fraction of a millisecond on the GPU, and `do_bench` starts its clock before
# the Python wrapper runs, so host overhead counts; at N = 512 (outside the targets), with even
# shorter calls, some rows fall much lower (the lowest is printed above; its cause was not
# investigated). An earlier run of the protocol (`benchmarks/results/bench_attention_call4.json`)
# had such rows at N = 1024; after it, `flash_attention` stopped validating its inputs three times
# per call, and the rows at N <= 2048, d = 128 were re-measured
# (`benchmarks/results/bench_attention_host_overhead.json`, `benchmarks/NOTES.md`, call 5). The run
# plotted above came later still, with the fix. Before and after:

# %%
overhead = results.get("bench_attention_host_overhead")
committed = results.get("bench_attention_call4")  # the run before the fix
if overhead and committed:
    before = {(r["dtype"], r["d"], r["n"], r["causal"]): r for r in committed["rows"]}
    print(f"{'dtype':<9}{'d':>4}{'N':>6}{'causal':>7}   fwd/FA2 before -> after   fwd+bwd/FA2 before -> after")
    for r in overhead["rows"]:
        old = before.get((r["dtype"], r["d"], r["n"], r["causal"]))
        pairs = [(course.speedup(old, "flashlab", "sdpa_flash", m) if old else None,
                  course.speedup(r, "flashlab", "sdpa_flash", m)) for m in ("fwd", "fwdbwd")]
        text = ["{} -> {:.2f}".format(f"{a:.2f}" if a else "n/a", b) for a, b in pairs]
        print(f"{r['dtype']:<9}{r['d']:>4}{r['n']:>6}{int(r['causal']):>7}   {text[0]:>23}   {text[1]:>27}")

# %% [markdown]
# Timings also spread from run to run. Each bf16 row of the run timed the same forward kernels
# twice: the Hopper rung as `hopper` and `rung:v4_hopper`, the Gluon rung as `gluon` and
# `rung:v5_gluon_ws`; how far apart were the two timings of one kernel?

# %%
if bench:
    spread = {}
    for r in bench["rows"]:
        for pair in (("hopper", "rung:v4_hopper"), ("gluon", "rung:v5_gluon_ws")):
            times = [r["results"].get(name, {}).get("fwd_ms") for name in pair]
            if all(times) and r["n"] >= 4096:  # at N >= 4096 the host's overhead is negligible
                spread[(pair[0], r["dtype"], r["d"], r["n"], r["causal"])] = max(times) / min(times) - 1
    if spread:
        worst = max(spread, key=spread.get)
        typical = sorted(spread.values())[len(spread) // 2]
        print(f"same kernel, N >= 4096: median spread {typical:.1%}, largest {spread[worst]:.1%} at {worst}")

# %% [markdown]
# A ratio within that spread of its target is a tie, not a verdict.
#
# ## The optimisation ladder
#
# Each rung of notebook 06, timed in the same run. `v0_grid_bh` launches one program per
# (batch, head), FA1's parallelism; `v1_minimal` adds FA2's grid over query blocks. Under the
# protocol, long N means small batch: at N = 16384, B = 1, so `v0` has only H programs for the
# GPU's SMs, while `v1` has H x N / `BLOCK_M`.

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
    rungs = sorted({k for r in bench["rows"] for k in r["results"] if k.startswith("rung:")})
    fig, axes = plt.subplots(1, 2, figsize=(12, 4), sharey=True, layout="constrained")
    for ax, causal in zip(axes, (False, True)):
        for rung in rungs:
            pts = series(bf16_rows(128, causal), rung, "fwd_tflops")
            if pts:
                ax.plot(*zip(*pts), marker="o", label=rung.removeprefix("rung:"))
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length N (B x N = 16384)")
        ax.set_title(f"forward, bf16, d=128, {'causal' if causal else 'not causal'}: {where}")
    axes[0].set_ylabel("TFLOP/s")
    axes[1].legend(fontsize=8)
    course.show(fig)
    sms = bench["environment"]["sm_count"]
    print(f"grid over (batch, head) against grid over query blocks, bf16, d = 128, not causal ({sms} SMs):")
    for r in bf16_rows(128, False):
        gain = course.speedup(r, "rung:v1_minimal", "rung:v0_grid_bh")
        if gain:
            print(f"N = {r['n']:>5}: B x H = {r['batch'] * r['heads']:>4} programs for v0;  v1 / v0 speed {gain:4.1f}x")

# %% [markdown]
# While B x H is about the SM count or more (short N, large batch), the two grids run at the same
# speed; once it falls below, v0 leaves SMs idle and v1 pulls ahead, by about the factor B x H
# falls short of the SM count (132 / 16 = 8.25 at N = 16384). The rungs after v1 (exp2 and the causal
# two-stage loop, autotuning, the Hopper rung, the Gluon rung) add the rest, as the plot shows.
#
# The last step is the only one that leaves `tl.dot`: `v5_gluon_ws` is written in Gluon, where
# the kernel itself splits its warps into a producer that copies K and V tiles and two consumers
# that each overlap a block's softmax with the tensor-core products (`kernels/flash_fwd_gluon.py`).
# What that buys over the Hopper rung, row by row, and where `flash_attention` uses it (on an
# sm90 GPU, for fp16/bf16 with as many kv heads as query heads, `flash_fwd_gluon.prefers_shape`):

# %%
from flashlab.kernels import flash_fwd_gluon

if bench:
    for r in bf16_rows(128, False) + bf16_rows(128, True):
        gain = course.speedup(r, "rung:v5_gluon_ws", "rung:v4_hopper")
        uses = flash_fwd_gluon.prefers_shape(r["d"], r["n"], r["n"], r["causal"])
        if gain:
            print(f"bf16 d = 128 N = {r['n']:>5} causal = {int(r['causal'])}: v5 / v4 speed {gain:4.2f}x; "
                  f"flash_attention uses {'v5_gluon_ws' if uses else 'v4_hopper'}")
#
# ## Memory against N
#
# Peak extra memory of one forward pass (one head, d = 128, bf16), measured with PyTorch's
# allocator (`bench_memory.json`). Naive attention allocates S and P; the flash kernel allocates
# only O and lse. A dotted line marks an out-of-memory failure.

# %%
if memory:
    fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
    rows = sorted((r for r in memory["rows"] if not r["causal"]), key=lambda r: r["n"])
    for impl, label in (("naive", "naive PyTorch"), ("flashlab", "flashlab"), ("sdpa_flash", "SDPA FLASH")):
        pts = [(r["n"], r["results"].get(impl, {}).get("peak_extra_bytes")) for r in rows]
        pts = [p for p in pts if p[1]]
        if pts:
            ax.loglog(*zip(*pts), marker="o", label=label, base=2)
    for r in rows:
        if r["results"].get("naive", {}).get("status") == "oom":
            ax.axvline(r["n"], color="grey", linestyle=":")
            ax.text(r["n"], ax.get_ylim()[1], " naive: out of memory", rotation=90, va="top", fontsize=8)
    ax.set_xlabel("sequence length N (one head, d = 128)")
    ax.set_ylabel("peak extra memory (bytes)")
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda y, _: format_bytes(y)))
    ax.set_title(where)
    ax.legend()
    course.show(fig)
    both = [r for r in rows if r["results"].get("naive", {}).get("peak_extra_bytes")
            and r["results"].get("flashlab", {}).get("peak_extra_bytes")]
    if both:
        last = both[-1]
        print(f"largest N both ran: {last['n']}: naive {format_bytes(last['results']['naive']['peak_extra_bytes'])}, "
              f"flashlab {format_bytes(last['results']['flashlab']['peak_extra_bytes'])}")

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
# Nsight Compute's `dram__bytes_read.sum` and `dram__bytes_write.sum` over every kernel of one
# call (fp16, B = 1, H = 16, d = 64, forward, committed H200 run), beside `flashlab.traffic`'s
# model. The last columns give the size of one S matrix for all heads, against the 60 MiB L2
# cache (`flashlab.hardware.H200_L2_BYTES`).

# %% [markdown]
# **Predict, then check.** Before the table below: how many GiB did Nsight Compute measure through
# DRAM for one naive forward at N = 4096, B = 1, H = 16, d = 64, fp16 (its S and P are 16 x 4096 x
# 4096 each)? Write your number in place of `None` and run the cell: `predict` shows your number, the
# course's value and the relative error, and records them. Within 25% counts: a measured number.

# %%
from flashlab.selftest import predict

predict("ncu_naive_dram_gib", None)  # your number

# %%
from flashlab import hardware

if ncu:
    heads = ncu["protocol"]["heads"]
    print(f"{'variant':<11}{'N':>6}{'DRAM read':>11}{'DRAM write':>11}{'model read':>11}{'model write':>12}"
          f"{'measured/model':>15}{'GPU time':>10}{'S, all heads':>14}")
    for r in ncu["rows"]:
        model = r["model"]["naive" if r["variant"] == "naive" else next(k for k in r["model"] if k.startswith("flash"))]
        measured, modelled = r["dram_read_bytes"] + r["dram_write_bytes"], model["read"] + model["write"]
        s_bytes = heads * r["n"] ** 2 * 2
        print(f"{r['variant']:<11}{r['n']:>6}{format_bytes(r['dram_read_bytes']):>11}"
              f"{format_bytes(r['dram_write_bytes']):>11}{format_bytes(model['read']):>11}"
              f"{format_bytes(model['write']):>12}{measured / modelled:>15.2f}{r['gpu_time_ns'] / 1e3:>8.0f} us"
              f"{format_bytes(s_bytes):>14}{' < L2' if s_bytes < hardware.H200_L2_BYTES else ''}")

# %% [markdown]
# Where S for all heads is larger than the L2 cache, the naive rows measure more than the model:
# S and P really go through DRAM, and PyTorch's naive attention runs four kernels (the extra
# scaling pass reads and writes S once more). Where S fits in L2 (N = 1024), part of it is read
# back from L2 before it ever reaches DRAM, and the naive row measures less than the model.
# The flash rows read far less than the model's K/V re-reads predict (about Q + K + V once):
# programs working on neighbouring query blocks share K and V through L2, and the model counts
# loads from global memory, not DRAM traffic. ncu also under-counts writes still in L2 when a
# kernel ends (`benchmarks/anchors/README.md`).
#
# ## Misconception: "it drops in everywhere with the same gain"
#
# The speed-up of flash over naive attention depends on the shape. From the same results, the time
# ratio naive / flashlab (bf16):

# %%
if bench:
    columns = [(False, "fwd"), (True, "fwd"), (False, "fwdbwd"), (True, "fwdbwd")]
    print(f"{'d':>4}{'N':>7}  {'not causal fwd':>15}{'causal fwd':>12}{'not causal fwd+bwd':>20}{'causal fwd+bwd':>16}")
    gains = {}
    for d in (64, 128):
        by_causal = {c: {r["n"]: r for r in bf16_rows(d, c)} for c in (False, True)}
        for n in sorted(by_causal[False]):
            cells = []
            for causal, mode in columns:
                row = by_causal[causal].get(n)
                g = course.speedup(row, "flashlab", "naive", mode) if row else None
                if g:
                    gains[(d, n, causal, mode)] = g
                cells.append(f"{g:.1f}x" if g else "n/a")
            print(f"{d:>4}{n:>7}  {cells[0]:>15}{cells[1]:>12}{cells[2]:>20}{cells[3]:>16}")
    lo, hi = min(gains, key=gains.get), max(gains, key=gains.get)
    print(f"\nfrom {gains[lo]:.1f}x (d, N, causal, pass = {lo}) to {gains[hi]:.1f}x ({hi})")
    for d in (64, 128):
        best_n = max((k for k in gains if k[0] == d and k[2:] == (False, "fwd")), key=gains.get)[1]
        print(f"d = {d}: the non-causal forward gain is largest at N = {best_n}")

# %% [markdown]
# The gain ranges over an order of magnitude. It is larger when causal (naive attention computes
# the masked half and then masks it; flash skips those tiles), larger at d = 64 than at d = 128
# (the protocol fixes H x d, so d = 64 has twice the heads, and so twice the N x N matrices for
# naive attention to move, for the same FLOPs), smaller for forward + backward, and it grows with
# N up to the N printed above. For decode (one query row), notebook 09
# shows it almost vanishes.

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
# computes. Each question is worth a quarter point: the answers ship with the course, hashed but not
# secret, so the points only tell you where you stand.

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
#   memory-efficient backends; the ratio table and the target counts state where it stands on
#   every row, computed from the results file.
# - FA2's grid over query blocks is what keeps the GPU busy at small batch; the later rungs (exp2,
#   causal two-stage loop, autotuning, tensor-descriptor loads on Hopper, a warp-specialised
#   Gluon kernel) add the rest.
# - Naive attention's memory grows as $N^2$ and runs out; the flash kernel's grows as $N$.
# - Next: notebook 09 looks at decoding, where the picture changes.
