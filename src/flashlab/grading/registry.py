"""The exercise registry: what each exercise asks for and how it is checked.

One :class:`Exercise` per module in ``exercises/`` (its id is the module name, e.g.
``ex03_tiled_forward``). Each exercise has :class:`Part` s, one per function (or quiz answer) the
learner writes. A part has fixed public cases, a generator of hidden cases (called with a fresh
random generator every run), a reference, tolerances by dtype and hints in increasing detail.

References are flashlab's own functions (:mod:`flashlab.reference`, :mod:`flashlab.softmax`,
:mod:`flashlab.tiled`, :mod:`flashlab.traffic`); the two backward pieces of exercise 09 are
one-line NumPy formulas written here. Cases are built in the grading subprocess (they may call the
library), so nothing in this module runs at import time beyond defining data.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

# (atol, rtol) by output dtype: |out - ref| <= atol + rtol * |ref| elementwise.
DEFAULT_TOLERANCE = {"float64": (1e-9, 1e-7), "float32": (2e-5, 2e-4), "float16": (5e-3, 5e-3)}
GRAD_TOLERANCE = {"float64": (1e-8, 1e-6), "float32": (1e-4, 1e-3)}
# A GPU computes fp32 dots in tf32 by default (10-bit mantissa): looser for kernels on CUDA.
KERNEL_GPU_TOLERANCE = {"float32": (1e-2, 1e-2), "float16": (1e-2, 1e-2)}


@dataclass(frozen=True)
class Case:
    """One call of the learner's function: keyword arguments and what the case probes."""

    label: str  # short description shown in reports, e.g. "ragged Nq=37 Nk=53 float32"
    kwargs: dict
    reference_kwargs: dict | None = None  # inputs for the reference when they differ (poison)
    max_peak_bytes: int | None = None  # IO-awareness: peak allocation allowed during the call
    why: str = ""  # shown when this case fails: what the case is there to catch


@dataclass(frozen=True)
class Part:
    """One function (or quiz answer) of an exercise, with its checks."""

    function: str  # name in the learner's module
    title: str
    points: int
    reference: Callable[..., Any]
    public: Callable[[np.random.Generator], list[Case]]
    hidden: Callable[[np.random.Generator], list[Case]] = lambda rng: []
    hints: tuple[str, ...] = ()
    kind: str = "array"  # "array", "exact", "choice" (hashed letter), "number" (rel. tolerance)
    outputs: tuple[str, ...] = ("output",)  # names of the returned values, for messages
    tolerance: dict = field(default_factory=lambda: dict(DEFAULT_TOLERANCE))
    gpu_tolerance: dict = field(default_factory=dict)  # overrides when tensors live on CUDA
    tensors: bool = False  # convert array inputs to torch tensors (on CUDA if present)
    must_launch: tuple[str, ...] = ()  # module-level Triton kernels the function must launch
    time_limit_s: float = 10.0  # per case


@dataclass(frozen=True)
class Exercise:
    name: str  # module name in exercises/ and the id given to check()
    title: str
    parts: tuple[Part, ...]
    needs_triton: bool = False

    @property
    def points(self) -> int:
        return sum(p.points for p in self.parts)


# ----------------------------------------------------------------------------- helpers
def _dtype(rng: np.random.Generator) -> np.dtype:
    return np.dtype(rng.choice(["float32", "float64"]))


def _randn(rng, *shape, dtype="float64", scale=1.0) -> np.ndarray:
    return (scale * rng.standard_normal(shape)).astype(dtype)


def _qkv(rng, nq, nk, d, dv=None, batch=(), dtype="float64", q_scale=1.0):
    dv = d if dv is None else dv
    return dict(q=_randn(rng, *batch, nq, d, dtype=dtype, scale=q_scale),
                k=_randn(rng, *batch, nk, d, dtype=dtype), v=_randn(rng, *batch, nk, dv, dtype=dtype))


def _attn_label(kw, causal=False, extra="") -> str:
    q, k, v = kw["q"], kw["k"], kw["v"]
    batch = f"batch={q.shape[:-2]} " if q.ndim > 2 else ""
    return (f"{batch}Nq={q.shape[-2]} Nk={k.shape[-2]} d={q.shape[-1]} dv={v.shape[-1]} "
            f"{q.dtype}{' causal' if causal else ''}{extra}")


def _poison_keys(kw: dict, first: int) -> tuple[dict, dict]:
    """NaN in K and V rows >= first (never visible to a causal query when first >= Nq)."""
    clean = dict(kw, k=kw["k"].copy(), v=kw["v"].copy())
    clean["k"][..., first:, :] = 0.0
    clean["v"][..., first:, :] = 0.0
    poisoned = dict(kw, k=kw["k"].copy(), v=kw["v"].copy())
    poisoned["k"][..., first:, :] = np.nan
    poisoned["v"][..., first:, :] = np.nan
    return poisoned, clean


LARGE_LOGITS = "scores near 1e3 overflow exp() unless the row max is subtracted first"
POISON_WHY = ("causal: every key from row {first} on is past the last query row, and those K/V rows "
              "hold NaN; a causal tiled loop skips fully masked tiles, so it never reads them")


def answer_hash(question: str, answer: Any) -> str:
    """Stored form of a multiple-choice answer (so answers are not readable in the source)."""
    text = str(answer).strip().lower().strip("()").strip()
    return hashlib.sha256(f"flashlab/{question}/{text}".encode()).hexdigest()[:20]


# ----------------------------------------------------------------------------- ex01 naive
def _naive_reference(q, k, v, causal=False, scale=None, **blocks):
    from flashlab.reference import naive_attention

    return naive_attention(q, k, v, causal=causal, scale=scale)


def _naive_public(rng):
    cases = []
    for nq, nk, d, dv, dtype, causal in [(8, 8, 4, 4, "float64", False), (5, 9, 8, 6, "float32", False),
                                         (6, 6, 4, 4, "float64", True)]:
        kw = dict(_qkv(rng, nq, nk, d, dv, dtype=dtype), causal=causal)
        cases.append(Case(_attn_label(kw, causal), kw))
    return cases


def _naive_hidden(rng):
    cases = []
    for causal, (nq, nk) in [(False, (1, 1)), (False, (23, 7)), (True, (17, 5)), (True, (4, 19))]:
        batch = tuple(rng.integers(1, 4, size=int(rng.integers(0, 3))))
        kw = dict(_qkv(rng, nq, nk, int(rng.choice([4, 8, 16])), int(rng.integers(1, 9)), batch,
                       _dtype(rng)), causal=causal)
        cases.append(Case(_attn_label(kw, causal), kw, why="ragged shapes, Nq != Nk, batch dims"))
    kw = dict(_qkv(rng, 12, 10, 16, dtype="float32", q_scale=300.0), causal=False)
    cases.append(Case(_attn_label(kw, extra=" large logits"), kw, why=LARGE_LOGITS))
    kw = dict(_qkv(rng, 9, 11, 8), causal=bool(rng.integers(2)), scale=float(rng.uniform(0.05, 2.0)))
    cases.append(Case(_attn_label(kw, kw["causal"], f" scale={kw['scale']:.3f}"), kw,
                      why="an explicit scale replaces 1/sqrt(d)"))
    return cases


def _naive_bytes_reference(nq, nk, d, dv=None, itemsize=2):
    from flashlab.traffic import naive_traffic

    return int(naive_traffic(nq, nk, d, dv=dv, itemsize=itemsize).total)


def _naive_bytes_public(rng):
    return [Case("nq=4 nk=4 d=2", dict(nq=4, nk=4, d=2)),
            Case("nq=3 nk=5 d=4 dv=6 itemsize=4", dict(nq=3, nk=5, d=4, dv=6, itemsize=4))]


def _naive_bytes_hidden(rng):
    return [Case(f"nq={a} nk={b} d={c} dv={e} itemsize={s}", dict(nq=a, nk=b, d=c, dv=e, itemsize=s))
            for a, b, c, e, s in (map(int, row) for row in zip(rng.integers(1, 5000, 5), rng.integers(1, 5000, 5),
                                     rng.choice([16, 64, 128], 5), rng.choice([16, 40, 128], 5),
                                     rng.choice([1, 2, 4], 5)))]


# ----------------------------------------------------------------------------- ex02 softmax
def _x_cases(rng, shapes, scale=1.0, dtype=None):
    out = []
    for shape in shapes:
        dt = dtype or _dtype(rng)
        out.append(_randn(rng, *shape, dtype=dt, scale=scale))
    return out


def _softmax_reference(x, chunk=None):
    from flashlab.softmax import safe_softmax

    return safe_softmax(x)


def _softmax_public(rng):
    return [Case(f"x{x.shape} {x.dtype}", dict(x=x)) for x in _x_cases(rng, [(3, 7), (2, 3, 5)])]


def _softmax_hidden(rng):
    cases = [Case(f"x{x.shape} {x.dtype}", dict(x=x), why="random shapes")
             for x in _x_cases(rng, [(int(rng.integers(1, 9)), int(rng.integers(1, 40))), (1, 1)])]
    for dt in ("float32", "float64"):
        x = _x_cases(rng, [(4, 33)], scale=1000.0, dtype=dt)[0]
        cases.append(Case(f"x{x.shape} {dt} large logits", dict(x=x), why=LARGE_LOGITS))
    x = _x_cases(rng, [(3, 12)])[0]
    x[:, ::3] = -np.inf
    cases.append(Case(f"x{x.shape} {x.dtype} with -inf entries", dict(x=x),
                      why="masked entries (-inf) get probability 0; the rest still sum to 1"))
    return cases


def _online_public(rng):
    return [Case(f"x{x.shape} {x.dtype} chunk={c}", dict(x=x, chunk=c))
            for x, c in zip(_x_cases(rng, [(2, 12), (3, 10)]), (4, 3))]


def _online_hidden(rng):
    cases = []
    for n, chunk in [(int(rng.integers(5, 60)), 1), (int(rng.integers(5, 60)), int(rng.integers(2, 9))),
                     (7, 20)]:
        x = _x_cases(rng, [(int(rng.integers(1, 5)), n)])[0]
        cases.append(Case(f"x{x.shape} {x.dtype} chunk={chunk}", dict(x=x, chunk=chunk),
                          why="ragged last chunk, chunk of 1, chunk longer than the row"))
    x = _x_cases(rng, [(3, 40)], scale=1000.0, dtype="float64")[0]
    x[:, 30:] += 3000.0  # the max jumps in the last chunk: old sums must be rescaled
    cases.append(Case("x(3, 40) float64 large logits, max in the last chunk", dict(x=x, chunk=8),
                      why=LARGE_LOGITS + "; the running max changes late"))
    return cases


def _state(rng, rows, cols, dv, dtype, shift=0.0, empty=False):
    s = _randn(rng, rows, cols, dtype=dtype, scale=3.0) + shift
    v = _randn(rng, cols, dv, dtype=dtype)
    if empty:
        return (np.full(rows, -np.inf, dtype), np.zeros(rows, dtype), np.zeros((rows, dv), dtype))
    m = s.max(axis=-1)
    p = np.exp(s - m[:, None])
    return m, p.sum(axis=-1), p @ v


def _combine_kwargs(a, b):
    return dict(m_a=a[0], l_a=a[1], acc_a=a[2], m_b=b[0], l_b=b[1], acc_b=b[2])


def _combine_reference(m_a, l_a, acc_a, m_b, l_b, acc_b):
    from flashlab.softmax import combine_states

    return combine_states(m_a, l_a, acc_a, m_b, l_b, acc_b)


def _combine_public(rng):
    return [Case("4 rows, dv=3, float64", _combine_kwargs(_state(rng, 4, 5, 3, "float64"),
                                                          _state(rng, 4, 6, 3, "float64")))]


def _combine_hidden(rng):
    dt = str(_dtype(rng))
    return [
        Case(f"6 rows dv=5 {dt}", _combine_kwargs(_state(rng, 6, 7, 5, dt), _state(rng, 6, 3, 5, dt))),
        Case("b's scores 500 above a's (float64)",
             _combine_kwargs(_state(rng, 3, 4, 2, "float64"), _state(rng, 3, 4, 2, "float64", 500.0)),
             why="rescale each side by exp(m_side - m_new); never exp(m) alone"),
        Case("a is empty (m_a = -inf, l_a = 0)",
             _combine_kwargs(_state(rng, 3, 4, 2, "float64", empty=True), _state(rng, 3, 4, 2, "float64")),
             why="a state that has seen nothing must leave the other unchanged, without NaN"),
    ]


# ----------------------------------------------------------------------------- ex03/04 tiled
def _tiled_public(rng):
    cases = []
    for nq, nk, bq, bk, dtype, causal in [(32, 32, 16, 16, "float64", False), (37, 53, 16, 8, "float32", False),
                                          (24, 24, 8, 8, "float64", True)]:
        kw = dict(_qkv(rng, nq, nk, 8, dtype=dtype), causal=causal, block_q=bq, block_k=bk)
        cases.append(Case(_attn_label(kw, causal, f" blocks {bq}x{bk}"), kw))
    return cases


def _tiled_hidden(rng):
    cases = []
    for causal, (nq, nk) in [(False, (int(rng.integers(1, 70)), int(rng.integers(1, 70)))),
                             (True, (int(rng.integers(30, 70)), int(rng.integers(5, 29)))),
                             (True, (int(rng.integers(5, 29)), int(rng.integers(30, 70)))),
                             (False, (5, 3))]:
        bq, bk = (int(b) for b in rng.choice([4, 8, 16, 32, 128], 2))
        batch = tuple(int(b) for b in rng.integers(1, 3, size=int(rng.integers(0, 2))))
        kw = dict(_qkv(rng, nq, nk, int(rng.choice([4, 8])), int(rng.integers(2, 9)), batch, _dtype(rng)),
                  causal=causal, block_q=bq, block_k=bk)
        cases.append(Case(_attn_label(kw, causal, f" blocks {bq}x{bk}"), kw,
                          why="ragged last tiles, Nq != Nk, blocks larger than the sequence"))
    kw = dict(_qkv(rng, 40, 40, 16, dtype="float32", q_scale=300.0), causal=False, block_q=16, block_k=16)
    cases.append(Case(_attn_label(kw, extra=" large logits"), kw, why=LARGE_LOGITS))
    n = 1536
    kw = dict(_qkv(rng, n, n, 16, dtype="float32"), causal=False, block_q=128, block_k=128)
    cases.append(Case(_attn_label(kw, extra=" blocks 128x128 (memory)"), kw, max_peak_bytes=n * n * 4 // 3,
                      why="IO-awareness: a tiled forward never materialises the Nq x Nk score matrix"))
    nq, bk = 20, 8
    kw = dict(_qkv(rng, nq, 64, 8), causal=True, block_q=8, block_k=bk)
    first = -(-nq // bk) * bk
    poisoned, clean = _poison_keys(kw, first)
    cases.append(Case(_attn_label(kw, True, " blocks 8x8, K/V poisoned past row 24"), poisoned, clean,
                      why=POISON_WHY.format(first=first)))
    return cases


def _tile_skip_reference(i, j, block_q, block_k, nq):
    from flashlab.tiled import causal_tile_skipped

    return bool(causal_tile_skipped(i, j, block_q, block_k, nq))


def _tile_skip_public(rng):
    rows = [(0, 0, 4, 4, 16), (0, 1, 4, 4, 16), (2, 1, 4, 4, 16), (1, 3, 8, 4, 12)]
    return [Case(f"i={i} j={j} block_q={bq} block_k={bk} nq={nq}",
                 dict(i=i, j=j, block_q=bq, block_k=bk, nq=nq)) for i, j, bq, bk, nq in rows]


def _tile_skip_hidden(rng):
    cases = []
    for _ in range(10):
        bq, bk = (int(b) for b in rng.choice([1, 3, 4, 8, 16, 64], 2))
        nq = int(rng.integers(1, 200))
        i = int(rng.integers(0, -(-nq // bq)))
        j = int(rng.integers(0, max(1, (i + 2) * bq // bk + 1)))
        cases.append(Case(f"i={i} j={j} block_q={bq} block_k={bk} nq={nq}",
                          dict(i=i, j=j, block_q=bq, block_k=bk, nq=nq),
                          why="ragged last query block, block_q != block_k"))
    return cases


def _count_tiles_reference(nq, nk, block_q, block_k, causal):
    from flashlab.tiled import causal_tile_skipped, num_blocks

    n_i, n_j = num_blocks(nq, block_q), num_blocks(nk, block_k)
    return sum(not (causal and causal_tile_skipped(i, j, block_q, block_k, nq))
               for i in range(n_i) for j in range(n_j))


def _count_tiles_cases(rows):
    return [Case(f"nq={a} nk={b} block_q={c} block_k={d} causal={e}",
                 dict(nq=a, nk=b, block_q=c, block_k=d, causal=e)) for a, b, c, d, e in rows]


# ----------------------------------------------------------------------------- ex05 traffic
def _fa2_bytes_reference(nq, nk, d, dv=None, block_q=64, block_k=64, causal=False, itemsize=2,
                         stat_itemsize=4):
    from flashlab.traffic import fa2_forward_traffic

    return int(fa2_forward_traffic(nq, nk, d, dv=dv, block_q=block_q, block_k=block_k, causal=causal,
                                   itemsize=itemsize, stat_itemsize=stat_itemsize).total)


def _fa2_case(nq, nk, d, dv, bq, bk, causal, itemsize):
    kw = dict(nq=nq, nk=nk, d=d, dv=dv, block_q=bq, block_k=bk, causal=causal, itemsize=itemsize,
              stat_itemsize=4)
    return Case(" ".join(f"{k}={v}" for k, v in kw.items() if k != "stat_itemsize"), kw)


def _fa2_bytes_public(rng):
    return [_fa2_case(128, 128, 64, 64, 64, 64, False, 2), _fa2_case(100, 70, 32, 16, 32, 16, True, 2)]


def _fa2_bytes_hidden(rng):
    return [_fa2_case(int(rng.integers(1, 3000)), int(rng.integers(1, 3000)), int(rng.choice([16, 64, 128])),
                      int(rng.choice([16, 40, 128])), int(rng.choice([16, 64, 128])),
                      int(rng.choice([16, 32, 64])), bool(c), int(rng.choice([2, 4])))
            for c in (0, 1, 0, 1, 1, 0)]


# ----------------------------------------------------------------------------- ex06-08 Triton
def _add_reference(x, y):
    return x + y


def _add_cases(rng, sizes, dtypes, why=""):
    return [Case(f"n={n} {dt}", dict(x=_randn(rng, n, dtype=dt), y=_randn(rng, n, dtype=dt)), why=why)
            for n, dt in zip(sizes, dtypes)]


def _row_softmax_reference(x):
    from flashlab.softmax import safe_softmax

    return safe_softmax(x.astype(np.float64)).astype(x.dtype)


def _row_softmax_cases(rng, shapes, dtypes, scale=1.0, why=""):
    return [Case(f"x{shape} {dt}{' large logits' if scale > 1 else ''}",
                 dict(x=_randn(rng, *shape, dtype=dt, scale=scale)), why=why)
            for shape, dt in zip(shapes, dtypes)]


def _flash_reference(q, k, v, causal=False):
    from flashlab.reference import naive_attention

    return naive_attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                           causal=causal).astype(q.dtype)


def _flash_case(rng, z, nq, nk, d, dtype, causal=None, q_scale=1.0, why=""):
    kw = _qkv(rng, nq, nk, d, batch=(z,), dtype=dtype, q_scale=q_scale)
    if causal is not None:
        kw["causal"] = causal
    return Case(_attn_label(kw, bool(causal), " large logits" if q_scale > 1 else ""), kw, why=why)


def _flash_hidden(rng, causal):
    cases = [_flash_case(rng, 2, int(rng.integers(17, 50)), int(rng.integers(17, 50)), 16, "float32", causal,
                         why="ragged tiles: masked loads and -inf for keys past N_K"),
             _flash_case(rng, 1, int(rng.integers(1, 16)), int(rng.integers(33, 60)), 32, "float16", causal,
                         why="float16 inputs, Nq < BLOCK_M"),
             _flash_case(rng, 1, 32, 24, 16, "float32", causal, q_scale=40.0, why=LARGE_LOGITS)]
    if causal:
        cases.append(_flash_case(rng, 1, int(rng.integers(40, 60)), int(rng.integers(17, 30)), 16, "float32",
                                 True, why="causal with Nq > Nk: rows past Nk see every key"))
        first = 64  # past the last query row for any BLOCK_M dividing 64
        base = _flash_case(rng, 1, 20, 160, 16, "float32", True)
        poisoned, clean = _poison_keys(base.kwargs, first)
        cases.append(Case("Nq=20 Nk=160 d=16 float32 causal, K/V poisoned past row 64", poisoned, clean,
                          why=POISON_WHY.format(first=first)))
    return cases


# ----------------------------------------------------------------------------- ex09/10 backward
def _rowsum_reference(do, o):
    return (do * o).sum(axis=-1)  # D = rowsum(dO * O), FlashAttention-2 Algorithm 2 line 4


def _rowsum_cases(rng, shapes):
    cases = []
    for shape in shapes:
        dt = _dtype(rng)
        cases.append(Case(f"do, o {shape} {dt}", dict(do=_randn(rng, *shape, dtype=dt),
                                                      o=_randn(rng, *shape, dtype=dt))))
    return cases


def _ds_reference(p, dp, D):
    return p * (dp - D[..., None])  # dS = P * (dP - D), Algorithm 2 line 16


def _ds_cases(rng, shapes):
    from flashlab.softmax import safe_softmax

    cases = []
    for nq, nk in shapes:
        dt = _dtype(rng)
        p = safe_softmax(_randn(rng, nq, nk, dtype=dt, scale=2.0))
        dp = _randn(rng, nq, nk, dtype=dt)
        cases.append(Case(f"p, dp ({nq}, {nk}) {dt}", dict(p=p, dp=dp, D=(p * dp).sum(axis=-1))))
    return cases


def _backward_reference(q, k, v, o, lse, do, causal=False, scale=None, block_q=64, block_k=64):
    from flashlab.reference import naive_attention_backward

    return naive_attention_backward(q, k, v, do, causal=causal, scale=scale)


def _backward_case(rng, nq, nk, d, dv, bq, bk, causal, dtype, batch=(), why="", max_peak=None, extra=""):
    from flashlab.reference import naive_attention

    kw = _qkv(rng, nq, nk, d, dv, batch, dtype)
    o, lse = naive_attention(kw["q"], kw["k"], kw["v"], causal=causal, return_lse=True)
    kw.update(o=o, lse=lse, do=_randn(rng, *o.shape, dtype=dtype), causal=causal, block_q=bq, block_k=bk)
    return Case(_attn_label(kw, causal, f" blocks {bq}x{bk}{extra}"), kw, why=why, max_peak_bytes=max_peak)


def _backward_public(rng):
    return [_backward_case(rng, 16, 16, 8, 8, 8, 8, False, "float64"),
            _backward_case(rng, 21, 13, 8, 4, 8, 4, True, "float64")]


def _backward_hidden(rng):
    n = 1536
    return [
        _backward_case(rng, int(rng.integers(1, 40)), int(rng.integers(1, 40)), 8, int(rng.integers(2, 9)),
                       int(rng.choice([4, 8, 16])), int(rng.choice([4, 8, 16])), False, "float64", (2,),
                       why="ragged tiles and batch dims"),
        _backward_case(rng, int(rng.integers(25, 40)), int(rng.integers(5, 20)), 4, 4, 8, 4, True, "float64",
                       why="causal with Nq > Nk"),
        _backward_case(rng, int(rng.integers(5, 20)), int(rng.integers(25, 40)), 8, 8, 4, 8, True, "float32",
                       why="causal with Nq < Nk, float32"),
        _backward_case(rng, n, n, 16, 16, 128, 128, False, "float32", max_peak=n * n * 4 // 3, extra=" (memory)",
                       why="IO-awareness: the tiled backward recomputes P tile by tile, never Nq x Nk"),
    ]


# ----------------------------------------------------------------------------- ex11 quiz
# The answers are stored as hashes (answer_hash); the numbers are computed from flashlab.traffic.


def _traffic_ratio(nq):
    from flashlab.traffic import fa2_forward_traffic, naive_traffic

    naive = naive_traffic(nq, 4096, 128, itemsize=2).total
    flash = fa2_forward_traffic(nq, 4096, 128, block_q=128, block_k=128, itemsize=2, stat_itemsize=4).total
    return naive / flash


def _quiz_part(name, title, stored, kind="choice", hints=()):
    reference = (lambda: stored) if kind == "choice" else stored
    return Part(name, title, 1, reference, lambda rng: [Case(name, {})], kind=kind, hints=hints)


_QUIZ = (
    _quiz_part("Q1", "resource FlashAttention saves", "a4b10e3dfbac39c20ccc",
               hints=("Count what moves between HBM and SRAM in naive attention (exercise 01).",)),
    _quiz_part("Q2", "what it does not save", "d58e973f7d5dbd054f65",
               hints=("Compare flashlab.flops.attention_flops for naive and tiled: same matmuls.",)),
    _quiz_part("Q3", "why the online softmax is exact", "2bdaf6029225a400162c",
               hints=("Write l after two chunks with and without the rescale factor exp(m_old - m_new).",)),
    _quiz_part("Q4", "why prefill gains more than decode", "96b7f72cd6ad4ee71add",
               hints=("With Nq = 1, how big are S and P next to K and V?",)),
    _quiz_part("Q5", "prefill traffic ratio", lambda: _traffic_ratio(4096), kind="number",
               hints=("Use your naive_hbm_bytes and fa2_forward_bytes with the sizes in the question.",)),
    _quiz_part("Q6", "decode traffic ratio", lambda: _traffic_ratio(1), kind="number",
               hints=("Same as Q5 with nq=1: one query block.",)),
)


# ----------------------------------------------------------------------------- the registry
_ATTN_HINTS = ("Scores are scale * q @ k^T with k transposed on its last two axes (np.swapaxes(k, -1, -2)).",
               "Subtract each row's max before exp(); with causal, set S[i, j] = -inf where j > i.",
               "Return the result in q's dtype: p @ v, then .astype(q.dtype) if you computed in float64.")
_TILED_HINTS = ("Loop over query blocks outside, key blocks inside; keep m_i, l_i, acc per query block.",
                "When the max grows, rescale l_i and acc by alpha = exp(m_i_old - m_i_new) before adding.",
                "Ragged tiles: slice with min(start + block, N). Causal: skip a key block when "
                "its first key is past the block's last query row; mask the diagonal tiles.")

EXERCISES: dict[str, Exercise] = {e.name: e for e in (
    Exercise("ex01_naive", "naive attention and its HBM bytes", (
        Part("naive_attention", "naive attention", 2, _naive_reference, _naive_public, _naive_hidden,
             _ATTN_HINTS),
        Part("naive_hbm_bytes", "HBM bytes of naive attention", 1, _naive_bytes_reference, _naive_bytes_public,
             _naive_bytes_hidden, ("Algorithm 0 writes S and P to HBM and reads each back once.",
                                   "Reads: Q, K, S, P, V. Writes: S, P, O. Multiply elements by itemsize."),
             kind="exact"),
    )),
    Exercise("ex02_softmax", "safe softmax, online softmax, combining states", (
        Part("safe_softmax", "safe softmax", 1, _softmax_reference, _softmax_public, _softmax_hidden,
             ("exp(1000) is inf: subtract the row max first (keepdims=True keeps it broadcastable).",)),
        Part("online_softmax", "online softmax over chunks", 2, _softmax_reference, _online_public,
             _online_hidden, ("Keep m (max so far) and l (sum of exp(x - m) so far) per row.",
                              "When a chunk raises the max from m to m_new, multiply l by exp(m - m_new).",
                              "Start with m = -inf and l = 0; the last chunk may be shorter than chunk.")),
        Part("combine_states", "combine two (m, l, acc) states", 2, _combine_reference, _combine_public,
             _combine_hidden, ("m = max(m_a, m_b); scale each side by exp(m_side - m).",
                               "exp(-inf - (-inf)) is NaN: treat a side with m = -inf as factor 0."),
             outputs=("m", "l", "acc")),
    )),
    Exercise("ex03_tiled_forward", "tiled forward (FlashAttention-2 loop order)", (
        Part("tiled_attention", "tiled forward", 4, _naive_reference, _tiled_public, _tiled_hidden,
             _TILED_HINTS, time_limit_s=30.0),
    )),
    Exercise("ex04_causal_tiles", "causal tile skipping", (
        Part("causal_tile_skipped", "is tile (i, j) fully masked?", 1, _tile_skip_reference,
             _tile_skip_public, _tile_skip_hidden,
             ("The block's last query row is min((i + 1) * block_q, nq) - 1.",
              "Skipped when the tile's first key column j * block_k is past that row."), kind="exact"),
        Part("count_computed_tiles", "tiles computed by the loop", 1, _count_tiles_reference,
             lambda rng: _count_tiles_cases([(16, 16, 4, 4, False), (16, 16, 4, 4, True)]),
             lambda rng: _count_tiles_cases([(int(a), int(b), int(c), int(d), bool(e)) for a, b, c, d, e in zip(
                 rng.integers(1, 300, 6), rng.integers(1, 300, 6), rng.choice([16, 32, 64], 6),
                 rng.choice([16, 32, 64], 6), (1, 1, 1, 0, 1, 1))]),
             ("ceil(n / block) blocks per axis; with causal, count only tiles that are not skipped.",),
             kind="exact"),
    )),
    Exercise("ex05_traffic", "HBM traffic of the tiled forward", (
        Part("fa2_forward_bytes", "FlashAttention-2 forward bytes", 2, _fa2_bytes_reference, _fa2_bytes_public,
             _fa2_bytes_hidden, ("K and V are read once per query block, not once overall.",
                                 "Causal: skipped tiles read nothing. lse is stat_itemsize bytes per row."),
             kind="exact"),
    )),
    Exercise("ex06_triton_primer", "Triton warm-up: vector add and row softmax", (
        Part("vector_add", "vector add kernel", 1, _add_reference,
             lambda rng: _add_cases(rng, [1000], ["float32"]),
             lambda rng: _add_cases(rng, [int(rng.integers(1, 5000)), 1, int(rng.integers(1, 3000))],
                                    ["float32", "float32", "float16"], why="n not a multiple of BLOCK"),
             ("Each program handles offs = pid * BLOCK + tl.arange(0, BLOCK).",
              "Mask the last block: mask = offs < n_elements on both loads and the store."),
             tensors=True, must_launch=("add_kernel",), time_limit_s=60.0),
        Part("row_softmax", "row softmax kernel", 1, _row_softmax_reference,
             lambda rng: _row_softmax_cases(rng, [(4, 100)], ["float32"]),
             lambda rng: _row_softmax_cases(rng, [(int(rng.integers(1, 9)), int(rng.integers(1, 300))), (3, 1)],
                                            ["float32", "float16"], why="N not a power of two")
             + _row_softmax_cases(rng, [(5, 77)], ["float32"], scale=1000.0, why=LARGE_LOGITS),
             ("BLOCK_N = triton.next_power_of_2(N); masked lanes load -inf so they add exp(-inf) = 0.",
              "Subtract tl.max(x, axis=0) before tl.exp."),
             tensors=True, must_launch=("softmax_kernel",), time_limit_s=60.0),
    ), needs_triton=True),
    Exercise("ex07_kernel_inner_loop", "the flash forward kernel's inner loop", (
        Part("flash_forward", "inner loop of the forward kernel", 3, _flash_reference,
             lambda rng: [_flash_case(rng, 1, 32, 32, 16, "float32")], lambda rng: _flash_hidden(rng, None),
             ("qk = tl.dot(q, k) * qk_scale; keys past N_K must score -inf (tl.where).",
              "m_ij = max(m_i, rowmax(qk)); p = exp(qk - m_ij); alpha = exp(m_i - m_ij).",
              "l_i = l_i * alpha + rowsum(p); acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v); m_i = m_ij."),
             tensors=True, gpu_tolerance=KERNEL_GPU_TOLERANCE, time_limit_s=60.0),
    ), needs_triton=True),
    Exercise("ex08_kernel_causal", "causal masking in the kernel", (
        Part("flash_forward", "causal forward kernel", 2, _flash_reference,
             lambda rng: [_flash_case(rng, 1, 32, 32, 16, "float32", True)], lambda rng: _flash_hidden(rng, True),
             ("Inside diagonal tiles: qk = tl.where(offs_m[:, None] >= offs_n[None, :], qk, -inf).",
              "Loop bound: hi = min(N_K, (start_m + 1) * BLOCK_M); later key blocks are fully masked."),
             tensors=True, gpu_tolerance=KERNEL_GPU_TOLERANCE, time_limit_s=60.0),
    ), needs_triton=True),
    Exercise("ex09_backward_pieces", "backward: D and dS", (
        Part("rowsum_do_o", "D = rowsum(dO * O)", 1, _rowsum_reference,
             lambda rng: _rowsum_cases(rng, [(4, 3)]), lambda rng: _rowsum_cases(rng, [(1, 5), (2, 7, 3), (9, 1)]),
             ("Elementwise product, then sum over the last axis.",)),
        Part("softmax_backward", "dS = P * (dP - D)", 1, _ds_reference,
             lambda rng: _ds_cases(rng, [(3, 4)]), lambda rng: _ds_cases(rng, [(1, 6), (7, 2), (5, 5)]),
             ("D has one value per row: broadcast it with D[..., None].",)),
    )),
    Exercise("ex10_tiled_backward", "tiled backward (FlashAttention-2 Algorithm 2)", (
        Part("tiled_attention_backward", "tiled backward", 4, _backward_reference, _backward_public,
             _backward_hidden,
             ("Recompute P for each tile from the saved lse: P = exp(scale * Q_i K_j^T - lse_i).",
              "dV_j += P^T dO_i; dP = dO_i V_j^T; dS = P * (dP - D_i); dQ_i += scale dS K_j; "
              "dK_j += scale dS^T Q_i.",
              "Causal: mask the diagonal tiles with -inf before exp and skip fully masked tiles."),
             outputs=("dq", "dk", "dv"), tolerance=dict(GRAD_TOLERANCE), time_limit_s=30.0),
    )),
    Exercise("ex11_quiz", "self-test questions", _QUIZ),
)}


def get_exercise(name: str) -> Exercise:
    """The exercise with this id; ValueError listing the ids when there is none."""
    if not isinstance(name, str) or name not in EXERCISES:
        raise ValueError(f"exercise={name!r} is not a known exercise; expected one of {sorted(EXERCISES)}")
    return EXERCISES[name]
