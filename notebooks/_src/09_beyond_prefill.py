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

import numpy as np

import flashlab
from flashlab import hardware
from flashlab import traffic as tr
from flashlab.flops import attention_flops
from flashlab.softmax import combine_states
from flashlab.viz.style import format_bytes

rng = np.random.default_rng(0)

# %% [markdown]
# ## Decode is memory-bound, whatever the algorithm
#
# One decode step reads the whole cache (K and V: $2 N d$ elements per head) and does
# $4 N d$ FLOPs: about 1 FLOP per byte in fp16, against the H200's ridge point of about 184
# (notebook 00). There is no $N \times N$ matrix: S and P are one row. So the naive algorithm
# moves almost exactly what FlashAttention moves:

# %%
d = 128
print(f"{'N (cache)':>10} {'naive bytes':>12} {'flash bytes':>12} {'naive/flash':>12} {'FLOP/byte':>10}")
for n in (1024, 8192, 65536):
    naive = tr.naive_traffic(1, n, d).total
    flash = tr.fa2_forward_traffic(1, n, d, block_q=128, block_k=128, stat_itemsize=4).total
    print(f"{n:>10} {format_bytes(naive):>12} {format_bytes(flash):>12} {naive / flash:>11.2f}x "
          f"{attention_flops(1, n, d) / flash:>10.2f}")

# %% [markdown]
# Compare prefill at the same N (notebook 04): there the naive/flash traffic ratio grows with N
# and the intensity is two orders of magnitude higher. A decode step's time is therefore about
# (bytes of the KV cache) / (HBM bandwidth). For a model with 32 query heads, d = 128, fp16, one
# layer, at the measured 4.3 TB/s:

# %%
heads, n_ctx, itemsize = 32, 32768, 2
for name, kv_heads in (("multi-head (MHA)", 32), ("grouped-query (GQA, 8 kv heads)", 8), ("multi-query (MQA)", 1)):
    cache = 2 * kv_heads * n_ctx * d * itemsize  # K and V
    us = cache / hardware.H200_MEASURED.hbm_bytes_per_s * 1e6
    print(f"{name:<33} KV cache {format_bytes(cache):>9} per layer and sequence -> >= {us:6.1f} us per decode step")

# %% [markdown]
# Grouped-query attention (Ainslie et al. 2023) shares each K/V head among several query heads:
# the cache, and so the decode time, shrink by H / H_kv. This is why the kernel of notebook 06
# reads kv head `h // GROUP`: one K/V tile loaded from HBM serves the whole group.
#
# ## Split-KV decoding
#
# With $N_q = 1$ the FA2 grid has one program per (batch, head): at batch 1 and 32 heads, 32
# programs for an H200's 132 SMs. Flash-Decoding (Dao et al. 2023, "Flash-Decoding for
# long-context inference") splits the cache into chunks processed by separate programs, each
# returning a partial output and its log-sum-exp; a final step combines them. The combine is
# notebook 02's `combine_states`: a normalised partial output $o_c$ with log-sum-exp
# $\mathrm{lse}_c$ is the state $(m, l, \mathrm{acc}) = (\mathrm{lse}_c, 1, o_c)$. Exact, measured:

# %%
n_cache, d_small = 1000, 64
q = rng.standard_normal((4, 1, d_small))  # (heads, 1, d): one new token
k, v = rng.standard_normal((4, n_cache, d_small)), rng.standard_normal((4, n_cache, d_small))  # (heads, N, d)

def split_kv_decode(q, k, v, splits):
    """Attention of one query row over `splits` chunks of the cache, combined exactly."""
    m, l, acc = None, None, None
    for chunk in np.array_split(np.arange(k.shape[-2]), splits):
        o_c, lse_c = flashlab.naive_attention(q, k[..., chunk, :], v[..., chunk, :], return_lse=True)
        state = (lse_c, np.ones_like(lse_c), o_c)  # (heads, 1), (heads, 1), (heads, 1, d)
        m, l, acc = state if m is None else combine_states(m, l, acc, *state)
    return acc / l[..., None]  # (heads, 1, d)

reference = flashlab.naive_attention(q, k, v)
for splits in (1, 4, 16, 64):
    err = np.abs(split_kv_decode(q, k, v, splits) - reference).max()
    print(f"{splits:>3} splits: max |split-KV - reference| = {err:.1e}")
batch, n_heads = 1, 32
print(f"programs at batch {batch}, {n_heads} heads: {batch * n_heads} without splitting, "
      f"{batch * n_heads * 16} with 16 splits ({hardware.H200.sms} SMs on an H200)")

# %% [markdown]
# ### Exercise 14: split-KV decoding in Triton
#
# In `exercises/ex14_split_kv_decode.py` write `decode_partial_kernel`, one program per
# (sequence, split) computing the split's normalised partial output and log-sum-exp, its wrapper
# `split_kv_partials(q, k, v, num_splits)`, and `combine_splits(o_part, lse_part)`, which merges
# the partial states (torch is fine there). Some splits may be empty.

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
    speedups = {}
    for r in bench["rows"]:
        t_naive = r["results"].get("naive", {}).get("fwd_ms")
        t_flash = r["results"].get("flashlab", {}).get("fwd_ms")
        if t_naive and t_flash:
            speedups[(r["dtype"], r["d"], r["n"], r["causal"])] = t_naive / t_flash
    lo, hi = min(speedups, key=speedups.get), max(speedups, key=speedups.get)
    print(f"prefill forward, naive time / flashlab time: from {speedups[lo]:.1f}x "
          f"(dtype, d, N, causal = {lo}) to {speedups[hi]:.1f}x ({hi})")

# %% [markdown]
# The committed results hold prefill shapes only. With a GPU, measure both sides yourself: the
# time of naive attention (matmul, softmax, matmul in bf16) over `flash_attention`'s, for one
# prefill and one decode step of the same model (batch 1, 32 heads, d = 128):

# %%
if not env.has_gpu:
    print("No CUDA GPU: no live timing. On a CPU the answer is the traffic count above: at decode "
          "naive and flash move about the same bytes.")
else:
    import triton.testing

    def naive_bf16(q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5, dim=-1) @ v  # (B, H, Nq, d)

    for name, nq, nk in (("prefill", 4096, 4096), ("decode", 1, 32768)):
        q = torch.randn(1, 32, nq, 128, device="cuda", dtype=torch.bfloat16)  # (B, H, Nq, d)
        k, v = (torch.randn(1, 32, nk, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))  # (B, H, Nk, d)
        ms_naive = triton.testing.do_bench(lambda: naive_bf16(q, k, v))
        ms_flash = triton.testing.do_bench(lambda: flashlab.flash_attention(q, k, v))
        print(f"{name:<8} Nq = {nq:>5}, Nk = {nk:>6}: naive {ms_naive:7.3f} ms, flash_attention {ms_flash:7.3f} ms, "
              f"naive / flash {ms_naive / ms_flash:5.2f}x")

# %% [markdown]
# At decode the traffic ratio computed above is about 1.0x: there is nothing to remove. What speeds
# decode up is reading fewer bytes (GQA/MQA, a quantised cache) and using more SMs (split-KV).
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
# 1. What are $N_q$ and $N_k$ in a decode step, and how large are S and P?
# 2. Estimate a decode step's arithmetic intensity in fp16. Memory- or compute-bound on an H200?
# 3. How does grouped-query attention with 8 kv heads for 32 query heads change the time of a
#    decode step, and why?
# 4. Why does split-KV decoding help at batch 1, and what does the final combine compute?
# 5. Why must a decode query not use the top-left causal mask?
#
# ## Summary
#
# - Decode reads the whole KV cache for about 1 FLOP per byte: memory-bound, with no $N^2$
#   matrix for FlashAttention to avoid.
# - Faster decode comes from fewer cache bytes (GQA, MQA) and more parallelism (split-KV, whose
#   combine is the exact online-softmax combine of notebook 02).
# - The course in one line: FlashAttention is exact, does the same FLOPs, and wins by moving fewer
#   bytes, which matters most where many query rows share each K/V tile.
