"""Case generators and references for every exercise, used by :mod:`flashlab.grading.registry`.

For each part: ``*_public(rng)`` -> the fixed public cases (the grader passes a generator with a
constant seed), ``*_hidden(rng)`` -> randomised hidden cases (a fresh seed every run: ragged
shapes, Nq != Nk, causal both ways, batch dims, large logits, poisoned keys, a memory case), and
``*_reference(**kwargs)`` -> the expected output. References are flashlab's own functions
(:mod:`flashlab.reference`, :mod:`flashlab.softmax`, :mod:`flashlab.tiled`, :mod:`flashlab.traffic`)
imported where used; the backward pieces of exercise 09 are one-line NumPy formulas.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from flashlab.grading.spec import Case

# ----------------------------------------------------------------------------- helpers
def random_dtype(rng: np.random.Generator) -> np.dtype:
    return np.dtype(rng.choice(["float32", "float64"]))


def randn(rng, *shape, dtype="float64", scale=1.0) -> np.ndarray:
    return (scale * rng.standard_normal(shape)).astype(dtype)


def qkv(rng, nq, nk, d, dv=None, batch=(), dtype="float64", q_scale=1.0):
    dv = d if dv is None else dv
    return dict(q=randn(rng, *batch, nq, d, dtype=dtype, scale=q_scale),
                k=randn(rng, *batch, nk, d, dtype=dtype), v=randn(rng, *batch, nk, dv, dtype=dtype))


def attn_label(kw, causal=False, extra="") -> str:
    q, k, v = kw["q"], kw["k"], kw["v"]
    batch = f"batch={q.shape[:-2]} " if q.ndim > 2 else ""
    dv = f"dv={v.shape[-1]} " if v.shape[-1] != q.shape[-1] else ""  # a value width of its own, when it has one
    return (f"{batch}Nq={q.shape[-2]} Nk={k.shape[-2]} d={q.shape[-1]} {dv}"
            f"{q.dtype}{' causal' if causal else ''}{extra}")


def poison_keys(kw: dict, first: int) -> tuple[dict, dict]:
    """NaN in K and V rows >= first (never visible to a causal query when first >= Nq)."""
    clean = dict(kw, k=kw["k"].copy(), v=kw["v"].copy())
    clean["k"][..., first:, :] = 0.0
    clean["v"][..., first:, :] = 0.0
    poisoned = dict(kw, k=kw["k"].copy(), v=kw["v"].copy())
    poisoned["k"][..., first:, :] = np.nan
    poisoned["v"][..., first:, :] = np.nan
    return poisoned, clean


LARGE_LOGITS = ("scores near +-1e3: exp() of a raw score overflows to inf (or underflows to 0 in a row far below "
                "0, and 0/0 is NaN) unless each row's max is subtracted first")
# for the NumPy softmax of a whole array (exercises 01 and 02), where one max for every row is a plausible mistake
LARGE_LOGITS_ROWS = LARGE_LOGITS + ", each row its own: one max for the whole array leaves the rows far below it at 0/0"


def large_logits(rng, nq, nk, d, batch=()) -> dict:
    """float64 q, k, v whose scaled scores (scale 1/sqrt(d)) are each row's offset, +-800 to +-1200,
    plus O(1) terms.

    k[..., 0] = 1 and q[..., 0] = offset * sqrt(d) add the same offset to every score of a row, so
    the softmax (and the output) is as well conditioned as with plain random inputs, while exp() of
    a raw score overflows (> 709.8) or underflows to 0 in float64 and float32 alike. (Scaling q up
    instead makes the output depend on a few large, rounded scores: a correct float32 solution
    then misses a float32 tolerance now and then.)
    """
    kw = qkv(rng, nq, nk, d, batch=batch)
    offset = rng.uniform(800.0, 1200.0, (*batch, nq)) * rng.choice([-1.0, 1.0], (*batch, nq))  # (..., Nq)
    kw["k"][..., 0] = 1.0
    kw["q"][..., 0] = offset * np.sqrt(d)
    return kw
FIRST_KEYS_WHY = ("every score is raised by {offset:g} and the first keys of every other row{where} score {boost:g} "
                  "above the rest: a running max that is not carried from block to block makes exp(m_old - m_new) "
                  "overflow at the next key block, and a max never subtracted makes exp(s) overflow")


def boost_first_keys(kw: dict, starts, count: int, boost: float, offset: float) -> dict:
    """``kw`` with every score raised by ``offset`` and keys start..start+count-1 (for each start)
    scoring ``boost`` above the others in every other row: q[..., 1] = 1 and k[..., 1] = offset /
    scale for all; even rows q[..., 0] = 1 (odd rows 0) and the boosted keys' k[..., 0] = boost /
    scale. Each large term sits in one product whose factors are exact in float32 and tf32 (for
    d = 16), so a GPU's tf32 dot keeps them; in a boosted row the softmax falls almost wholly on the
    boosted keys, whose scores differ by O(1) terms as in any random case.
    What each mistake then gives: a running max not carried overflows exp(m_old - m_new) in the
    boosted rows only (NaN there, the other rows right); a max never subtracted overflows exp(s) in
    every row (the offset alone is past exp's range), so the two are told apart."""
    kw = dict(kw)
    q, k = kw["q"].copy(), kw["k"].copy()
    scale = kw.get("scale") or 1.0 / np.sqrt(q.shape[-1])
    q[..., 0] = 0.0
    q[..., ::2, 0] = 1.0
    q[..., 1] = 1.0
    k[..., 1] = offset / scale
    for start in starts:
        k[..., start:start + count, 0] = boost / scale
    kw["q"], kw["k"] = q, k
    return kw


POISON_WHY = ("causal: every key from row {first} on is past the last query row, and those K/V rows "
              "hold NaN; a causal tiled loop skips fully masked tiles, so it never reads them")


# ----------------------------------------------------------------------------- ex01 naive
CHUNK_ROWS = 32  # query rows per reference call in the large cases (keeps the parent's memory small)


def naive_reference(q, k, v, causal=False, scale=None, **blocks):
    from flashlab.reference import naive_attention

    if causal or q.shape[-2] * k.shape[-2] <= 1 << 22:
        return naive_attention(q, k, v, causal=causal, scale=scale)
    return np.concatenate([naive_attention(q[..., i:i + CHUNK_ROWS, :], k, v, scale=scale)  # rows are independent
                           for i in range(0, q.shape[-2], CHUNK_ROWS)], axis=-2)


def naive_public(rng):
    cases = []
    for nq, nk, d, dv, dtype, causal in [(8, 8, 4, 4, "float64", False), (5, 9, 8, 6, "float32", False),
                                         (6, 6, 4, 4, "float64", True)]:
        kw = dict(qkv(rng, nq, nk, d, dv, dtype=dtype), causal=causal)
        cases.append(Case(attn_label(kw, causal), kw))
    return cases


def naive_hidden(rng):
    cases = []
    for causal, (nq, nk) in [(False, (1, 1)), (False, (23, 7)), (True, (17, 5)), (True, (4, 19))]:
        batch = tuple(rng.integers(1, 4, size=int(rng.integers(0, 3))))
        kw = dict(qkv(rng, nq, nk, int(rng.choice([4, 8, 16])), int(rng.integers(1, 9)), batch,
                       random_dtype(rng)), causal=causal)
        cases.append(Case(attn_label(kw, causal), kw, why="ragged shapes, Nq != Nk, batch dims"))
    kw = dict(large_logits(rng, 12, 10, 16), causal=False)
    cases.append(Case(attn_label(kw, extra=" large logits"), kw, why=LARGE_LOGITS_ROWS))
    kw = dict(qkv(rng, 9, 11, 8), causal=bool(rng.integers(2)), scale=float(rng.uniform(0.05, 2.0)))
    cases.append(Case(attn_label(kw, kw["causal"], f" scale={kw['scale']:.3f}"), kw,
                      why="an explicit scale replaces 1/sqrt(d)"))
    return cases


def naive_bytes_reference(nq, nk, d, dv=None, itemsize=2):
    from flashlab.traffic import naive_traffic

    return int(naive_traffic(nq, nk, d, dv=dv, itemsize=itemsize).total)


def naive_bytes_public(rng):
    return [Case("nq=4 nk=4 d=2", dict(nq=4, nk=4, d=2)),
            Case("nq=3 nk=5 d=4 dv=6 itemsize=4", dict(nq=3, nk=5, d=4, dv=6, itemsize=4))]


def naive_bytes_hidden(rng):
    return [Case(f"nq={a} nk={b} d={c} dv={e} itemsize={s}", dict(nq=a, nk=b, d=c, dv=e, itemsize=s))
            for a, b, c, e, s in (map(int, row) for row in zip(rng.integers(1, 5000, 5), rng.integers(1, 5000, 5),
                                     rng.choice([16, 64, 128], 5), rng.choice([16, 40, 128], 5),
                                     rng.choice([1, 2, 4], 5)))]


# ----------------------------------------------------------------------------- ex02 softmax
def x_cases(rng, shapes, scale=1.0, dtype=None):
    out = []
    for shape in shapes:
        dt = dtype or random_dtype(rng)
        out.append(randn(rng, *shape, dtype=dt, scale=scale))
    return out


def softmax_reference(x, chunk=None):
    from flashlab.softmax import safe_softmax

    return safe_softmax(x)


def softmax_public(rng):
    return [Case(f"x{x.shape} {x.dtype}", dict(x=x)) for x in x_cases(rng, [(3, 7), (2, 3, 5)])]


def softmax_hidden(rng):
    cases = [Case(f"x{x.shape} {x.dtype}", dict(x=x), why="random shapes")
             for x in x_cases(rng, [(int(rng.integers(1, 9)), int(rng.integers(1, 40))), (1, 1)])]
    for dt in ("float32", "float64"):
        x = x_cases(rng, [(4, 33)], scale=1000.0, dtype=dt)[0]
        cases.append(Case(f"x{x.shape} {dt} large logits", dict(x=x), why=LARGE_LOGITS_ROWS, hint=1))
    x = x_cases(rng, [(3, 12)])[0]
    x[:, ::3] = -np.inf
    cases.append(Case(f"x{x.shape} {x.dtype} with -inf entries", dict(x=x),
                      why="masked entries (-inf) get probability 0; the rest still sum to 1"))
    return cases


def online_public(rng):
    return [Case(f"x{x.shape} {x.dtype} chunk={c}", dict(x=x, chunk=c))
            for x, c in zip(x_cases(rng, [(2, 12), (3, 10)]), (4, 3))]


def online_hidden(rng):
    cases = []
    for n, chunk in [(int(rng.integers(5, 60)), 1), (int(rng.integers(5, 60)), int(rng.integers(2, 9))),
                     (7, 20)]:
        x = x_cases(rng, [(int(rng.integers(1, 5)), n)])[0]
        cases.append(Case(f"x{x.shape} {x.dtype} chunk={chunk}", dict(x=x, chunk=chunk),
                          why="ragged last chunk, chunk of 1, chunk longer than the row"))
    x = x_cases(rng, [(3, 40)], scale=1000.0, dtype="float64")[0]
    x[:, 30:] += 3000.0  # the max jumps in the last chunk: old sums must be rescaled
    cases.append(Case("x(3, 40) float64 large logits, max in the last chunk", dict(x=x, chunk=8),
                      why=LARGE_LOGITS + "; the running max changes late", hint=2))
    x = x_cases(rng, [(3, 24)], dtype="float64")[0] + np.array([[0.0], [-2000.0], [2000.0]])
    cases.append(Case("x(3, 24) float64 rows 2000 apart chunk=8", dict(x=x, chunk=8),
                      why="each row keeps its own running max: with one max shared by the rows, exp() of a row far "
                      "below it underflows to 0 and 0/0 is NaN", hint=1))
    return cases


def state(rng, rows, cols, dv, dtype, shift=0.0, empty=False):
    """(m, l, acc) of random scores (rows, cols) and values (cols, dv); ``empty``: rows that saw
    nothing (m = -inf, l = 0, acc = 0), True for all rows or a boolean mask (rows,)."""
    s = randn(rng, rows, cols, dtype=dtype, scale=3.0) + shift  # (rows, cols)
    v = randn(rng, cols, dv, dtype=dtype)  # (cols, dv)
    m = s.max(axis=-1)  # (rows,)
    p = np.exp(s - m[:, None])  # (rows, cols)
    l, acc = p.sum(axis=-1), p @ v  # (rows,), (rows, dv)
    empty = np.broadcast_to(np.asarray(empty, bool), (rows,))
    m[empty], l[empty], acc[empty] = -np.inf, 0.0, 0.0
    return m, l, acc


def combine_kwargs(a, b):
    return dict(m_a=a[0], l_a=a[1], acc_a=a[2], m_b=b[0], l_b=b[1], acc_b=b[2])


def combine_reference(m_a, l_a, acc_a, m_b, l_b, acc_b):
    from flashlab.softmax import combine_states

    return combine_states(m_a, l_a, acc_a, m_b, l_b, acc_b)


def combine_public(rng):
    return [Case("4 rows, dv=3, float64", combine_kwargs(state(rng, 4, 5, 3, "float64"),
                                                          state(rng, 4, 6, 3, "float64")))]


def combine_hidden(rng):
    dt = str(random_dtype(rng))
    return [
        Case(f"6 rows dv=5 {dt}", combine_kwargs(state(rng, 6, 7, 5, dt), state(rng, 6, 3, 5, dt))),
        Case("b's scores 500 above a's (float64)",
             combine_kwargs(state(rng, 3, 4, 2, "float64"), state(rng, 3, 4, 2, "float64", 500.0)),
             why="rescale each side by exp(m_side - m_new); never exp(m) alone", hint=1),
        Case("a is empty (m_a = -inf, l_a = 0)",
             combine_kwargs(state(rng, 3, 4, 2, "float64", empty=True), state(rng, 3, 4, 2, "float64")),
             why="a state that has seen nothing must leave the other unchanged, without NaN", hint=2),
        Case("rows empty in a, in b, and in both (float64)",
             combine_kwargs(state(rng, 4, 4, 2, "float64", empty=[True, False, True, False]),
                            state(rng, 4, 4, 2, "float64", empty=[False, True, True, False])),
             why="two empty states combine to an empty one (m = -inf, l = 0, acc = 0), not NaN: "
                 "exp(-inf - (-inf)) is NaN", hint=2),
    ]


# ----------------------------------------------------------------------------- ex03/04 tiled
def tiled_public(rng):
    cases = []
    for nq, nk, bq, bk, dtype, causal in [(32, 32, 16, 16, "float64", False), (37, 53, 16, 8, "float32", False),
                                          (24, 24, 8, 8, "float64", True)]:
        kw = dict(qkv(rng, nq, nk, 8, dtype=dtype), causal=causal, block_q=bq, block_k=bk)
        cases.append(Case(attn_label(kw, causal, f" blocks {bq}x{bk}"), kw))
    return cases


def tiled_hidden(rng):
    kw = dict(boost_first_keys(qkv(rng, int(rng.integers(9, 30)), int(rng.integers(33, 60)), 8), [0], 4, 1000.0, 800.0),
              causal=False, block_q=8, block_k=8)
    cases = [Case(attn_label(kw, extra=" blocks 8x8, all +800, keys 0-3 +1000 in even rows"), kw,
                  why=FIRST_KEYS_WHY.format(where="", boost=1000, offset=800))]  # float64: exp overflows past 709.8
    for causal, (nq, nk) in [(False, (int(rng.integers(1, 70)), int(rng.integers(1, 70)))),
                             (True, (int(rng.integers(30, 70)), int(rng.integers(5, 29)))),
                             (True, (int(rng.integers(5, 29)), int(rng.integers(30, 70)))),
                             (False, (5, 3))]:
        bq, bk = (int(b) for b in rng.choice([4, 8, 16, 32, 128], 2))
        if (nq, nk) == (5, 3):  # on every seed: blocks many times the sequence's length
            bq, bk = 128, 32
        batch = tuple(int(b) for b in rng.integers(1, 3, size=int(rng.integers(0, 2))))
        kw = dict(qkv(rng, nq, nk, int(rng.choice([4, 8])), int(rng.integers(2, 9)), batch, random_dtype(rng)),
                  causal=causal, block_q=bq, block_k=bk)
        cases.append(Case(attn_label(kw, causal, f" blocks {bq}x{bk}"), kw,
                          why="ragged last tiles, Nq != Nk, blocks larger than the sequence"))
    kw = dict(large_logits(rng, 40, 40, 16), causal=False, block_q=16, block_k=16)
    cases.append(Case(attn_label(kw, extra=" large logits"), kw, why=LARGE_LOGITS))
    kw = dict(qkv(rng, int(rng.integers(9, 40)), int(rng.integers(9, 40)), 8), causal=bool(rng.integers(2)),
              scale=float(rng.uniform(0.05, 0.3)), block_q=8, block_k=8)
    cases.append(Case(attn_label(kw, kw["causal"], f" scale={kw['scale']:.3f} blocks 8x8"), kw, why=SCALE_WHY))
    cases.append(large_nk_case(rng, dict))
    make = lambda nq, nk, bq, bk: dict(qkv(rng, nq, nk, 8), causal=True, block_q=bq, block_k=bk)  # noqa: E731
    cases += [poisoned_causal_case(rng, make), poisoned_causal_case(rng, make, tail=LONG_TAIL)]
    return cases + [long_row_case(rng, dict)]  # last: a K-sized temporary (a NaN mask of K) fails it first


SCALE_WHY = "an explicit scale replaces 1/sqrt(d): use the scale argument when it is given"
LONG_TAIL = 131072  # keys past the last query row in the work check


def large_nk_case(rng, extend, backward=False) -> Case:
    """IO-awareness: Nq=512 (256 backward), Nk=65536, d=4 float32, blocks 64x256.

    One Nq x Nk float32 array is 128 MiB (64 MiB backward); one block_q x Nk array (a few query rows
    at a time with a full-row softmax) is 16 MiB; a block_q x block_k tile is 64 KiB. The limit,
    10 MiB of extra resident memory (20 MiB backward), leaves room for float64 copies of the
    inputs (4 MiB for k and v) and of dK, dV, and for the tiles, and none for a block_q x Nk array
    (the backward needs several: S, P, dP, dS). Measured from outside the learner's process; the
    solutions use 0-2 MiB forward and 4-5 MiB backward (tests/test_grading.py).
    """
    nq, nk, bq, bk = (256 if backward else 512), 65536, 64, 256
    if backward:
        return backward_case(rng, nq, nk, 4, 4, bq, bk, False, "float32", max_peak=20 << 20,
                             extra=" (memory)", why=MEMORY_WHY)
    kw = extend(qkv(rng, nq, nk, 4, dtype="float32"), causal=False, block_q=bq, block_k=bk)
    return Case(attn_label(kw, extra=f" blocks {bq}x{bk} (memory)"), kw, max_peak_bytes=10 << 20, why=MEMORY_WHY)


MEMORY_WHY = ("IO-awareness: a tiled loop keeps (block_q x block_k) tiles; it never builds an Nq x Nk score "
              "matrix, nor a block_q x Nk one (a few query rows against every key)")


LONG_ROW_NK = 1 << 20  # keys in the long-row case: one row of Nk float64 scores is 8 MiB


def long_row_case(rng, extend, backward=False) -> Case:
    """IO-awareness for one query row: Nq=8, Nk=2^20, d=4 float64, blocks 8x512, limit 3 MiB.

    The large-Nk case above cannot see a loop that takes one query row at a time against every key
    with a plain softmax (no key tiles, no online softmax): a 1 x Nk row there is 256 KiB against a
    10 MiB limit. Here one row of Nk float64 scores is 8 MiB, over the limit by itself, while a
    block_q x block_k tile is 32 KiB. The backward's limit adds dK and dV (64 MiB), which the
    learner returns. The solutions add 0 MiB forward and 63.5 MiB backward (a one-query-row loop
    25 and 127 MiB). A copy of K or V (32 MiB each) is over the limit too: tiles are sliced out of
    them, never copied whole. Possible since wire.encode stopped copying arrays: the digest of each
    input after the call added a copy of K to every peak.
    """
    nq, nk, bq, bk, limit = 8, LONG_ROW_NK, 8, 512, 3 << 20
    if backward:  # dK and dV (32 MiB each) are the learner's to hold: the limit adds them
        case = backward_case(rng, nq, nk, 4, 4, bq, bk, False, "float64", extra=" (memory, one row)",
                             why=LONG_ROW_WHY)
        held = case.kwargs["k"].nbytes + case.kwargs["v"].nbytes
        return dataclasses.replace(case, max_peak_bytes=held + limit, peak_outputs=held)
    kw = extend(qkv(rng, nq, nk, 4, dtype="float64"), causal=False, block_q=bq, block_k=bk)
    return Case(attn_label(kw, extra=f" blocks {bq}x{bk} (memory, one row)"), kw, max_peak_bytes=limit,
                why=LONG_ROW_WHY)


LONG_ROW_WHY = ("IO-awareness with few query rows and many keys: a tiled loop walks the keys block_k at a time; it "
                "never holds a row of Nk scores for a query (one query row against every key)")


def poisoned_causal_case(rng, make, tail: int = 0) -> Case:
    """Causal case whose K/V rows from Nq on hold NaN (no query row sees them).

    block_k divides Nq, so the first skippable key block starts exactly at Nq; block_q = 2 block_k
    does not divide Nq, so the last query block is ragged. A loop that skips one tile too late
    (``k0 > q1`` instead of ``k0 > q1 - 1``) or that ignores the ragged end (``q0 + block_q - 1``
    as the block's last row) loads a poisoned tile and its output turns NaN.
    make(nq, nk, block_q, block_k) -> the keyword arguments (with "k" and "v").
    With ``tail``, K/V get ``tail`` more poisoned rows and the case allows at most 20x the CPU time
    of the case before it: a loop that strips the NaN from a copy and still computes every tile
    spends ~1000x more (the check is on work done, measured from outside the learner's process).
    """
    bk = int(rng.choice([4, 8]))
    odd = int(2 * rng.integers(1, 4) + 1)
    nq = bk * (7 if tail else odd)  # an odd multiple of block_k; the work check's the largest (its cost scales with Nq)
    kw = make(nq, nq + 3 * bk + tail, 2 * bk, bk)
    poisoned, clean = poison_keys(kw, nq)
    label = attn_label(kw, True, f" blocks {2 * bk}x{bk}, K/V poisoned from row {nq}")
    if not tail:
        return Case(label, poisoned, clean, why=POISON_WHY.format(first=nq))
    return Case(label, poisoned, clean, max_cpu_ratio=20.0, why=POISON_WHY.format(first=nq)
                + f"; here {tail} more such keys: the time must not grow with them")


def tile_skip_reference(i, j, block_q, block_k, nq):
    from flashlab.tiled import causal_tile_skipped

    return bool(causal_tile_skipped(i, j, block_q, block_k, nq))


def tile_skip_public(rng):
    rows = [(0, 0, 4, 4, 16), (0, 1, 4, 4, 16), (2, 1, 4, 4, 16), (1, 3, 8, 4, 12), (0, 1, 8, 7, 16)]
    return [Case(f"i={i} j={j} block_q={bq} block_k={bk} nq={nq}", dict(i=i, j=j, block_q=bq, block_k=bk, nq=nq),
                 hint=2 if (i + 1) * bq > nq else None) for i, j, bq, bk, nq in rows]  # a ragged block: hint 2


def tile_skip_why(i, j, bq, bk, nq) -> tuple[str, int]:
    """(why, hint) of one causal_tile_skipped case, from what is true of it: a ragged query block
    points at hint 2 (its last row is nq - 1), a full one at hint 1."""
    last = min((i + 1) * bq, nq) - 1
    block = (f"ragged last query block (rows {i * bq}..{last}: nq = {nq} ends it before {(i + 1) * bq - 1})"
             if (i + 1) * bq > nq else f"full query block (rows {i * bq}..{last})")
    sizes = "block_q == block_k" if bq == bk else "block_q != block_k"
    return (f"{block}, {sizes}: its last query row is {last}, the tile's first key column {j * bk}",
            2 if (i + 1) * bq > nq else 1)


def tile_skip_hidden(rng):
    cases = []
    for _ in range(10):
        bq, bk = (int(b) for b in rng.choice([1, 3, 4, 8, 16, 64], 2))
        nq = int(rng.integers(1, 200))
        i = int(rng.integers(0, -(-nq // bq)))
        j = int(rng.integers(0, max(1, (i + 2) * bq // bk + 1)))
        why, hint = tile_skip_why(i, j, bq, bk, nq)
        cases.append(Case(f"i={i} j={j} block_q={bq} block_k={bk} nq={nq}",
                          dict(i=i, j=j, block_q=bq, block_k=bk, nq=nq), why=why, hint=hint))
    for _ in range(3):  # j * block_k equal to the last query row (computed), then one block later (skipped)
        bk = int(rng.choice([2, 3, 5]))
        last = bk * int(rng.integers(1, 40))
        bq = int(rng.choice([4, 8, 16]))
        i = last // bq
        nq = last + 1 if (i + 1) * bq - 1 != last else last + 1 + int(rng.integers(0, 50))
        for j in (last // bk, last // bk + 1):
            cases.append(Case(f"i={i} j={j} block_q={bq} block_k={bk} nq={nq}", dict(i=i, j=j, block_q=bq,
                              block_k=bk, nq=nq), why="boundary: the tile's first key column is the "
                              "block's last query row (computed) or one past it (skipped)"
                              + ("; the query block is ragged (nq ends it)" if (i + 1) * bq > nq else ""),
                              hint=2 if (i + 1) * bq > nq else 1))
    return cases


def count_tiles_reference(nq, nk, block_q, block_k, causal):
    from flashlab.tiled import causal_tile_skipped, num_blocks

    n_i, n_j = num_blocks(nq, block_q), num_blocks(nk, block_k)
    return sum(not (causal and causal_tile_skipped(i, j, block_q, block_k, nq))
               for i in range(n_i) for j in range(n_j))


def count_tiles_why(nq, nk, bq, bk, causal) -> str:
    """What a causal count_computed_tiles case probes, from what is true of it: a key block that
    starts at a query block's last row (a rule with >= for > skips it), and a ragged last query block
    with a key block starting past nq - 1 but not past (i + 1) * block_q - 1 (a rule that does not
    clip the last row to nq computes it)."""
    if not causal:
        return ""
    n_i, starts = -(-nq // bq), range(0, nk, bk)
    at_last = [i for i in range(n_i) if min((i + 1) * bq, nq) - 1 in starts]
    why = []
    if at_last:
        last = min((at_last[0] + 1) * bq, nq) - 1
        why.append(f"the key block starting at {last} starts at query block {at_last[0]}'s last row, so it is "
                   "computed (that row sees its first key)")
    i = n_i - 1
    past = [c for c in starts if nq - 1 < c <= (i + 1) * bq - 1]
    if past:
        why.append(f"the last query block is ragged (rows {i * bq}..{nq - 1}): its last row is nq - 1 = {nq - 1}, "
                   f"not (i + 1) * block_q - 1 = {(i + 1) * bq - 1}, so the key block starting at {past[0]} is "
                   "skipped")
    return "; ".join(why)


def count_tiles_cases(rows):
    return [Case(f"nq={a} nk={b} block_q={c} block_k={d} causal={e}",
                 dict(nq=a, nk=b, block_q=c, block_k=d, causal=e), why=count_tiles_why(a, b, c, d, e),
                 hint=2 if count_tiles_why(a, b, c, d, e) else None) for a, b, c, d, e in rows]


def count_tiles_hidden(rng):
    """Random shapes with blocks of 16-64, then two where a key block starts exactly at a query
    block's last row (block_k not dividing block_q): a skip rule one off (>= for >) counts them wrong,
    where blocks that divide each other almost never put the two on one index; then a ragged last
    query block (rows 8-9 of 8-15) with a key block at 12, which a last row not clipped to nq computes.
    Each causal case's why says which of these it holds (count_tiles_why)."""
    rows = [(int(a), int(b), int(c), int(d), bool(e)) for a, b, c, d, e in zip(
        rng.integers(1, 300, 6), rng.integers(1, 300, 6), rng.choice([16, 32, 64], 6),
        rng.choice([16, 32, 64], 6), (1, 1, 1, 0, 1, 1))]
    bk = int(rng.choice([3, 5, 7]))
    rows += [(16, 16, 8, 7, True), (int(rng.integers(40, 200)), int(rng.integers(40, 200)), 2 * bk + 1, bk, True),
             (10, 16, 8, 4, True)]
    return count_tiles_cases(rows)


# ----------------------------------------------------------------------------- ex05 traffic
def fa2_bytes_reference(nq, nk, d, dv=None, block_q=64, block_k=64, causal=False, itemsize=2,
                         stat_itemsize=4):
    from flashlab.traffic import fa2_forward_traffic

    return int(fa2_forward_traffic(nq, nk, d, dv=dv, block_q=block_q, block_k=block_k, causal=causal,
                                   itemsize=itemsize, stat_itemsize=stat_itemsize).total)


def fa2_case(nq, nk, d, dv, bq, bk, causal, itemsize):
    kw = dict(nq=nq, nk=nk, d=d, dv=dv, block_q=bq, block_k=bk, causal=causal, itemsize=itemsize,
              stat_itemsize=4)
    return Case(" ".join(f"{k}={v}" for k, v in kw.items() if k != "stat_itemsize"), kw)


def fa2_bytes_public(rng):
    return [fa2_case(128, 128, 64, 64, 64, 64, False, 2),
            dataclasses.replace(fa2_case(100, 70, 32, 16, 32, 16, True, 2), hint=2)]  # ragged, causal


def fa2_bytes_hidden(rng):
    """Random shapes, then a causal one whose last query row is the first key of a key block (Nq - 1 a
    multiple of block_k, Nk past it): a skip rule one off (>= for >) drops that block's K and V reads,
    where random shapes almost never put the two on one index."""
    cases = [fa2_case(int(rng.integers(1, 3000)), int(rng.integers(1, 3000)), int(rng.choice([16, 64, 128])),
                      int(rng.choice([16, 40, 128])), int(rng.choice([16, 64, 128])),
                      int(rng.choice([16, 32, 64])), bool(c), int(rng.choice([2, 4])))
             for c in (0, 1, 0, 1, 1, 0)]
    block_k = int(rng.choice([16, 32]))
    nq = block_k * int(rng.integers(2, 40)) + 1
    case = fa2_case(nq, nq + int(rng.integers(block_k, 500)), 64, 64, int(rng.choice([16, 64, 128])), block_k, True, 2)
    return cases + [dataclasses.replace(case, why="the last query row sits on the first key of a key block: that "
                                        "block is read (the row sees its key), and the blocks past it are skipped",
                                        hint=2)]


# ----------------------------------------------------------------------------- ex06-08 Triton
def add_reference(x, y):
    return x + y


def add_cases(rng, sizes, dtypes, why="", hint=None):
    return [Case(f"n={n} {dt}", dict(x=randn(rng, n, dtype=dt), y=randn(rng, n, dtype=dt)), why=why, hint=hint)
            for n, dt in zip(sizes, dtypes)]


def row_softmax_reference(x):
    from flashlab.softmax import safe_softmax

    return safe_softmax(x.astype(np.float64)).astype(x.dtype)


def row_softmax_cases(rng, shapes, dtypes, scale=1.0, why=""):
    return [Case(f"x{shape} {dt}{' large logits' if scale > 1 else ''}",
                 dict(x=randn(rng, *shape, dtype=dt, scale=scale)), why=why)
            for shape, dt in zip(shapes, dtypes)]


def flash_reference(q, k, v, causal=False):
    from flashlab.reference import naive_attention

    return naive_attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                           causal=causal).astype(q.dtype)


def flash_case(rng, z, nq, nk, d, dtype, causal=None, q_scale=1.0, why=""):
    kw = qkv(rng, nq, nk, d, batch=(z,), dtype=dtype, q_scale=q_scale)
    if causal is not None:
        kw["causal"] = causal
    return Case(attn_label(kw, bool(causal), " large logits" if q_scale > 1 else ""), kw, why=why)


def flash_hidden(rng, causal):
    cases = []
    if causal:  # first: a kernel that loads fully masked key blocks fails here, after one launch
        cases.append(Case("Nq=128 causal, K/V poisoned past the key block of row 127 (built from your BLOCK_N)", {},
                          build=poison_past_128_case, hint=1))
        cases.append(Case("ragged causal case, K/V poisoned past the last query row (built from your BLOCK_M, "
                          "BLOCK_N)", {}, build=ragged_poison_case, hint=1))
        cases.append(flash_case(rng, 1, int(rng.integers(40, 60)), int(rng.integers(17, 30)), 16, "float32",
                                True, why="causal with Nq > Nk: rows past Nk see every key"))
    ragged = 16 * int(rng.integers(1, 3)) + int(rng.integers(1, 16))  # never a multiple of 16 (or of any BLOCK_M)
    cases += [flash_case(rng, 2, ragged, int(rng.integers(17, 50)), 16, "float32", causal,
                         why="ragged tiles (Nq not a multiple of BLOCK_M: masked loads, -inf for keys past N_K) in a "
                             "batch of 2 with Nq != Nk (the batch strides of q and k differ)"),
              flash_case(rng, 1, int(rng.integers(1, 16)), int(rng.integers(33, 60)), 32, "float16", causal,
                         why="float16 inputs, Nq < BLOCK_M")]
    # Large logits, well conditioned: each row's scores share an offset of +-800..1200 (see large_logits),
    # so exp() overflows without the max subtraction while a GPU's tf32 dot (10-bit mantissa) rounds
    # the offset identically across the row and stays within the float32 kernel tolerance.
    kw = {name: x.astype(np.float32) for name, x in large_logits(rng, 32, 24, 16, batch=(1,)).items()}
    if causal is not None:
        kw["causal"] = causal
    cases.append(Case(attn_label(kw, bool(causal), " large logits"), kw, why=LARGE_LOGITS,
                      tolerance={"float32": (1e-3, 1e-3)}))  # float32 scores near 1e3: ~1e-4 rounding
    return cases


def poison_past_128_case(blocks: dict, rng) -> Case:
    """Causal, Nq = 128, K/V NaN from round_up(128, BLOCK_N) on (row 128 for any BLOCK_N up to 128): the last
    query block ends at row 127, so the key blocks past the one holding key 127 are skipped; a loop bound one
    too far loads the poisoned block. A wider key block (BLOCK_N = 256) holds keys past 127 that the diagonal
    block must load, so the poison starts after it. ``blocks``: the constexprs of the learner's last launch."""
    bn = blocks.get("BLOCK_N")
    first = -(-128 // bn) * bn if isinstance(bn, int) and 128 < bn <= 1024 else 128
    nk = first + 32
    base = flash_case(rng, 1, 128, nk, 16, "float32", True)
    poisoned, clean = poison_keys(base.kwargs, first)
    return Case(f"Nq=128 Nk={nk} d=16 float32 causal, K/V poisoned from row {first}", poisoned, clean,
                why=POISON_WHY.format(first=first))


def ragged_poison_case(blocks: dict, rng) -> Case:
    """Causal, Nq = BLOCK_M + 1 (ragged), K/V NaN from round_up(Nq, BLOCK_N) on.

    The last query block's real rows end at Nq - 1, so a correct loop bound min(N_K, (start_m + 1) *
    BLOCK_M, N_Q) loads key blocks up to round_up(Nq, BLOCK_N) and no further; a bound without N_Q
    loads up to 2 BLOCK_M, past the poison when BLOCK_M > BLOCK_N. ``blocks``: the constexprs of the
    learner's last launch (unknown -> the poison starts at a multiple of 128, safe for any kernel).
    """
    bm, bn = blocks.get("BLOCK_M"), blocks.get("BLOCK_N")
    bm = bm if isinstance(bm, int) and 1 <= bm <= 256 else 64
    known = isinstance(bn, int) and 1 <= bn <= 256
    nq = bm + 1
    first = -(-nq // bn) * bn if known else -(-nq // 128) * 128
    nk = max(first, 2 * bm) + 16
    base = flash_case(rng, 1, nq, nk, 16, "float32", True)
    poisoned, clean = poison_keys(base.kwargs, first)
    return Case(f"Nq={nq} Nk={nk} d=16 float32 causal, K/V poisoned from row {first}", poisoned, clean,
                why=POISON_WHY.format(first=first) + "; the loop bound must stop at the last real query row "
                "(N_Q), not at the end of the ragged query block")


# ----------------------------------------------------------------------------- ex09/10 backward
def rowsum_reference(do, o):
    return (do * o).sum(axis=-1)  # D = rowsum(dO * O), FlashAttention-2 Algorithm 2 line 4


def rowsum_cases(rng, shapes):
    cases = []
    for shape in shapes:
        dt = random_dtype(rng)
        cases.append(Case(f"do, o {shape} {dt}", dict(do=randn(rng, *shape, dtype=dt),
                                                      o=randn(rng, *shape, dtype=dt))))
    return cases


def ds_reference(p, dp, D):
    return p * (dp - D[..., None])  # dS = P * (dP - D), Algorithm 2 line 16


def ds_cases(rng, shapes):
    """dS cases of the given (..., Nq, Nk) shapes: leading dims are batch dims, as the contract allows."""
    from flashlab.softmax import safe_softmax

    cases = []
    for shape in shapes:
        dt = random_dtype(rng)
        p = safe_softmax(randn(rng, *shape, dtype=dt, scale=2.0))
        dp = randn(rng, *shape, dtype=dt)
        cases.append(Case(f"p, dp {tuple(shape)} {dt}", dict(p=p, dp=dp, D=(p * dp).sum(axis=-1))))
    return cases


def backward_reference(q, k, v, o, lse, do, causal=False, scale=None, block_q=64, block_k=64):
    from flashlab.reference import naive_attention_backward

    if causal or q.shape[-2] * k.shape[-2] <= 1 << 22:
        return naive_attention_backward(q, k, v, do, causal=causal, scale=scale)
    dq, dk, dv = [], np.zeros(k.shape), np.zeros(v.shape)  # dK, dV: sums over query rows
    for i in range(0, q.shape[-2], CHUNK_ROWS):
        dq_i, dk_i, dv_i = naive_attention_backward(q[..., i:i + CHUNK_ROWS, :], k, v, do[..., i:i + CHUNK_ROWS, :],
                                                    scale=scale)
        dq.append(dq_i)
        dk += dk_i
        dv += dv_i
    return np.concatenate(dq, axis=-2), dk.astype(k.dtype), dv.astype(v.dtype)


def backward_case(rng, nq, nk, d, dv, bq, bk, causal, dtype, batch=(), why="", max_peak=None, extra="",
                  scale=None):
    from flashlab.reference import naive_attention

    kw = qkv(rng, nq, nk, d, dv, batch, dtype)
    step = nq if causal or nq * nk <= 1 << 22 else CHUNK_ROWS  # rows are independent without a mask
    parts = [naive_attention(kw["q"][..., r:r + step, :], kw["k"], kw["v"], causal=causal, scale=scale,
                             return_lse=True) for r in range(0, nq, step)]
    o = np.concatenate([p[0] for p in parts], axis=-2)  # (..., Nq, dv)
    lse = np.concatenate([p[1] for p in parts], axis=-1)  # (..., Nq)
    kw.update(o=o, lse=lse, do=randn(rng, *o.shape, dtype=dtype), causal=causal, block_q=bq, block_k=bk)
    if scale is not None:
        kw["scale"] = scale
        extra = f" scale={scale:.3f}{extra}"
    return Case(attn_label(kw, causal, f" blocks {bq}x{bk}{extra}"), kw, why=why, max_peak_bytes=max_peak)


def backward_public(rng):
    return [backward_case(rng, 16, 16, 8, 8, 8, 8, False, "float64"),
            backward_case(rng, 21, 13, 8, 4, 8, 4, True, "float64")]


def backward_hidden(rng):
    make = lambda nq, nk, bq, bk: backward_case(rng, nq, nk, 8, 8, bq, bk, True, "float64").kwargs  # noqa: E731
    return [
        backward_case(rng, int(rng.integers(1, 40)), int(rng.integers(1, 40)), 8, int(rng.integers(2, 9)),
                       int(rng.choice([4, 8, 16])), int(rng.choice([4, 8, 16])), False, "float64", (2,),
                       why="ragged tiles and batch dims"),
        backward_case(rng, int(rng.integers(25, 40)), int(rng.integers(5, 20)), 4, 4, 8, 4, True, "float64",
                       why="causal with Nq > Nk"),
        backward_case(rng, int(rng.integers(5, 20)), int(rng.integers(25, 40)), 8, 8, 4, 8, True, "float32",
                       why="causal with Nq < Nk, float32"),
        backward_case(rng, int(rng.integers(9, 30)), int(rng.integers(9, 30)), 8, 8, 8, 8, bool(rng.integers(2)),
                       "float64", scale=float(rng.uniform(0.05, 0.3)), why=SCALE_WHY),
        large_nk_case(rng, None, backward=True),
        poisoned_causal_case(rng, make),
        long_row_case(rng, None, backward=True),
    ]


def traffic_ratio(nq):
    from flashlab.traffic import fa2_forward_traffic, naive_traffic

    naive = naive_traffic(nq, 4096, 128, itemsize=2).total
    flash = fa2_forward_traffic(nq, 4096, 128, block_q=128, block_k=128, itemsize=2, stat_itemsize=4).total
    return naive / flash




# ----------------------------------------------------------------------------- ex07/08 forward kernel from its signature
def flash_scaled_reference(q, k, v, causal=False, scale=None):
    from flashlab.reference import naive_attention

    return naive_attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), causal=causal,
                           scale=scale).astype(q.dtype)


def flash_kernel_public(rng, causal):
    return [flash_case(rng, 1, 32, 32, 16, "float32", causal)]


def flash_kernel_hidden(rng, causal):
    """flash_hidden's cases with a GPU-safe large-logit case, then an explicit scale.

    On a GPU a float32 tl.dot rounds its inputs to tf32 (10-bit mantissa): large scores from
    scaled-up q would be off by far more than the tolerance. large_logits puts the large part of
    every score of a row in one shared term (q[..., 0] * k[..., 0] with k[..., 0] = 1), whose
    rounding is the same for every key and cancels in the softmax: with tf32-rounded q and k the
    float64 result stays within 1e-2 (checked on 40 seeds, both causal settings).
    """
    cases = [c for c in flash_hidden(rng, causal) if "large logits" not in c.label]
    kw = large_logits(rng, 32, 24, 16, batch=(1,))
    kw["q"][..., 0] /= 8.0  # row offsets of +-100 to +-150: exp overflows float32 (past 88.7) all the same,
    # and float32 rounding of the dot (about offset * 2**-24 per term) stays far inside the tolerance
    kw = {name: t.astype(np.float32) for name, t in kw.items()}
    kw["causal"] = bool(causal)
    cases.append(Case(attn_label(kw, bool(causal), " large logits"), kw, why=LARGE_LOGITS))
    kw = dict(qkv(rng, int(rng.integers(17, 40)), int(rng.integers(17, 40)), 16, batch=(1,), dtype="float32"),
              causal=bool(causal), scale=float(rng.uniform(0.05, 0.5)))
    cases.append(Case(attn_label(kw, bool(causal), f" scale={kw['scale']:.3f}"), kw,
                      why="an explicit scale replaces 1/sqrt(d)"))
    nk = int(rng.integers(130, 160))  # more than one key block for any BLOCK_N up to 128
    nq = nk if causal else int(rng.integers(17, 40))  # causal: rows past the first key block exist
    kw = dict(boost_first_keys(qkv(rng, nq, nk, 16, batch=(1,), dtype="float32"), [0], 8, 128.0, 100.0),
              causal=bool(causal))
    cases.append(Case(attn_label(kw, bool(causal), " all +100, keys 0-7 +128 in even rows"), kw,
                      why=FIRST_KEYS_WHY.format(where="", boost=128, offset=100)))
    if causal:  # the causal exercise's kernel keeps its non-causal path
        cases.append(flash_case(rng, 1, int(rng.integers(17, 40)), int(rng.integers(17, 40)), 16, "float32", False,
                                why="causal=False: the same kernel without the mask and with every key block"))
    return cases


# ----------------------------------------------------------------------------- ex12 online softmax kernel
def online_kernel_reference(x, block_n=32):
    return row_softmax_reference(x)


def online_kernel_cases(rng, rows, why="", hint=None):
    """rows: (M, N, block_n, dtype, scale, leading -inf columns)."""
    cases = []
    for m, n, block_n, dtype, scale, masked in rows:
        x = randn(rng, m, n, dtype="float64", scale=scale)
        x[:, :masked] = -np.inf
        label = f"x({m}, {n}) {dtype} block_n={block_n}" + (" large logits" if scale > 1 else "")
        label += f", columns 0-{masked - 1} -inf" if masked else ""
        cases.append(Case(label, dict(x=x.astype(dtype), block_n=block_n), why=why, hint=hint))
    return cases


def online_kernel_public(rng):
    return online_kernel_cases(rng, [(3, 100, 32, "float32", 1.0, 0)])


def online_kernel_hidden(rng):
    n = int(rng.integers(33, 200))
    return (online_kernel_cases(rng, [(2, n, 16, "float32", 1.0, 0), (3, int(rng.integers(1, 16)), 16, "float16", 1.0, 0)],
                                "a ragged last block; a row shorter than one block")
            + online_kernel_cases(rng, [(2, int(rng.integers(260, 400)), 64, "float16", 1.0, 0)],
                                  "float16 rows of several blocks: loads converted to float32, the store in float16")
            + [offset_row_case(rng), boosted_row_case(rng)]  # before the large logits: each mistake fails alone
            + online_kernel_cases(rng, [(2, 150, 16, "float32", 300.0, 0)], LARGE_LOGITS)
            + online_kernel_cases(rng, [(2, 70, 16, "float32", 1.0, 20)],
                                  "the first block is all -inf: the running max is still -inf after it, and "
                                  "exp(-inf - (-inf)) is NaN unless that case is guarded", hint=2)
            + [strided_row_case(rng, 100, 16)]
            + [Case(f"x(2, 40) float32 block_n={bn}", dict(x=randn(rng, 2, 40, dtype="float32"), block_n=bn),
                    why="block_n must be a power of two >= 16: anything else is refused with a ValueError naming "
                        "block_n", raises=("ValueError", "block_n")) for bn in (24, 8)])


def strided_row_case(rng, n: int, block_n: int | None = None) -> Case:
    """Rows 9 elements further apart than their length (x is a column slice of a wider array, -inf
    between its rows): the kernel must step from row to row by x.stride(0), and write out's rows by
    out.stride(0), which differs from x's. A kernel that steps x's rows by their length reads the
    -inf: its softmax comes out wrong but finite, which names that mistake (NaN there would look
    like rows never written)."""
    kw = dict(x=randn(rng, 3, n, dtype="float32"))
    if block_n is not None:
        kw["block_n"] = block_n
    label = f"x(3, {n}) float32" + (f" block_n={block_n}" if block_n else "") + ", x.stride(0) = {}".format(n + 9)
    return Case(label, kw, row_padding={"x": 9},
                why="rows further apart than their length (a column slice of a wider array): step by x.stride(0) "
                    "for x and by out.stride(0) for out")


def offset_row_case(rng) -> Case:
    """x whose rows are each shifted whole by 200-300 (either sign): exp(x) overflows float32 unless
    the row max is subtracted, while a running max that is not carried is harmless (every block of a
    row shares the shift), so the two mistakes fail on different cases."""
    x = randn(rng, 3, 90, dtype="float64") + (rng.uniform(200.0, 300.0, (3, 1)) * rng.choice([-1.0, 1.0], (3, 1)))
    return Case("x(3, 90) float32 block_n=16, each row shifted by 200-300", dict(x=x.astype("float32"), block_n=16),
                why="every entry of a row is shifted by 200-300: exp() overflows float32 (past 88.7) unless the row "
                    "max is subtracted")


def boosted_row_case(rng) -> Case:
    """x whose first block of each row lies 120 above the rest: a running max not carried from block to
    block overflows exp(m_old - m_new) in float32 (past 88.7)."""
    x = randn(rng, 4, 100, dtype="float64") + 100.0  # past exp's float32 range unless the max is subtracted
    x[::2, :16] += 120.0
    return Case("x(4, 100) float32 block_n=16, all +100, columns 0-15 of rows 0 and 2 +120 more", dict(x=x.astype("float32"),
                                                                                   block_n=16),
                why="the first block of every other row lies 120 above the rest: a running max that is not carried "
                    "from block to block makes exp(m_old - m_new) overflow at the next block")


# ----------------------------------------------------------------------------- ex13 backward kernel (dK, dV)
def dkdv_reference(q, k, v, o, lse, do, causal=False, scale=None):
    from flashlab.reference import naive_attention_backward

    f64 = [t.astype(np.float64) for t in (q, k, v, do)]
    _, dk, dv = naive_attention_backward(*f64, causal=causal, scale=scale)
    return dk.astype(k.dtype), dv.astype(v.dtype)


def dq_reference(q, k, v, o, lse, do, causal=False, scale=None):
    from flashlab.reference import naive_attention_backward

    f64 = [t.astype(np.float64) for t in (q, k, v, do)]
    return naive_attention_backward(*f64, causal=causal, scale=scale)[0].astype(q.dtype)


def dkdv_case(rng, z, nq, nk, d, causal, scale=None, why=""):
    from flashlab.reference import naive_attention

    kw = qkv(rng, nq, nk, d, batch=(z,))  # float64, then float32 for the kernel
    o, lse = naive_attention(kw["q"], kw["k"], kw["v"], causal=causal, scale=scale, return_lse=True)
    kw = {name: t.astype(np.float32) for name, t in dict(kw, o=o, lse=lse, do=randn(rng, z, nq, d)).items()}
    kw.update(causal=causal) if scale is None else kw.update(causal=causal, scale=scale)
    extra = "" if scale is None else f" scale={scale:.3f}"
    return Case(attn_label(kw, causal, extra), kw, why=why)


def multi_block_backward_case(blocks: dict, rng) -> Case:
    """Non-causal, Nq = 3 BLOCK_M + 5 and Nk = 3 BLOCK_N + 5 of the learner's last launch (unknown:
    64): each program's loop runs over several blocks, so an accumulator that is overwritten instead
    of added to (dk = ... for dk += ...) keeps only the last block and fails here."""
    bm, bn = blocks.get("BLOCK_M"), blocks.get("BLOCK_N")
    bm = bm if isinstance(bm, int) and 16 <= bm <= 128 else 64
    bn = bn if isinstance(bn, int) and 16 <= bn <= 128 else 64
    case = dkdv_case(rng, 1, 3 * bm + 5, 3 * bn + 5, 16, False)
    return dataclasses.replace(case, why=(f"several blocks per program with your tiles (BLOCK_M={bm}, BLOCK_N={bn}): "
                                          "each loop must add every block into its accumulator"))


def dkdv_public(rng):
    return [dkdv_case(rng, 1, 32, 32, 16, False), dkdv_case(rng, 1, 32, 32, 16, True)]


def dkdv_hidden(rng):
    return [dkdv_case(rng, 2, int(rng.integers(17, 45)), int(rng.integers(17, 45)), 16, False,
                      why="ragged query and key blocks, Nq != Nk"),
            dkdv_case(rng, 1, int(rng.integers(35, 50)), int(rng.integers(17, 30)), 16, True,
                      why="causal with Nq > Nk"),
            dkdv_case(rng, 1, int(rng.integers(17, 30)), int(rng.integers(35, 50)), 32, True,
                      why="causal with Nq < Nk: the last key blocks see no query row (dK = dV = 0 there)"),
            dkdv_case(rng, 1, 24, 40, 16, False, scale=float(rng.uniform(0.05, 0.5)),
                      why="an explicit scale replaces 1/sqrt(d)"),
            Case("several blocks per program (Nq, Nk built from your BLOCK_M, BLOCK_N)", {},
                 build=multi_block_backward_case),
            dkdv_case(rng, 1, int(rng.integers(129, 161)), int(rng.integers(129, 161)), 16, False,
                      why="more than 128 query rows and keys: tiles of at most 128 (BLOCK_M, BLOCK_N), so each "
                          "kernel's loop walks several blocks")]


# ----------------------------------------------------------------------------- ex14 split-KV decode
def split_bounds(nk, num_splits):
    """[(lo, hi)] of each split: ceil(nk / num_splits) keys each, the last ones possibly short or empty."""
    per = -(-nk // num_splits)
    return [(min(s * per, nk), min((s + 1) * per, nk)) for s in range(num_splits)]


def partials_reference(q, k, v, num_splits, scale=None):
    z, nk, d = k.shape
    scale = 1.0 / np.sqrt(d) if scale is None else scale
    o_part = np.zeros((z, num_splits, v.shape[-1]))
    lse_part = np.full((z, num_splits), -np.inf)
    for s, (lo, hi) in enumerate(split_bounds(nk, num_splits)):
        if hi > lo:
            scores = scale * np.einsum("zd,znd->zn", q.astype(np.float64), k[:, lo:hi].astype(np.float64))
            m = scores.max(-1, keepdims=True)  # (Z, 1)
            p = np.exp(scores - m)
            o_part[:, s] = np.einsum("zn,znd->zd", p, v[:, lo:hi].astype(np.float64)) / p.sum(-1, keepdims=True)
            lse_part[:, s] = m[:, 0] + np.log(p.sum(-1))
    return o_part.astype(np.float32), lse_part.astype(np.float32)


def partials_case(rng, z, nk, d, num_splits, dtype, scale=None, why=""):
    kw = dict(q=randn(rng, z, d, dtype=dtype), k=randn(rng, z, nk, d, dtype=dtype),
              v=randn(rng, z, nk, d, dtype=dtype), num_splits=num_splits)
    if scale is not None:
        kw["scale"] = scale
    empty = sum(hi == lo for lo, hi in split_bounds(nk, num_splits))
    label = f"Z={z} Nk={nk} d={d} {dtype} num_splits={num_splits}" + (f" ({empty} empty)" if empty else "")
    return Case(label + ("" if scale is None else f" scale={scale:.3f}"), kw, why=why)


def partials_public(rng):
    return [partials_case(rng, 2, 64, 16, 4, "float32")]


def partials_hidden(rng):
    return [partials_case(rng, 2, int(rng.integers(40, 120)), 32, 3, "float32",
                          why="splits that are not a multiple of BLOCK_N keys"),
            dataclasses.replace(partials_case(rng, 1, 9, 16, 4, "float32", why="ceil(9 / 4) = 3 keys per split: "
                                              "the fourth split is empty (o = 0, lse = -inf)"), hint=2),
            partials_case(rng, 3, int(rng.integers(20, 70)), 16, 5, "float16", why="float16 keys and values"),
            partials_case(rng, 1, 50, 16, 1, "float32", scale=float(rng.uniform(0.05, 0.5)),
                          why="one split: the whole row; an explicit scale"),
            boosted_partials_case(rng)]


def boosted_partials_case(rng) -> Case:
    """Two splits of 136-150 keys (more than one key block each for any BLOCK_N up to 128) whose first
    8 keys score 128 above the rest for sequence 0 (sequence 1 is left alone)."""
    nk = 2 * int(rng.integers(136, 150))
    case = partials_case(rng, 2, nk, 16, 2, "float32")
    kw = dict(case.kwargs)
    kw.update(boost_first_keys(dict(q=kw["q"][None], k=kw["k"]), [lo for lo, _ in split_bounds(nk, 2)], 8, 128.0,
                               100.0))
    kw["q"] = kw["q"][0]  # (Z, d): the query of sequence 0 boosted
    return Case(case.label + ", all +100, sequence 0: each split's keys 0-7 +128", kw,
                why=FIRST_KEYS_WHY.format(where=" (sequence 0) in each split", boost=128, offset=100))


def combine_splits_reference(o_part, lse_part):
    lse = np.logaddexp.reduce(lse_part.astype(np.float64), axis=-1)  # (Z,)
    lse = np.where(np.isneginf(lse), 0.0, lse)  # a row with no key: every weight 0, o = 0 (as merge_partials)
    w = np.exp(lse_part.astype(np.float64) - lse[:, None])  # (Z, S)
    return (w[..., None] * o_part).sum(1).astype(o_part.dtype)


def combine_splits_case(rng, z, nk, d, num_splits, why=""):
    base = partials_case(rng, z, nk, d, num_splits, "float64")
    o_part, lse_part = partials_reference(**base.kwargs)
    return Case(base.label.replace("float64", "partials float32"), dict(o_part=o_part, lse_part=lse_part), why=why)


def combine_splits_public(rng):
    return [combine_splits_case(rng, 2, 64, 16, 4)]


LARGE_LSE_WHY = ("large lse: exp(lse_s) overflows to inf (float32 past 88, float64 past 709), so weigh each split by "
                 "exp(lse_s - lse) with lse = logsumexp over the splits (the largest lse subtracted first); the "
                 "result is the same as without the shift")


def large_lse_combine_case(rng) -> Case:
    """Three sequences of 4 splits: sequence 0 as computed, sequence 1 with every key scoring +1000
    (each lse_s + 1000, o_s unchanged), sequence 2 with splits 0 and 2 scoring +100 and +103 (their
    lse_s shifted, the other two splits then weigh about exp(-100))."""
    case = combine_splits_case(rng, 3, int(rng.integers(40, 100)), 8, 4)
    lse_part = case.kwargs["lse_part"] + np.array([[0.0] * 4, [1000.0] * 4, [100.0, 0.0, 103.0, 0.0]],
                                                  np.float32)  # (Z, S)
    return Case(case.label + ", lse + 1000 (sequence 1), + 100 and + 103 (sequence 2's splits 0, 2)",
                dict(case.kwargs, lse_part=lse_part), why=LARGE_LSE_WHY, hint=2)


def empty_row_combine_case(rng) -> Case:
    """Two sequences of 3 splits; sequence 1 has no key at all (an empty cache): every split empty."""
    case = combine_splits_case(rng, 2, int(rng.integers(20, 60)), 8, 3)
    o_part, lse_part = case.kwargs["o_part"].copy(), case.kwargs["lse_part"].copy()
    o_part[1], lse_part[1] = 0.0, -np.inf
    return Case(case.label + ", sequence 1 has no key (all 3 splits empty)", dict(o_part=o_part, lse_part=lse_part),
                why="a sequence with no key (an empty cache): every split is empty (o_s = 0, lse_s = -inf), so "
                    "logsumexp is -inf and exp(-inf - (-inf)) is NaN; its o must be 0, without NaN (subtract 0 "
                    "where lse = -inf)", hint=2)


def combine_splits_hidden(rng):
    return [combine_splits_case(rng, 3, int(rng.integers(30, 100)), 8, 6, "random split sizes"),
            dataclasses.replace(combine_splits_case(rng, 2, 9, 8, 4, "an empty split (lse = -inf) must weigh 0, "
                                                    "without NaN"), hint=2),
            combine_splits_case(rng, 2, 40, 8, 1, "a single split: the combine returns it unchanged"),
            large_lse_combine_case(rng), empty_row_combine_case(rng)]


# ----------------------------------------------------------------------------- ex15 autograd Function
def lse_forward_reference(q, k, v, causal=False):
    from flashlab.reference import naive_attention

    o, lse = naive_attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), causal=causal,
                             return_lse=True)
    return o.astype(q.dtype), lse.astype(q.dtype)


def grads_reference(q, k, v, do, causal=False):
    from flashlab.reference import naive_attention, naive_attention_backward

    f64 = [t.astype(np.float64) for t in (q, k, v, do)]
    o = naive_attention(*f64[:3], causal=causal)
    return tuple(t.astype(q.dtype) for t in (o, *naive_attention_backward(*f64, causal=causal)))


def autograd_case(rng, batch, nq, nk, d, dtype, causal, with_do=True, why=""):
    kw = dict(qkv(rng, nq, nk, d, batch=batch, dtype=dtype), causal=causal)
    if with_do:
        kw["do"] = randn(rng, *batch, nq, d, dtype=dtype)
    return Case(attn_label(kw, causal), kw, why=why)


def autograd_memory_case(rng, with_do: bool, max_live: int, max_peak: int) -> Case:
    """IO-awareness for exercise 15: Nq = 256, Nk = 8192, d = 4, float64. One Nq x Nk float64 array is
    16 MiB, one block of 8 query rows against every key 512 KiB, K and V (and dK, dV) 256 KiB each;
    the exercise's 16 x 16 tiles are 2 KiB.

    Judged first by the torch tensors the call holds at once, counted exactly inside the child
    (``Case.max_live_bytes``, ``child.LiveBytes``: the same count every run). Measured (this course's
    CPU machine, seeds 0-2, identical each time): the solution 0.02 MiB forward and 1.04 MiB forward
    and backward (the leaves' copies of q, k, v and dq, dk, dv); an honest variant with 64 x 128
    tiles, K transposed once and dK, dV joined by torch.cat 0.26 and 1.97 MiB; 8 query rows against
    every key 2.01 and 3.53 MiB; a backward that builds the whole P 49 MiB; 128 x 256 tiles 1.02 and
    2.28 MiB, 256 x 128 tiles 1.03 and 2.28 MiB, 256 x 256 tiles 2.03 and 3.53 MiB. The limits,
    1.5 MiB (forward) and 3 MiB (forward and backward), leave room for tiles up to 128 x 256 (32,768
    elements: the largest the stub's docstring allows) and a few K-sized copies, and none for a
    block of 8 query rows against every key.

    Then by the resident size measured from outside, as for every memory case, for memory torch does
    not allocate (NumPy, ctypes, mmap): limits 4 and 8 MiB against 16 MiB for one Nq x Nk array
    (the solution 0-0.4 and 1.2-1.9 MiB). A block_q x Nk array in NumPy is not caught by that: the
    allocator's reuse hides it run to run. No pool check (``Case.pool_check``): an honest call's
    torch and autograd churn touches 10-24 MiB of memory held before it, more than half of the
    16 MiB array; the count of tensors covers a torch pool instead (a buffer held before the call
    counts in full once an operator writes it)."""
    case = autograd_case(rng, (1,), 256, 8192, 4, "float64", False, with_do, why=MEMORY_WHY)
    return dataclasses.replace(case, label=case.label + " (memory)", max_live_bytes=max_live, max_peak_bytes=max_peak,
                               pool_check=False)


def lse_forward_public(rng):
    return [autograd_case(rng, (1,), 32, 32, 8, "float64", False, False)]


def lse_forward_hidden(rng):
    return [autograd_case(rng, (2,), int(rng.integers(17, 50)), int(rng.integers(17, 50)), 8, "float64", c, False,
                          why="ragged last tiles, Nq != Nk") for c in (False, True)] + [
            autograd_case(rng, (1,), int(rng.integers(35, 50)), int(rng.integers(5, 20)), 8, "float32", True, False,
                          why="causal with Nq > Nk, float32"),
            boosted_autograd_case(rng),
            autograd_memory_case(rng, False, 3 << 19, 4 << 20)]


def boosted_autograd_case(rng) -> Case:
    """float64, keys 0-7 scoring 1000 above the rest (exp overflows float64 past 709.8) and Nk past
    two K_TILE blocks."""
    case = autograd_case(rng, (1,), int(rng.integers(17, 30)), int(rng.integers(40, 60)), 8, "float64", False, False)
    kw = boost_first_keys(case.kwargs, [0], 8, 1000.0, 800.0)
    return Case(case.label + " all +800, keys 0-7 +1000 in even rows", kw, why=FIRST_KEYS_WHY.format(where="", boost=1000, offset=800))


def grads_public(rng):
    return [autograd_case(rng, (1,), 32, 32, 8, "float64", False), autograd_case(rng, (1,), 24, 24, 8, "float64", True)]


def grads_hidden(rng):
    return [autograd_case(rng, (2,), int(rng.integers(17, 50)), int(rng.integers(17, 50)), 8, "float64", False,
                          why="ragged tiles, Nq != Nk, a batch dim"),
            autograd_case(rng, (1,), int(rng.integers(35, 50)), int(rng.integers(10, 30)), 8, "float64", True,
                          why="causal with Nq > Nk"),
            autograd_case(rng, (1,), int(rng.integers(10, 30)), int(rng.integers(35, 50)), 8, "float64", True,
                          why="causal with Nq < Nk: keys no query row sees get dK = dV = 0"),
            autograd_case(rng, (1,), 20, 20, 8, "float32", True, why="float32: gradients in the input dtype"),
            autograd_memory_case(rng, True, 3 << 20, 8 << 20)]


# What each public case is there for, in the order the part's public function returns them (a case's
# own ``why`` comes first); shown when it fails.
PUBLIC_WHY = {
    ("ex01_naive", "naive_attention"): (
        "square, float64: softmax(scale q k^T) v with scale = 1/sqrt(d)",
        "Nq != Nk and dv != d, float32: the output is (Nq, dv), in the input's dtype",
        "causal, square: row i sees keys 0 to i"),
    ("ex01_naive", "naive_hbm_bytes"): (
        "square, d = dv, 2-byte elements (the default itemsize): every read and write of Algorithm 0",
        "Nq != Nk, dv != d, itemsize = 4: each tensor's own shape and element size"),
    ("ex02_softmax", "safe_softmax"): (
        "a 2-D float32 array: softmax over the last axis, in the input's dtype",
        "a 3-D float64 array: the leading axes are batch axes"),
    ("ex02_softmax", "online_softmax"): (
        "chunks of 4 that divide the row",
        "chunks of 3 that do not divide the row (a short last chunk), float32"),
    ("ex02_softmax", "combine_states"): ("two partial states of the same rows: the merged (m, l, acc)",),
    ("ex03_tiled_forward", "tiled_attention"): (
        "square, blocks that divide N",
        "Nq != Nk and blocks that do not divide them (ragged last tiles), float32",
        "causal, square, 8 x 8 blocks: the tiles above the diagonal are skipped"),
    ("ex04_causal_tiles", "causal_tile_skipped"): (
        "tile (0, 0) on the diagonal", "tile (0, 1), above the diagonal", "tile (2, 1), below the diagonal",
        "block_q != block_k, and nq = 12 makes query block 1 ragged: its last real row is 11, not 15; is the "
        "tile's first key past it?",
        "block_q != block_k, a tile that the diagonal crosses"),
    ("ex04_causal_tiles", "count_computed_tiles"): (
        "causal=False: every tile is computed", "causal=True: the tiles on and below the diagonal"),
    ("ex05_traffic", "fa2_forward_bytes"): (
        "square, blocks that divide N, not causal: Algorithm 1's reads and writes",
        "Nq != Nk, dv != d, causal, ragged blocks: K and V are read only for the tiles computed"),
    ("ex06_triton_primer", "vector_add"): ("n = 1000, not a multiple of BLOCK: the last program masks its lanes",),
    ("ex06_triton_primer", "row_softmax"): ("4 rows of 100: one program per row, the lanes past 100 masked",),
    ("ex07_kernel_inner_loop", "flash_forward"): ("one batch element, Nq = Nk = 32, float32: the whole forward",),
    ("ex08_kernel_causal", "flash_forward"): (
        "causal, Nq = Nk = 32: the diagonal blocks masked, the blocks past them skipped",),
    ("ex09_backward_pieces", "rowsum_do_o"): ("D = rowsum(dO * O) for one (4, 3) pair",),
    ("ex09_backward_pieces", "softmax_backward"): ("dS = P * (dP - rowsum(P * dP)) for one (3, 4) tile",),
    ("ex10_tiled_backward", "tiled_attention_backward"): (
        "square, blocks that divide N: dQ, dK and dV",
        "causal, Nq != Nk, dv != d, 8 x 4 blocks with a ragged last tile"),
    ("ex12_triton_online_softmax", "online_row_softmax"): (
        "3 rows of 100, block_n = 32: four blocks per row, the last one ragged",),
    ("ex13_triton_backward", "flash_backward_dkdv"): (
        "not causal, Nq = Nk = 32", "causal: a key block gets gradient only from the query rows at or below it"),
    ("ex13_triton_backward", "flash_backward_dq"): (
        "not causal, Nq = Nk = 32", "causal: a query block takes gradient only from the keys at or before it"),
    ("ex14_split_kv_decode", "split_kv_partials"): ("Nk = 64 in 4 splits of 16 keys: one (o, lse) per split",),
    ("ex14_split_kv_decode", "combine_splits"): ("4 partial states per sequence, merged by their lse",),
    ("ex15_autograd_flash", "flash_forward_lse"): ("float64, Nq = Nk = 32: the forward and its lse",),
    ("ex15_autograd_flash", "forward_and_backward"): ("not causal, square, float64", "causal, square, float64"),
}

