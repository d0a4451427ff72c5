"""The self-test questions of notebooks 01-10 and the "predict, then check" numbers.

Each :class:`Question` has an id ``"NN.k"`` (notebook NN, question k), a prompt, and either
choices (answered with one letter; the right letter is stored as :func:`answer_hash`) or a
numeric answer that a flashlab function computes when asked (never a number typed in here).
Each :class:`Prediction` names a number the course computes later in a notebook, from the
library or from a committed results file in ``benchmarks/results/``.

Stored answers are hashed, not secret: anyone can hash the four letters and compare. They keep
answers from being read at a glance, nothing more; that is why a question is worth one point.
:mod:`flashlab.selftest` grades and records answers; this module is data.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

NUMBER_TOLERANCE = 0.01  # numeric self-test answers: within 1% (the grader's "number" parts)


@dataclass(frozen=True)
class Question:
    """One self-test question: multiple choice (``choices``, ``stored``) or numeric (``compute``)."""

    qid: str  # "03.2": notebook 03, question 2
    prompt: str
    explanation: str  # shown after an attempt, right or wrong
    choices: tuple[str, ...] = ()
    stored: str = ""  # answer_hash(self.function, letter) of the right letter
    compute: Callable[[], float] | None = None  # the numeric answer, computed by flashlab
    unit: str = ""  # of a numeric answer, e.g. "MiB"
    source: str = ""  # which function computes the numeric answer
    detail: Callable[[], str] | None = None  # the numbers behind the explanation, computed when shown

    def why(self) -> str:
        """The explanation, followed by the numbers behind it (``detail``) where it has them."""
        return self.explanation if self.detail is None else f"{self.explanation} {self.detail()}"

    @property
    def notebook(self) -> str:
        return self.qid.split(".")[0]

    @property
    def function(self) -> str:
        """The part's name in the grader's registry and in exercises/selftest.py: q03_2."""
        return "q" + self.qid.replace(".", "_")

    @property
    def kind(self) -> str:
        return "choice" if self.choices else "number"

    @property
    def letters(self) -> str:
        return "abcdefgh"[: len(self.choices)]


@dataclass(frozen=True)
class Prediction:
    """A number the learner guesses before the course computes it."""

    key: str
    notebook: str
    prompt: str
    actual: Callable[[], float]  # computed by flashlab or read from a committed results file
    source: str
    tolerance: float  # relative: a prediction within this fraction of the actual value counts
    unit: str = ""


# ----------------------------------------------------------------------------- computed answers
def _traffic():
    from flashlab import traffic

    return traffic


def _s_and_p_mib(n: int) -> float:
    by = _traffic().naive_traffic(n, n, 64, itemsize=2).by_tensor
    return sum(b for (tensor, _), b in by.items() if tensor in ("S", "P")) / 2**20


def _combined_l() -> float:
    import numpy as np

    from flashlab.softmax import combine_states

    _, l, _ = combine_states(np.array([3.0]), np.array([2.0]), None, np.array([5.0]), np.array([1.0]), None)
    return float(l[0])


def _exp_overflow_float32() -> float:
    import math

    import numpy as np

    return math.log(float(np.finfo(np.float32).max))  # in float64: the threshold itself, not its float32 log


def _ragged_rows(n: int, block: int) -> int:
    from flashlab.tiled import num_blocks

    return n - (num_blocks(n, block) - 1) * block


def _causal_tiles(n: int, block: int) -> int:
    from flashlab.tiled import kv_blocks_visited, num_blocks

    return sum(kv_blocks_visited(i, n, n, block, block, True) for i in range(num_blocks(n, block)))


def _standard_over_flash(n: int, d: int, m: int) -> float:
    t = _traffic()
    return t.standard_hbm_accesses(n, d) / t.flash_hbm_accesses(n, d, m)


def _standard_and_flash_counts(n: int, d: int, m: int) -> str:
    """Both counts of 04.1, in elements and in fp16 bytes, with the block sizes behind the flash one."""
    t = _traffic()
    standard, flash = t.standard_hbm_accesses(n, d), t.flash_hbm_accesses(n, d, m)
    block_r, block_c = t.paper_block_sizes(m, d)
    return (f"Counted: standard attention makes {standard:,} accesses (elements read + written; "
            f"{standard * 2 / 2**30:.2f} GiB in fp16) and FlashAttention {flash:,} (Br = {block_r}, Bc = {block_c}: "
            f"{-(-n // block_c)} passes over Q, O, l, m; {flash * 2 / 2**30:.2f} GiB in fp16): "
            f"{standard / flash:.2f}x fewer.")


def _lse_kib(n: int) -> float:
    return _traffic().fa2_forward_traffic(n, n, 64, stat_itemsize=4).by_tensor[("lse", "write")] / 1024


def _backward_matmuls() -> float:
    from flashlab.flops import attention_flops

    n, d = 1024, 64
    return attention_flops(n, n, d, pass_="backward", block_q=64, block_k=64) / (2 * n * n * d)


def _fwd_bwd_over_fwd() -> float:
    from flashlab.flops import attention_flops

    fwd = attention_flops(4096, 4096, 128, block_q=128, block_k=128)
    return (fwd + attention_flops(4096, 4096, 128, pass_="backward", block_q=128, block_k=128)) / fwd


def _programs(batch: int, heads: int, n: int, block_m: int) -> int:
    from flashlab.tiled import num_blocks

    return batch * heads * num_blocks(n, block_m)


def _causal_blocks_loaded(i: int, n: int, block: int) -> int:
    from flashlab.tiled import kv_blocks_visited

    return kv_blocks_visited(i, n, n, block, block, True)


def _sm_shortfall(programs: int) -> float:
    from flashlab import hardware

    return hardware.H200.sms / programs


def _results(name: str) -> dict:
    import json

    from flashlab import course

    folder = course.results_dir()
    path = None if folder is None else folder / f"{name}.json"
    if path is None or not path.is_file():
        raise FileNotFoundError(f"benchmarks/results/{name}.json is not here: run from a flashlab checkout")
    return json.loads(path.read_text(encoding="utf-8"))


def _ncu_row(variant: str, n: int) -> dict:
    rows = [r for r in _results("ncu_traffic")["rows"] if r["variant"] == variant and r["n"] == n]
    if not rows:
        raise LookupError(f"benchmarks/results/ncu_traffic.json has no row variant={variant!r} n={n}")
    return rows[0]


def _ncu_measured_over_model(variant: str, n: int) -> float:
    row = _ncu_row(variant, n)
    model = row["model"]["naive"]
    return (row["dram_read_bytes"] + row["dram_write_bytes"]) / (model["read"] + model["write"])


def _ncu_naive_gib(n: int) -> float:
    row = _ncu_row("naive", n)
    return (row["dram_read_bytes"] + row["dram_write_bytes"]) / 2**30


def _decode_intensity(nk: int, d: int) -> float:
    from flashlab.flops import attention_flops

    return attention_flops(1, nk, d) / _traffic().fa2_forward_traffic(1, nk, d, block_q=128, block_k=128,
                                                                      stat_itemsize=4).total


def _traffic_ratio(nq: int, nk: int, d: int) -> float:
    t = _traffic()
    return t.naive_traffic(nq, nk, d).total / t.fa2_forward_traffic(nq, nk, d, block_q=128, block_k=128,
                                                                   stat_itemsize=4).total


def _fa1_over_fa2(n: int, d: int, block: int) -> float:
    t = _traffic()
    kw = dict(block_q=block, block_k=block, itemsize=2, stat_itemsize=4)
    return t.fa1_forward_traffic(n, n, d, **kw).total / t.fa2_forward_traffic(n, n, d, **kw).total


def _contiguous_last_over_first(world_size: int) -> float:
    from flashlab.distributed import work_per_rank

    work = work_per_rank(world_size, "contiguous", causal=True)
    return work[-1] / work[0]


def _ring_exposed_share(n: int) -> str:
    """The exposed communication of the causal ring row at N = n (bench_ring.json), against the rows from 64k."""
    rows = _results("bench_ring")["rows"]
    short = next(r for r in rows if r["n"] == n and r["causal"])
    long = [r["exposed_comm_ms"] / r["ring_ms"] for r in rows if r["n"] >= 65536]
    return (f"Measured on two H200s (benchmarks/results/bench_ring.json): at N = {n:,} causal, "
            f"{short['exposed_comm_ms']:.2f} ms of the ring's {short['ring_ms']:.2f} ms is exposed communication "
            f"({short['exposed_comm_ms'] / short['ring_ms']:.0%}); from N = 65,536 on, {min(long):.0%} to "
            f"{max(long):.0%}.")


def _v1_over_v0(n: int) -> float:
    from flashlab import course

    rows = [r for r in _results("bench_attention")["rows"]
            if r["n"] == n and r["d"] == 128 and r["dtype"] == "bfloat16" and not r["causal"]]
    gain = course.speedup(rows[0], "rung:v1_minimal", "rung:v0_grid_bh") if rows else None
    if gain is None:
        raise LookupError(f"benchmarks/results/bench_attention.json has no v0/v1 timing at n={n}, bf16, d=128")
    return gain


# ----------------------------------------------------------------------------- the questions
# answer_hash(question.function, letter) of each multiple-choice question's right letter
_STORED = {
    "01.1": "76a68856f5a4948d6ce9", "01.3": "e7dc99eda46fa1a94870", "01.4": "7bccde8e89e4d4944295",
    "02.3": "fce8624c8ce73b1be4f8", "02.4": "76b44e544631ce51a5f2", "02.5": "6d23074d5f09dd5c821b",
    "03.1": "7e11975d5261462a927c", "03.2": "509cfcd181934f75afcf", "03.5": "920538d537a15deea06e",
    "04.2": "1fbde2225aef3a72f331", "04.3": "8da3a2481a13cd88dc69", "04.4": "a0d6c48f34586e2d27d6",
    "05.2": "e0feadc1fc09b5300b7c", "05.3": "cf256f95147c7c1e6770", "05.4": "44de8cbcfaff8da49e78",
    "06.1": "daf2d447f667eba2cb88", "06.2": "da7d4c1b27aaf6bf9241", "06.4": "3e10f40b44af828860b0",
    "07.1": "077e57fd1d0097076e83", "07.4": "07f138a24bdd334b11b4",
    "08.2": "e62904274c6b5563fd47", "08.4": "d43786c93705e5bddf3e",
    "09.1": "a52bce562cfeeab72660", "09.3": "35fff019a3a408b5ac39", "09.4": "5a059612c24007bc736a",
    "09.5": "a2ec3f5a3bfb6add5742", "10.2": "8db10f6c0246c468d59b", "10.3": "8967889188dc998b7d6b",
}


def _q(qid, prompt, explanation, choices=(), compute=None, unit="", source="", detail=None):
    return Question(qid, prompt, explanation, tuple(choices), _STORED.get(qid, ""), compute, unit, source, detail)


QUESTIONS: tuple[Question, ...] = (
    # 01: naive attention
    _q("01.1", "Which two intermediate matrices does standard attention write to HBM, and what shape are they?",
       "S = scale * Q K^T and P = softmax(S) are both Nq x Nk: one score per (query, key) pair. Algorithm 0 "
       "writes each to HBM and reads it back, which is where its N^2 traffic comes from.",
       ("Q and K, each N x d", "O and lse, N x d and N", "S and P, each Nq x Nk", "K^T and V^T, each d x N")),
    _q("01.2", "Per head, at N = 8192 in fp16, how many MiB do S and P move in total (each written once and "
       "read back once)?",
       "Four passes (write S, read S, write P, read P) of N^2 elements of 2 bytes: 4 * 8192^2 * 2 B. "
       "It does not depend on d.", compute=lambda: _s_and_p_mib(8192), unit="MiB",
       source="flashlab.traffic.naive_traffic(8192, 8192, 64).by_tensor, S and P entries"),
    _q("01.3", "Why does causal=True not reduce the naive algorithm's memory?",
       "The mask is applied to S after S is computed: the naive algorithm still writes and reads full Nq x Nk "
       "matrices, half of them -inf or 0 (flashlab.traffic.naive_traffic gives the same bytes causal or not).",
       ("the mask is applied to a full S: S and P are still materialised as Nq x Nk matrices",
        "the mask itself is an extra Nq x Nk matrix that cancels the saving",
        "causal attention needs float32 scores", "it does: causal halves the bytes")),
    _q("01.4", "Naive attention at N = 4096, d = 128, fp16: is its arithmetic intensity (FLOPs per HBM byte) "
       "above or below the H200's ridge point?",
       "Its intensity, flashlab.flops.attention_flops / flashlab.traffic.naive_traffic(...).total, is well "
       "below the ridge point (hardware.H200_MEASURED.ridge_point): naive attention is memory-bound, its "
       "time set by the bytes it moves, not by the tensor cores.",
       ("above: compute-bound, limited by the tensor cores", "below: memory-bound, limited by HBM bandwidth",
        "exactly at the ridge point", "intensity does not apply to attention")),
    # 02: softmax decomposed
    _q("02.1", "Above which score x does np.exp(x) overflow to inf in float32?",
       "exp(x) overflows when x > log(largest float32), log(np.finfo(np.float32).max). Scores can exceed "
       "that, which is why safe softmax subtracts the row max first.", compute=_exp_overflow_float32,
       source="numpy: log(np.finfo(np.float32).max)"),
    _q("02.2", "A state has m = 3, l = 2; a new chunk has m = 5, l = 1. What is the combined l?",
       "m = max(3, 5) = 5 and l = 2 * exp(3 - 5) + 1 * exp(5 - 5) = 2 e^-2 + 1: each side is rescaled to the "
       "new max before adding.", compute=_combined_l, source="flashlab.softmax.combine_states"),
    _q("02.3", "Why may the kernel divide by l only once, at the end, instead of after every tile?",
       "acc and l are rescaled by the same factor alpha = exp(m_old - m_new) at every step, so acc / l at the "
       "end is the same as normalising after every tile, with fewer divisions.",
       ("division is not available inside a Triton kernel", "l does not change after the first tile",
        "dividing after every tile would overflow float16",
        "acc and l are rescaled by the same factor each step, so acc / l comes out the same")),
    _q("02.4", "What does the state of a row whose scores are all masked (-inf) look like?",
       "m = -inf and l = 0 (and acc = 0): it contributes exp(-inf) = 0 weight, so combining with it must leave "
       "the other state unchanged (flashlab.softmax.combine_states guards exp(-inf - (-inf)) = NaN).",
       ("m = 0, l = 0", "m = -inf, l = 0: combining with it changes nothing", "m = +inf, l = 1",
        "m = NaN, l = NaN")),
    _q("02.5", "Is the online softmax exact?",
       "Yes: the rescale by exp(m_old - m_new) turns sums relative to the old max into exactly the sums "
       "relative to the new one. The notebook measures a difference from safe softmax at rounding level "
       "(of order 1e-15 in float64).",
       ("yes: it equals safe softmax up to floating-point rounding", "no: it is an approximation with a small "
        "bias", "only when the chunk size divides N", "only in float64")),
    # 03: tiled attention
    _q("03.1", "In FlashAttention-2's loop order, how often is each Q_i read from HBM, and each K_j?",
       "The outer loop is over query blocks: Q_i is loaded once and stays on chip; every query block's "
       "inner loop loads each K_j (and V_j) it needs, so K_j is read once per query block "
       "(flashlab.traffic.fa2_forward_traffic).",
       ("both once", "Q_i once; K_j once per query block", "Q_i once per key block; K_j once",
        "both once per tile")),
    _q("03.2", "What does FlashAttention-1 read and write back per inner step that FlashAttention-2 does not?",
       "FA1's outer loop is over key blocks, so the running O_i, l_i and m_i of every query block go back to "
       "HBM after each step and are read again at the next (flashlab.traffic.fa1_forward_traffic's O, l, m "
       "reads).",
       ("S and P", "K_j and V_j", "O_i, l_i and m_i (and Q_i again)", "only lse")),
    _q("03.3", "With N = 1000 and 64 x 64 tiles, how many rows does the last (ragged) query block have?",
       "ceil(1000 / 64) = 16 blocks; the first 15 hold 960 rows, the last 40. Rows and columns past N must be "
       "masked or sliced away.", compute=lambda: _ragged_rows(1000, 64), unit="rows",
       source="flashlab.tiled.num_blocks"),
    _q("03.4", "Causal attention, N = 1024, 64 x 64 tiles: of the 256 tiles, how many does the loop compute "
       "(diagonal tiles included)?",
       "Query block i computes key blocks 0..i: 1 + 2 + ... + 16. The tiles above the diagonal are skipped; "
       "the 16 on it are computed with a mask.", compute=lambda: _causal_tiles(1024, 64), unit="tiles",
       source="flashlab.tiled.kv_blocks_visited"),
    _q("03.5", "Why can FlashAttention-2 run one GPU program per query block?",
       "O_i, l_i and m_i of one query block depend only on Q_i and all of K, V; no other program writes them, "
       "so the programs need no communication. FA1's outer loop over K/V blocks updates every O_i each step.",
       ("each query block's outputs depend only on its Q_i and all of K, V: no other program touches them",
        "query blocks are smaller than key blocks", "GPUs cannot loop over key blocks",
        "FA2 stores S in shared memory")),
    # 04: IO complexity
    _q("04.1", "N = 16384, d = 64, SRAM of M = 65536 elements, the paper's block sizes: how many times fewer "
       "HBM accesses does FlashAttention make than standard attention?",
       "Standard attention: 4 N d + 4 N^2 elements; FlashAttention (Algorithm 1 with the paper's blocks, "
       "Bc = M / 4d, Br = min(Bc, d)): Theta(N^2 d^2 / M), with d^2 / M = 1/16 here.",
       compute=lambda: _standard_over_flash(16384, 64, 65536), unit="x",
       source="flashlab.traffic.standard_hbm_accesses / flash_hbm_accesses",
       detail=lambda: _standard_and_flash_counts(16384, 64, 65536)),
    _q("04.2", "Why does doubling the SRAM size M roughly halve FlashAttention's traffic, and where does that stop?",
       "Key blocks of Bc = M / (4d) rows double, so the outer loop makes half as many passes over Q and O. It "
       "stops once one key block holds all of K: Q, K, V are read once and O (kept in HBM between key blocks "
       "by FA1's Algorithm 1) is initialised, read and written once, about 6 N d elements.",
       ("FLOPs halve with M", "the GPU clock rises with M",
        "key blocks get twice as large, halving the passes over Q and O; it stops once one key block holds "
        "all of K (Q, K, V read once, O initialised, read and written once)", "it never stops: traffic falls to 0")),
    _q("04.3", "Why is shared memory summed over all SMs not the M of the theorem?",
       "M is what one program can hold on chip. Each thread block sees only its own SM's shared memory "
       "(hardware.H200_SMEM_PER_BLOCK on an H200), never the sum over all SMs.",
       ("the sum is too small", "shared memory is slower than HBM", "M counts registers only",
        "each thread block sees only its own SM's shared memory")),
    _q("04.4", "Non-causal: does tiled attention do more matmul FLOPs than naive attention, fewer, or the same?",
       "The same: tiling reorders the products Q_i K_j^T and P_ij V_j, it does not remove any "
       "(flashlab.flops.attention_flops gives equal numbers).",
       ("more", "the same", "fewer", "it depends on the block size")),
    # 05: Triton primer
    _q("05.1", "How many programs does the vector add launch for n = 1000 with BLOCK_SIZE = 256?",
       "One program per block of 256 elements: ceil(1000 / 256); the last program masks its 24 lanes past n.",
       compute=lambda: _programs(1, 1, 1000, 256), unit="programs", source="flashlab.tiled.num_blocks"),
    _q("05.2", "Why must BLOCK_SIZE be a tl.constexpr?",
       "Block shapes are fixed when the kernel is compiled: tl.arange(0, BLOCK_SIZE) needs a constant size, "
       "and each value compiles a separate kernel.",
       ("tensor shapes in a Triton kernel are fixed at compile time", "it makes the kernel run in float32",
        "Python requires constants in upper case", "it lets the grid change size at run time")),
    _q("05.3", "Why does the row softmax load padding lanes as -inf rather than 0?",
       "exp(-inf) = 0, so a padding lane never wins the max and adds nothing to the sum; a 0 would add "
       "exp(0 - max) to the sum and could even become the max of a row of negative scores.",
       ("-inf is faster to load", "0 would be rounded in float16",
        "exp(-inf) = 0: padding neither wins the max nor adds to the sum", "Triton cannot load 0")),
    _q("05.4", "Which is true of Triton's CPU interpreter (TRITON_INTERPRET=1)?",
       "The interpreter runs programs one after another with plain float32 dots (fp32 products and sums, no "
       "tf32 rounding): races, tf32 rounding and "
       "some shape limits of a GPU never show, so passing there is not GPU correctness.",
       ("it is faster than a GPU for large inputs", "it runs programs one at a time with plain fp32 dots, so "
        "races and tf32 rounding never show", "it rejects every kernel a GPU would reject",
        "it compiles to PTX")),
    # 06: Triton forward
    _q("06.1", "Which loop of the NumPy FA2 code became the kernel's grid?",
       "The outer loop over query blocks: each iteration is independent (03.5), so each becomes a program; the "
       "inner loop over key blocks stays a loop inside the program.",
       ("the inner loop over key blocks", "the outer loop over query blocks", "the loop over d",
        "none: the kernel has a single program")),
    _q("06.2", "Where do m_i, l_i and acc live while a program runs?",
       "In registers, on chip, for the whole inner loop; O_i = acc / l_i and lse_i are written to HBM once at "
       "the end.",
       ("in registers: O_i and lse_i go to HBM once at the end", "in HBM, updated every step",
        "in the L2 cache", "in host memory")),
    _q("06.3", "Causal, N = 4096, BLOCK_M = BLOCK_N = 128: how many K/V blocks does the program of query block "
       "10 (counting from 0) load?",
       "Query rows 1280..1407 see keys 0..1407: key blocks 0..10. The blocks after the diagonal are never "
       "loaded.", compute=lambda: _causal_blocks_loaded(10, 4096, 128), unit="blocks",
       source="flashlab.tiled.kv_blocks_visited"),
    _q("06.4", "Why does rung 2 use exp2, and what must change in the scale?",
       "exp2 maps to one fast hardware instruction; exp(x) = exp2(x * log2(e)), so the scale is multiplied by "
       "log2(e) = 1.4427 (and lse converted back).",
       ("exp2 is more accurate than exp", "exp is not available in Triton", "exp2 avoids the max subtraction",
        "exp2 is one fast instruction; the scale is multiplied by log2(e)")),
    _q("06.5", "Non-causal, B = 2, H = 8, N = 1000, BLOCK_M = 64: how many programs does the FA2 grid launch?",
       "One per (query block, batch x head): ceil(1000 / 64) * 2 * 8.", compute=lambda: _programs(2, 8, 1000, 64),
       unit="programs", source="flashlab.tiled.num_blocks"),
    # 07: backward
    _q("07.1", "Which facts turn D_i = sum_j P_ij dP_ij into D_i = dO_i . O_i?",
       "dP_ij = dO_i . V_j, so sum_j P_ij dP_ij = dO_i . (sum_j P_ij V_j), and sum_j P_ij V_j is O_i.",
       ("P is symmetric", "each row of P sums to 1", "dP_ij = dO_i . V_j and O_i = sum_j P_ij V_j",
        "dO = O")),
    _q("07.2", "Besides O, the forward saves lse for the backward. How many KiB is lse per head at N = 16384 "
       "in float32?", "One float32 per query row: 16384 * 4 bytes, instead of an N x N matrix P.",
       compute=lambda: _lse_kib(16384), unit="KiB",
       source="flashlab.traffic.fa2_forward_traffic(..., stat_itemsize=4).by_tensor[('lse', 'write')]"),
    _q("07.3", "How many matmuls per tile does FlashAttention-2's backward (one pass, atomic dQ) do, one of "
       "them recomputing S?",
       "S = Q K^T (the recomputation), dV += P^T dO, dP = dO V^T, dQ += dS K, dK += dS^T Q. The course's "
       "two-pass kernels do 7: S and dP are recomputed again in the dQ pass.",
       compute=_backward_matmuls, unit="matmuls", source="flashlab.flops.attention_flops(pass_='backward')"),
    _q("07.4", "Why does the dK/dV kernel loop over query blocks?",
       "Each program owns one K_j, V_j block and accumulates dK_j, dV_j in registers over all query blocks, "
       "writing them once; dQ_i, which sums over key blocks, is then the one that needs another loop order "
       "(or atomics).",
       ("query blocks are smaller", "so each program accumulates its dK_j, dV_j on chip and writes them once",
        "the forward did the same", "to recompute lse")),
    _q("07.5", "Forward + FlashAttention-2 backward matmul FLOPs, divided by the forward's (non-causal, d = dv)?",
       "Forward: 2 matmuls per tile; FlashAttention-2's backward: 5. (2 + 5) / 2: why benchmarks count "
       "forward + backward as 3.5 forwards (the course's two-pass backward executes 7, i.e. 4.5 forwards).", compute=_fwd_bwd_over_fwd, unit="x", source="flashlab.flops.attention_flops"),
    # 08: performance
    _q("08.1", "At N = 16384, B = 1, H = 16, v0_grid_bh launches one program per (batch, head). By what factor "
       "does that fall short of the H200's SM count?",
       "16 programs for 132 SMs: 132 / 16. v1's grid over query blocks adds N / BLOCK_M programs per head.",
       compute=lambda: _sm_shortfall(16), unit="x", source="flashlab.hardware.H200.sms"),
    _q("08.2", "Why does the flash kernel read fewer DRAM bytes than the traffic model predicts?",
       "Programs on neighbouring query blocks read the same K_j, V_j at about the same time and share them "
       "through the L2 cache: the model counts loads from global memory, ncu counts DRAM traffic.",
       ("ncu does not count reads", "neighbouring programs share K and V through the L2 cache",
        "the kernel compresses K and V", "the model counts FLOPs")),
    _q("08.3", "From the ncu table: naive attention at N = 4096, measured DRAM bytes divided by the model's bytes?",
       "Above 1: S for all 16 heads (16 * 4096^2 * 2 bytes) is far larger than the L2 cache "
       "(hardware.H200_L2_BYTES), so S and P really go through DRAM, and PyTorch's naive path runs an extra "
       "scaling pass over S.",
       compute=lambda: _ncu_measured_over_model("naive", 4096), unit="x",
       source="benchmarks/results/ncu_traffic.json"),
    _q("08.4", "A row is 0.98x its target at N = 1024. What do you check before calling the kernel slower?",
       "The run-to-run spread of the timings: a ratio within that spread is a tie, not a verdict.",
       ("the kernel's FLOPs", "the GPU's clock speed only", "the number of registers",
        "the spread between repeated runs: within it, a 0.98x is a tie")),
    # 09: beyond prefill
    _q("09.1", "In a decode step, what are Nq and Nk, and how large are S and P?",
       "One new query row (Nq = 1) against the whole cache (Nk = cache length): S and P are 1 x Nk, tiny next "
       "to K and V.",
       ("Nq = 1, Nk = the cache length: S and P are 1 x Nk", "Nq = Nk = the cache length",
        "Nq = the cache length, Nk = 1", "Nq = Nk = 1")),
    _q("09.2", "Arithmetic intensity (matmul FLOPs per HBM byte) of one decode step, Nk = 4096, d = 128, fp16?",
       "4 Nk d FLOPs for about 2 Nk d * 2 bytes of K and V: about 1 FLOP per byte, far below the H200's ridge "
       "point (hardware.H200_MEASURED.ridge_point): memory-bound.", compute=lambda: _decode_intensity(4096, 128), unit="FLOP/B",
       source="flashlab.flops.attention_flops / flashlab.traffic.fa2_forward_traffic"),
    _q("09.3", "Grouped-query attention with 8 kv heads for 32 query heads: how does a decode step's time change?",
       "Decode is memory-bound and its bytes are the KV cache; 8 kv heads instead of 32 read 4x fewer K/V "
       "bytes, so the step is up to about 4x faster.",
       ("unchanged: the FLOPs are the same", "4x slower", "up to about 4x faster: it reads 4x fewer K/V bytes",
        "32x faster")),
    _q("09.4", "Why does split-KV decoding help at batch 1?",
       "One query row per head gives too few programs to fill 132 SMs; splitting the keys into chunks gives "
       "more programs, and the final combine is the exact (m, l, acc) merge of notebook 02.",
       ("it reduces the FLOPs", "more programs fill the SMs; the combine merges (m, l, acc) states exactly",
        "it avoids reading V", "it approximates softmax")),
    _q("09.5", "Why must a decode query not use the top-left causal mask?",
       "Top-left aligns query 0 with key 0, so the single new query would see only the first key. Decode's "
       "query is the last position: bottom-right alignment, where it sees every key.",
       ("top-left is slower", "it doubles the traffic", "decode has no keys",
        "top-left would let the one query see only key 0; it is the last position and must see every key")),
    # 10: ring attention
    _q("10.1", "With W = 8 ranks and a contiguous causal split, how many times more attention work does the last "
       "rank do than the first?",
       "Rank r's queries see the r shards before theirs in full and their own shard half (the diagonal): "
       "r + 1/2 blocks. The last rank does W - 1/2, the first 1/2: 2W - 1 = 15 times more. Zigzag gives every "
       "rank W/2 blocks.", compute=lambda: _contiguous_last_over_first(8), unit="x",
       source="flashlab.distributed.work_per_rank"),
    _q("10.2", "Why is merging two partial results through their lse exact, not an approximation?",
       "Each partial output is normalised by its own softmax denominator, and its lse is the log of that "
       "denominator. e^(lse_A - lse) and e^(lse_B - lse) rescale both to the common denominator: the merge is "
       "combine_states of notebook 02, only rounding differs.",
       ("the merge averages the two outputs, which is exact when the key sets have equal size",
        "each partial result carries its lse, the log of its softmax denominator, so both are rescaled to the "
        "common denominator",
        "bf16 rounding cancels between the two halves", "the ring sends the scores S along with K and V")),
    _q("10.3", "When does the ring's communication stop hiding behind compute?",
       "A shard's transfer is 2 N_local d elements per head (K and V), growing like N_local; one block's attention "
       "is 4 N_local^2 d FLOPs per head, growing like N_local^2. At short N_local the block ends before the next "
       "shard has arrived, and the wait is exposed.",
       ("at long N_local: the transfer grows faster than the compute",
        "never: point-to-point sends are free on NVLink",
        "at short N_local: the transfer grows like N_local, the block's attention like N_local^2",
        "only with causal attention"), detail=lambda: _ring_exposed_share(16384)),
)
BY_ID = {q.qid: q for q in QUESTIONS}

PREDICTIONS: tuple[Prediction, ...] = (
    Prediction("fa1_vs_fa2_bytes", "03", "FA1's HBM bytes divided by FA2's: N = 1024, d = 64, 64 x 64 tiles, "
               "fp16 tensors, fp32 statistics, not causal", lambda: _fa1_over_fa2(1024, 64, 64),
               "flashlab.traffic.fa1_forward_traffic / fa2_forward_traffic (equal to the traced bytes)", 0.10, "x"),
    Prediction("v1_over_v0_speedup", "08", "How many times faster v1_minimal ran than v0_grid_bh on the H200: "
               "N = 16384, B = 1, H = 16, d = 128, bf16, not causal (hint: 132 SMs, 16 programs for v0)",
               lambda: _v1_over_v0(16384), "benchmarks/results/bench_attention.json (course.speedup)", 0.25, "x"),
    Prediction("ncu_naive_dram_gib", "08", "DRAM bytes (GiB) that Nsight Compute measured for one naive forward: "
               "N = 4096, B = 1, H = 16, d = 64, fp16", lambda: _ncu_naive_gib(4096),
               "benchmarks/results/ncu_traffic.json (dram__bytes_read.sum + dram__bytes_write.sum)", 0.25, "GiB"),
    Prediction("decode_traffic_ratio", "09", "Naive attention's HBM bytes divided by FlashAttention-2's for one "
               "decode step: Nq = 1, Nk = 16384, d = 128, fp16, 128 x 128 tiles",
               lambda: _traffic_ratio(1, 16384, 128), "flashlab.traffic.naive_traffic / fa2_forward_traffic", 0.10,
               "x"),
)
PREDICTIONS_BY_KEY = {p.key: p for p in PREDICTIONS}
