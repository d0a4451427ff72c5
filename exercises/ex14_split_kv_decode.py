"""Exercise 14: split-KV decoding (Flash-Decoding): partial states in Triton, then their combine.

Grade with ``check("ex14_split_kv_decode")`` (hints: ``hint=1``, ``2``, ``3``).
At decode time each sequence has one query row and a long cache of keys: one program per sequence
leaves most of a GPU idle. Cut the keys into num_splits slices, compute a partial softmax state
per (sequence, slice) in parallel, then merge the states (exercise 02's combine, in the lse form).

Split s covers keys [s * per, min((s + 1) * per, Nk)) with per = ceil(Nk / num_splits); the last
splits may be shorter, or empty when num_splits * per > Nk (e.g. Nk = 9, num_splits = 4).
For split s with scores x_j = scale q . k_j (j in the split):
    lse_s = log sum_j exp(x_j)            (-inf for an empty split)
    o_s   = sum_j exp(x_j - lse_s) v_j    (0 for an empty split)
and the whole row is  o = sum_s exp(lse_s - lse) o_s  with  lse = log sum_s exp(lse_s).
Within a split the kernel runs FlashAttention-2's Algorithm 1, lines 6-12, for one query row
(the online softmax over blocks of keys), and writes lse_s as in line 13. BLOCK_N is at most 128
(every tl.constexpr of your launches that is a power of two): splits of more keys are walked block by block.
After a check passes, the grader launches decode_partial_kernel once more itself, with your grid, tiles,
split bounds and scalars, on random Q, K, V of its own and its own qk_scale: keep the signature's
parameters (you may add more) and read K and V through K and V; the kernel alone computes each state.
"""
import torch
import triton
import triton.language as tl

BLOCK_N = 16  # keys per inner-loop step


@triton.jit
def decode_partial_kernel(Q, K, V, O_part, LSE_part,
                          stride_qz, stride_kz, stride_kn, stride_oz, stride_os, stride_lz,
                          N_K, keys_per_split, qk_scale,
                          BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    """(o_s, lse_s) of one (sequence z, split s): O_part[z, s, :] and LSE_part[z, s], float32.

    Q: (Z, HEAD_DIM) with strides (stride_qz, 1); K, V: (Z, N_K, HEAD_DIM) with strides
    (stride_kz, stride_kn, 1); O_part: (Z, S, HEAD_DIM) with strides (stride_oz, stride_os, 1);
    LSE_part: (Z, S) with strides (stride_lz, 1). A split may hold fewer than BLOCK_N keys, or none.
    """
    pass  # your code here


def split_kv_partials(q, k, v, num_splits, scale=None):
    """The partial states of every split, by decode_partial_kernel.

    q: (Z, d) one query row per sequence; k, v: (Z, Nk, d); float32 or float16; d a power of two
    >= 16; num_splits >= 1. scale defaults to 1 / sqrt(d).
    Returns (o_part, lse_part): (Z, num_splits, d) and (Z, num_splits), both float32.
    Graded: splits not a multiple of BLOCK_N, an empty split, float16 inputs, one split.
    """
    raise NotImplementedError("Exercise 14: partial states per split")


def combine_splits(o_part, lse_part):
    """Merge the partial states: o_part (Z, S, d), lse_part (Z, S) float32 tensors -> o (Z, d) float32.

    torch (or NumPy on .cpu() copies) is fine here, except torch's softmax functions and flashlab's
    combine_states: the weights exp(lse_s - lse) are this function's lesson, so write them. Empty splits (lse = -inf, o = 0) weigh nothing,
    and a row whose splits are all empty (no key) gives o = 0; no NaN may appear.
    Graded: random split sizes, an empty split, one split, lse near 1000, a row with no key.
    """
    raise NotImplementedError("Exercise 14: combine the splits")
