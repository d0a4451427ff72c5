# %% [markdown]
# # 02 Softmax decomposed: max, log-sum-exp, and the online softmax
#
# **Study time:** about 30 minutes. **Needs:** NumPy.
#
# Tiling attention means computing each row of $P = \mathrm{softmax}(S)$ while seeing the row a
# block of columns at a time. The softmax normalises over the *whole* row, so this looks
# impossible. It is not: a running maximum $m$ and a running sum $l$, rescaled whenever the
# maximum grows, give the exact result (Milakov and Gimelshein 2018, "Online normalizer
# calculation for softmax"; FlashAttention, Dao et al. 2022, Algorithm 1, lines 10 to 12: a
# tile's own row max and sum (line 10), merged into the running $m$ and $l$ (line 11), which
# rescale $O_i$ (line 12); line 9 before them computes the tile's scores $S_{ij} = Q_i K_j^T$).

# %%
import numpy as np

import flashlab
from flashlab import course
from flashlab.softmax import combine_states, online_update, softmax_state

env = course.setup()
rng = np.random.default_rng(0)

# %% [markdown]
# ## Why subtract the maximum
#
# $\mathrm{softmax}(x)_j = e^{x_j} / \sum_k e^{x_k}$. In float32, $e^{x}$ overflows to `inf` for
# $x > 88.7$ ($\ln$ of the largest float32, $3.4 \times 10^{38}$). Attention scores that large
# occur (large activations, no normalisation of Q and K). Since
# $e^{x_j - m} / \sum_k e^{x_k - m}$ is the same number for any $m$, taking $m = \max_k x_k$ keeps
# every exponent $\le 0$: that is the *safe* softmax.

# %%
x = np.array([10.0, 100.0, 90.0], dtype=np.float32)
with np.errstate(over="ignore", invalid="ignore"):
    plain = np.exp(x) / np.exp(x).sum()
print("exp then normalise:", plain)
print("safe softmax:      ", flashlab.safe_softmax(x))

# %% [markdown]
# The safe softmax of one row needs two numbers about the row: its maximum $m$ and
# $l = \sum_k e^{x_k - m}$. Together they give the row's log-sum-exp, which the kernels store
# per row as `lse` (natural log) for the backward pass:
#
# $$\mathrm{lse}(x) = \log \sum_k e^{x_k} = m + \log l, \qquad \mathrm{softmax}(x)_j = e^{x_j - \mathrm{lse}(x)}.$$

# %%
x = rng.standard_normal(1000) * 30  # (1000,) scores with a wide range
m, l = softmax_state(x)
lse = flashlab.logsumexp(x)
print(f"m = {m:.3f}, l = {l:.3f}, m + log l = {m + np.log(l):.6f}, logsumexp = {lse:.6f}")
print("max |exp(x - lse) - safe_softmax(x)| =", np.abs(np.exp(x - lse) - flashlab.safe_softmax(x)).max())

# %% [markdown]
# ## Two partial states combine exactly
#
# Split a row into two parts $A$ and $B$ with states $(m_A, l_A)$ and $(m_B, l_B)$. With
# $m = \max(m_A, m_B)$:
#
# $$l = e^{m_A - m}\, l_A + e^{m_B - m}\, l_B,$$
#
# because $e^{x - m} = e^{x - m_A} \cdot e^{m_A - m}$ term by term: no approximation, only a
# rescaling of sums already computed. The same holds for the *unnormalised* output
# $\mathrm{acc} = \sum_k e^{x_k - m} v_k$, a weighted sum of value rows; the normalised
# attention output is $\mathrm{acc} / l$. `combine_states` implements this once for the whole
# library. Check it on random splits of random rows:

# %%
worst = 0.0
for trial in range(200):
    n = int(rng.integers(2, 300))
    x = rng.standard_normal(n) * rng.uniform(1, 50)  # (n,) one row of scores
    vals = rng.standard_normal((n, 8))  # (n, dv) value rows
    cut = int(rng.integers(1, n))
    (m_a, l_a), (m_b, l_b) = softmax_state(x[:cut]), softmax_state(x[cut:])
    acc_a = np.exp(x[:cut] - m_a) @ vals[:cut]  # (dv,)
    acc_b = np.exp(x[cut:] - m_b) @ vals[cut:]  # (dv,)
    m, l, acc = combine_states(m_a, l_a, acc_a, m_b, l_b, acc_b)
    exact = flashlab.safe_softmax(x) @ vals  # (dv,)
    worst = max(worst, np.abs(acc / l - exact).max())
print(f"200 random rows and split points: max |combined - direct| = {worst:.1e} (float64)")

# %% [markdown]
# ## The online softmax
#
# Folding chunks in one at a time is the online softmax. The kernels do it in the order of
# `online_update` (FlashAttention-2, Algorithm 1, lines 9 and 10; line 8 computes the scores): for a
# new tile of scores $s$,
#
# ```
# m_new = max(m_i, rowmax(s))
# alpha = exp(m_i - m_new)            # rescales everything accumulated so far
# p     = exp(s - m_new)
# l_i   = alpha * l_i + rowsum(p)
# acc   = alpha * acc + p @ v_tile
# ```
#
# and divides `acc` by `l_i` once at the end. Change `chunk` and watch the maximum move:

# %%
x = rng.standard_normal(24) * 5  # (24,) one row
vals = rng.standard_normal((24, 4))  # (24, dv)
chunk = 6
m_i, l_i, acc = np.float64(-np.inf), np.float64(0.0), np.zeros(4)
for start in range(0, len(x), chunk):
    m_i, l_i, acc = online_update(m_i, l_i, acc, x[start:start + chunk], vals[start:start + chunk])
    print(f"after columns [{start:>2}, {start + chunk:>2}): m_i = {m_i:6.3f}, l_i = {l_i:8.3f}")
print("max |acc / l_i - softmax(x) @ v| =", np.abs(acc / l_i - flashlab.safe_softmax(x) @ vals).max())

# %% [markdown]
# ## Misconception: "the online softmax is an approximation"
#
# Measure it. Compute the softmax of random rows two ways (the safe softmax over the whole row,
# and the online softmax in chunks of 7) in float32 and in float64, and compare each with a
# float64 reference. An approximation has an error floor that does not move with precision;
# rounding error shrinks with the machine epsilon, by a factor of about $5 \times 10^8$ from
# float32 to float64 (both epsilons are printed).

# %%
rows = (rng.standard_normal((256, 2048)) * 10).astype(np.float32)  # (256, 2048)
truth = flashlab.safe_softmax(rows.astype(np.float64))  # (256, 2048)
err_safe = np.abs(flashlab.safe_softmax(rows) - truth).max()
err_online = np.abs(flashlab.online_softmax(rows, chunk=7) - truth).max()
err_online64 = np.abs(flashlab.online_softmax(rows.astype(np.float64), chunk=7) - truth).max()
print(f"float32 safe softmax   max error: {err_safe:.1e}   (float32 epsilon {np.finfo(np.float32).eps:.1e})")
print(f"float32 online softmax max error: {err_online:.1e}")
print(f"float64 online softmax max error: {err_online64:.1e}   (float64 epsilon {np.finfo(np.float64).eps:.1e})")
print(f"in epsilons: float32 online {err_online / np.finfo(np.float32).eps:.1f}, "
      f"float64 online {err_online64 / np.finfo(np.float64).eps:.1f}")

# %% [markdown]
# In float32 both errors are a few to ten rounding steps (the online version sums in more pieces
# and rescales them, so a little more rounding). In float64 the online softmax's error is of
# order $10^{-15}$ (printed above), again about ten rounding steps of float64's epsilon,
# $2.2 \times 10^{-16}$: the error fell with the epsilon, by about the same factor. An
# approximation's error would not have moved. The algorithm is exact; only rounding differs.
#
# ### Exercise: safe softmax, online softmax, combine
#
# Complete `exercises/ex02_softmax.py`: `safe_softmax(x)`, `online_softmax(x, chunk)` and
# `combine_states(m_a, l_a, acc_a, m_b, l_b, acc_b)`. The hidden checks include scores around
# $10^3$ (a softmax without the max subtraction overflows) and rows split at random points.

# %%
from flashlab.grading import check

check("ex02_softmax")

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
# **02.1** Above which score x does np.exp(x) overflow to inf in float32?

# %%
answer("02.1", None)  # your number

# %% [markdown]
# **02.2** A state has m = 3, l = 2; a new chunk has m = 5, l = 1. What is the combined l?

# %%
answer("02.2", None)  # your number

# %% [markdown]
# **02.3** Why may the kernel divide by l only once, at the end, instead of after every tile?
#
# - (a) division is not available inside a Triton kernel
# - (b) l does not change after the first tile
# - (c) dividing after every tile would overflow float16
# - (d) acc and l are rescaled by the same factor each step, so acc / l comes out the same

# %%
answer("02.3", None)  # your letter, e.g. "b"

# %% [markdown]
# **02.4** What does the state of a row whose scores are all masked (-inf) look like?
#
# - (a) m = 0, l = 0
# - (b) m = -inf, l = 0: combining with it changes nothing
# - (c) m = +inf, l = 1
# - (d) m = NaN, l = NaN

# %%
answer("02.4", None)  # your letter, e.g. "b"

# %% [markdown]
# **02.5** Is the online softmax exact?
#
# - (a) yes: it equals safe softmax up to floating-point rounding
# - (b) no: it is an approximation with a small bias
# - (c) only when the chunk size divides N
# - (d) only in float64

# %%
answer("02.5", None)  # your letter, e.g. "b"

# %% [markdown]
# ## Summary
#
# - Safe softmax subtracts the row maximum; the pair $(m, l)$ summarises a row, and
#   $\mathrm{lse} = m + \log l$.
# - Partial states combine exactly by rescaling with $e^{m_\text{old} - m_\text{new}}$; the
#   online softmax folds chunks in one at a time and normalises once.
# - Measured: the online softmax's error is rounding only (of order $10^{-15}$ in float64, about
#   ten epsilons, printed above).
# - Next: notebook 03 applies this to tiles of $S = QK^\top$.
