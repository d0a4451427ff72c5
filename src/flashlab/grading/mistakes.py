"""Known mistakes, computed in the grading parent, so that a failing report can name the mistake.

Each detector takes a case's keyword arguments (the clean inputs, and ``row_padding`` where the
case lays an input's rows further apart than their length) and the constexprs of the learner's
last kernel launch, and returns the output a solution with that one mistake gives (or
None when the mistake does not apply to the case). When the learner's output equals it, the
report says "looks like ..." before the numbers. NumPy only; float64 inside, the input dtype out.
"""
from __future__ import annotations

import numpy as np

NO_RESCALE = ("l_i and acc are not rescaled by alpha = exp(m_i_old - m_i_new) when a later key block "
              "raises the row max")
ACC_NOT_RESCALED = "acc is not rescaled by alpha = exp(m_i_old - m_i_new) when a later key block raises the row max"
DIAGONAL_HIDDEN = ("the causal mask hides the diagonal (it masks j >= i): row 0 then sees no key at all and "
                   "0/0 gives NaN there; mask only keys j > i")
NO_SCALE = "the scores are not multiplied by scale = 1/sqrt(d)"
SCALE_IGNORED = "the scale argument is ignored: 1/sqrt(d) is used even when scale is given"
DIAGONAL_UNMASKED = ("the loop stops at the diagonal block, but the blocks it visits are not masked (or masked "
                     "with an offset, as N_K - N_Q for a bottom-right alignment): keys j > i inside them still count (give those scores -inf, e.g. tl.where(offs_n[None, :] <= "
                     "offs_m[:, None], qk, -inf))")
CAUSAL_IGNORED = ("causal=True, but this is non-causal attention: no key j > i is masked (give those scores "
                  "-inf, e.g. tl.where(offs_n[None, :] <= offs_m[:, None], qk, -inf))")
EXP_WITH_LOG2E = ("the scores use exp() with log2(e) = 1.4427 folded into the scale: use exp2 with that "
                  "factor, or exp without it")
EXP2_WITHOUT_LOG2E = ("the scores use exp2() but the scale is not multiplied by log2(e) = 1.4427 (exp2(x log2 e) "
                      "= exp(x))")
ACC_NOT_DIVIDED = "acc is stored without the division by l_i: O_i = acc / l_i once, after the loop (line 12)"
SCALE_TWICE = ("the scores are multiplied by scale^2: the scale applied twice, or 1/d where 1/sqrt(d) belongs "
               "(qk_scale = scale, once)")
MAX_NOT_CARRIED = ("the running max is not carried from one key block to the next (m_new = the block's own row "
                   "max, not max(m_i, rowmax(S_ij))): when a later block scores far below an earlier one, "
                   "alpha = exp(m_i - m_new) overflows to inf and the row turns NaN")
NORMALISED_IN_LOOP = ("acc is divided by l_i inside the key loop: keep acc unnormalised and divide once, after "
                      "the loop (FlashAttention-2 Algorithm 1, line 12)")


def _work_dtype(x) -> type:
    """Where a mistake's overflow shows: float64 inputs are worked in float64, every other dtype in
    float32 (a Triton kernel's accumulators)."""
    return np.float64 if np.asarray(x).dtype == np.float64 else np.float32


def _attention(q, k, v, causal=False, scale=None, hide_diagonal=False, block_k=None, rescale=("l", "acc"),
               normalise_in_loop=None, carry_max=True, row_bound=None):
    """Attention with optional mistakes; rows are independent, so one 'query block' is all rows.
    normalise_in_loop: "and_after" divides acc by l_i after every key block and again at the end,
    "only" after every key block and not at the end, "never" not at all. carry_max=False: each
    block's own max replaces the running max, worked in the dtype where its overflow shows.
    row_bound (Nq,): a row visits only the key blocks that start below its bound (a causal loop's).
    With carry_max=False the result is None unless some exp(m_old - m_new) overflows: otherwise the
    mistake changes nothing but the NaN of fully masked blocks, which other bugs share."""
    q64, k64, v64 = (np.asarray(x, np.float64) for x in (q, k, v))
    nq, nk = q64.shape[-2], k64.shape[-2]
    s = scale * (q64 @ np.swapaxes(k64, -1, -2))  # (..., Nq, Nk)
    if causal or hide_diagonal:
        cols, rows = np.arange(nk)[None, :], np.arange(nq)[:, None]
        s = np.where(cols >= rows if hide_diagonal else cols > rows, -np.inf, s)
    if not carry_max:
        s, v64 = s.astype(_work_dtype(q)), v64.astype(_work_dtype(q))
    block_k = nk if block_k is None else block_k
    m = np.full(s.shape[:-1], -np.inf, s.dtype)
    l, acc = np.zeros(s.shape[:-1], s.dtype), np.zeros(s.shape[:-1] + (v64.shape[-1],), s.dtype)
    overflowed = False
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for k0 in range(0, nk, block_k):
            s_j = s[..., k0:k0 + block_k]
            m_new = np.maximum(m, s_j.max(axis=-1)) if carry_max else s_j.max(axis=-1)
            if row_bound is not None:  # rows whose loop ends before this block keep their state
                m_new = np.where(k0 < row_bound, m_new, m)
                s_j = np.where((k0 < row_bound)[:, None], s_j, -np.inf)
            alpha = np.exp(m - m_new)
            overflowed |= bool(np.isinf(alpha[np.isfinite(m) & np.isfinite(m_new)]).any())
            p = np.exp(s_j - m_new[..., None])
            l = (alpha if "l" in rescale else 1.0) * l + p.sum(axis=-1)
            acc = (alpha[..., None] if "acc" in rescale else 1.0) * acc + p @ v64[..., k0:k0 + block_k, :]
            if normalise_in_loop in ("only", "and_after"):
                acc = acc / l[..., None]
            m = m_new
        if not carry_max and not overflowed:
            return None
        return (acc if normalise_in_loop in ("only", "never") else acc / l[..., None]).astype(q.dtype)


def _scale(kw):
    return kw.get("scale") if kw.get("scale") is not None else 1.0 / np.sqrt(kw["q"].shape[-1])


def no_rescale(kw, blocks):
    block_k = kw.get("block_k") or blocks.get("BLOCK_N") or 16
    if kw["k"].shape[-2] <= block_k:
        return None
    return _attention(kw["q"], kw["k"], kw["v"], kw.get("causal", False), _scale(kw), block_k=block_k, rescale=())


def acc_not_rescaled(kw, blocks):
    block_k = kw.get("block_k") or blocks.get("BLOCK_N") or 16
    if kw["k"].shape[-2] <= block_k:
        return None
    return _attention(kw["q"], kw["k"], kw["v"], kw.get("causal", False), _scale(kw), block_k=block_k,
                      rescale=("l",))


L_NOT_RESCALED = ("the running sum l_i is not rescaled by alpha = exp(m_i_old - m_i_new) when a later key block "
                  "raises the row max (acc is): l_i = alpha * l_i + rowsum(P_ij)")


def l_not_rescaled(kw, blocks):
    block_k = kw.get("block_k") or blocks.get("BLOCK_N") or 16
    if kw["k"].shape[-2] <= block_k:
        return None
    return _attention(kw["q"], kw["k"], kw["v"], kw.get("causal", False), _scale(kw), block_k=block_k,
                      rescale=("acc",))


def diagonal_hidden(kw, blocks):
    if not kw.get("causal"):
        return None
    return _attention(kw["q"], kw["k"], kw["v"], False, _scale(kw), hide_diagonal=True)


def no_scale(kw, blocks):
    return _attention(kw["q"], kw["k"], kw["v"], kw.get("causal", False), 1.0)


def scale_ignored(kw, blocks):
    if kw.get("scale") is None:
        return None
    return _attention(kw["q"], kw["k"], kw["v"], kw.get("causal", False), 1.0 / np.sqrt(kw["q"].shape[-1]))


def causal_ignored(kw, blocks):
    if not kw.get("causal"):
        return None
    return _attention(kw["q"], kw["k"], kw["v"], False, _scale(kw))


PADDED_KEYS_UNMASKED = ("the keys past N_K in the last, partial key block count in the softmax: masked loads give them "
                        "K = 0 and V = 0, so their scores are 0, not -inf, and each adds exp(0 - m) to l; set the scores "
                        "of keys at or past N_K to -inf before the row max (tl.where(offs_n[None, :] < N_K, qk, "
                        "float(\"-inf\")))")


def padded_keys_unmasked(kw, blocks):
    """The kernel's attention with the last key block's padding (keys N_K .. a multiple of BLOCK_N) loaded as
    K = V = 0 and left in the softmax; None where N_K fills its blocks or the case is causal (the causal mask
    then hides the padding from every row)."""
    bn = blocks.get("BLOCK_N")
    k, v = np.asarray(kw["k"]), np.asarray(kw["v"])
    nk = k.shape[-2]
    if not isinstance(bn, int) or bn <= 0 or nk % bn == 0 or kw.get("causal"):
        return None
    pad = lambda x: np.concatenate([x, np.zeros(x.shape[:-2] + (bn - nk % bn, x.shape[-1]), x.dtype)], -2)  # noqa: E731
    return _attention(kw["q"], pad(k), pad(v), False, _scale(kw))


K_NOT_TRANSPOSED = ("the scores are Q K_j, not Q K_j^T: K_j is loaded as a (BLOCK_N, HEAD_DIM) tile and passed to "
                    "tl.dot as it is, which fits only where HEAD_DIM equals BLOCK_N (Triton refuses the other shapes); "
                    "load K_j^T, a (HEAD_DIM, BLOCK_N) tile (offsets of d down its rows, of keys across), or pass "
                    "tl.trans(k)")


def k_not_transposed(kw, blocks):
    """The kernel's attention with each key block's scores computed as Q K_j (K_j a (BLOCK_N, d) tile, keys past
    N_K loaded as 0): score (m, j0 + c) = sum_r q[m, r] k[j0 + r, c]. None unless BLOCK_N equals d."""
    bn = blocks.get("BLOCK_N")
    q, k, v = (np.asarray(kw[n], np.float64) for n in ("q", "k", "v"))
    nq, nk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    if bn != d:
        return None
    tiles = -(-nk // bn)
    padded = np.concatenate([k, np.zeros(k.shape[:-2] + (tiles * bn - nk, d))], -2)
    s = np.einsum("...mr,...trc->...mtc", q, padded.reshape(k.shape[:-2] + (tiles, bn, d)))
    s = _scale(kw) * s.reshape(s.shape[:-2] + (tiles * bn,))[..., :nk]  # (..., Nq, Nk)
    if kw.get("causal"):
        s = np.where(np.arange(nk)[None, :] > np.arange(nq)[:, None], -np.inf, s)
        v = np.where(np.isnan(v), 0.0, v)  # the keys no query sees (NaN in the causal cases) weigh 0
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        return ((p / p.sum(axis=-1, keepdims=True)) @ v).astype(np.asarray(kw["q"]).dtype)


def diagonal_unmasked(kw, blocks):
    """Causal loop bound kept, the mask inside the visited blocks forgotten: a query row of block b
    sees every key of the key blocks the loop visits, i.e. keys below the first multiple of BLOCK_N
    at or past min(N_K, (b + 1) * BLOCK_M, N_Q)."""
    if not kw.get("causal") or "BLOCK_M" not in blocks or "BLOCK_N" not in blocks:
        return None
    q, k, v = (np.asarray(kw[n], np.float64) for n in ("q", "k", "v"))
    bm, bn, nq, nk = blocks["BLOCK_M"], blocks["BLOCK_N"], q.shape[-2], k.shape[-2]
    hi = np.minimum(nk, np.minimum((np.arange(nq) // bm + 1) * bm, nq))  # (Nq,) the loop's bound per row
    visible = np.minimum(nk, -(-hi // bn) * bn)  # keys of the visited blocks
    s = _scale(kw) * (q @ np.swapaxes(k, -1, -2))
    s = np.where(np.arange(nk)[None, :] < visible[:, None], s, -np.inf)
    with np.errstate(invalid="ignore"):
        p = np.exp(s - s.max(axis=-1, keepdims=True))
        return (p @ v / p.sum(axis=-1, keepdims=True)).astype(kw["q"].dtype)


DIAGONAL_BLOCK_SKIPPED = ("the causal key loop stops one block early (e.g. hi = start_m * BLOCK_M, not (start_m + 1) "
                          "* BLOCK_M): the key block holding the diagonal is never visited, so query block 0 sees no "
                          "key at all (0/0 gives NaN there) and a later row misses the keys from its own block up to "
                          "its position; the loop must run to one past the block's last query row, "
                          "min((start_m + 1) * BLOCK_M, N_Q, N_K)")
CAUSAL_MASK_FLIPPED = ("the causal mask is on the wrong side: it keeps keys j >= i, where query row i sees keys j <= i "
                       "(tl.where(offs_n[None, :] <= offs_m[:, None], qk, -inf)); a row whose first key block is then "
                       "fully masked gives exp(-inf - (-inf)) = NaN")


CAUSAL_BOTTOM_RIGHT = ("the causal mask is aligned bottom-right (query i sees keys j <= i + N_K - N_Q, the "
                       "convention of a new chunk against a cache): here query i sees keys j <= i whatever N_K, "
                       "tl.where(offs_n[None, :] <= offs_m[:, None], qk, -inf), and the loop stops at "
                       "min((start_m + 1) * BLOCK_M, N_K)")


def _causal_kernel(upper=None, flipped=False, shift_mask=False, shift_loop=False):
    """Exercise 08's causal kernel with one mistake, block by block as the kernel runs (float64): query
    block b's loop visits the key blocks that start below ``upper(b, hi, BLOCK_M, BLOCK_N)``, where
    hi = min(N_K, (b + 1) * BLOCK_M, N_Q) is the right bound (None: hi itself), and masks the keys
    j > i (``flipped``: j < i). A row whose loop visits no key is 0/0 = NaN; one whose first visited
    block is fully masked is NaN from exp(-inf - (-inf)). With hi = start_m * BLOCK_M query block 0
    sees no key, its rows NaN and the later blocks' finite but wrong; a case of one query block gives
    all NaN, which names nothing (checks._name_mistake). ``shift_mask`` / ``shift_loop``: the mask / the loop's
    bound aligned bottom-right, shifted by N_K - N_Q (None where N_K = N_Q: the alignments agree)."""
    def detector(kw, blocks):
        if not kw.get("causal") or "BLOCK_M" not in blocks or "BLOCK_N" not in blocks:
            return None
        q, k, v = (np.asarray(kw[n], np.float64) for n in ("q", "k", "v"))
        bm, bn, nq, nk = blocks["BLOCK_M"], blocks["BLOCK_N"], q.shape[-2], k.shape[-2]
        if (shift_mask or shift_loop) and nk == nq:
            return None
        b = np.arange(nq) // bm  # (Nq,) each row's query block
        hi = np.minimum(nk, np.minimum((b + 1) * bm, nq) + (nk - nq if shift_loop else 0))
        hi = hi if upper is None else np.minimum(nk, upper(b, hi, bm, bn))  # (Nq,) the loop's bound per row
        rows = np.arange(nq)[:, None] + (nk - nq if shift_mask else 0)
        s = _scale(kw) * (q @ np.swapaxes(k, -1, -2))  # (..., Nq, Nk)
        m = np.full(s.shape[:-1], -np.inf)
        l, acc = np.zeros(s.shape[:-1]), np.zeros(s.shape[:-1] + (v.shape[-1],))
        with np.errstate(invalid="ignore", divide="ignore"):
            for k0 in range(0, max(int(hi.max(initial=0)), 0), bn):
                cols = np.arange(k0, min(k0 + bn, nk))[None, :]
                visits = (k0 < hi)[:, None]  # (Nq, 1) rows whose loop reaches this block
                keep = cols >= rows if flipped else cols <= rows
                s_j = np.where(keep, s[..., k0:k0 + bn], -np.inf)
                m_new = np.maximum(m, s_j.max(axis=-1))
                alpha, p = np.exp(m - m_new), np.exp(s_j - m_new[..., None])
                l = np.where(visits[:, 0], alpha * l + p.sum(axis=-1), l)
                acc = np.where(visits, alpha[..., None] * acc + p @ v[..., k0:k0 + bn, :], acc)
                m = np.where(visits[:, 0], m_new, m)
            return (acc / l[..., None]).astype(kw["q"].dtype)
    return detector


def exp_with_log2e(kw, blocks):
    return _attention(kw["q"], kw["k"], kw["v"], kw.get("causal", False), _scale(kw) * np.log2(np.e))


def exp2_without_log2e(kw, blocks):
    return _attention(kw["q"], kw["k"], kw["v"], kw.get("causal", False), _scale(kw) * np.log(2.0))


def max_not_carried(kw, blocks):
    block_k = kw.get("block_k") or blocks.get("BLOCK_N") or 16
    if kw["k"].shape[-2] <= block_k:
        return None
    nq, nk = kw["q"].shape[-2], kw["k"].shape[-2]
    bound, block_q = None, kw.get("block_q") or blocks.get("BLOCK_M")
    if kw.get("causal"):  # a causal loop stops after the block holding its query block's last row
        if not block_q:
            return None  # the learner's row tile is not known (a constexpr of another name): no model of the loop
        bound = np.minimum(nk, np.minimum((np.arange(nq) // block_q + 1) * block_q, nq))
    return _attention(kw["q"], kw["k"], kw["v"], kw.get("causal", False), _scale(kw), block_k=block_k,
                      carry_max=False, row_bound=bound)


def _normalised_in_loop(how):
    def detector(kw, blocks):
        block_k = kw.get("block_k") or blocks.get("BLOCK_N") or 16
        if kw["k"].shape[-2] <= block_k:
            return None
        return _attention(kw["q"], kw["k"], kw["v"], kw.get("causal", False), _scale(kw), block_k=block_k,
                          normalise_in_loop=how)
    return detector


GLOBAL_MAX = ("one max is subtracted for the whole array, not each row's own (max() without axis=-1): in a row "
              "far below that max every exp() underflows to 0, and 0/0 gives NaN; subtract m = max(axis=-1, "
              "keepdims=True)")


def _softmax_global_max(s, axes):
    """softmax over the last axis of ``s`` (in its dtype) with one max over ``axes`` subtracted."""
    with np.errstate(invalid="ignore", divide="ignore", over="ignore", under="ignore"):
        e = np.exp(s - s.max(axis=axes, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)


def _global_max(axes):
    """Exercise 02's safe softmax with one max over ``axes`` (None: every element)."""
    def detector(kw, blocks):
        x = np.asarray(kw["x"])
        if axes is not None and x.ndim < len(axes):
            return None
        return _softmax_global_max(x, axes).astype(x.dtype)
    return detector


def _attention_global_max(axes):
    """Exercise 01's naive attention, its scores in the input dtype, with one max over ``axes``."""
    def detector(kw, blocks):
        q, k, v = (np.asarray(kw[n]) for n in ("q", "k", "v"))
        s = _scale(kw) * (q @ np.swapaxes(k, -1, -2))  # (..., Nq, Nk)
        if kw.get("causal"):
            s = np.where(np.arange(s.shape[-1])[None, :] > np.arange(s.shape[-2])[:, None], -np.inf, s)
        return (_softmax_global_max(s, axes) @ v).astype(q.dtype)
    return detector


WRONG_AXIS_MAX = ("the max is taken over the wrong axis (x.max(axis=0): one max per column, down the rows, not one "
                  "per row): softmax(x) = softmax(x - c) only when c is the same along a row, so subtracting each "
                  "column's own max changes the answer; take each row's max over the last axis, m = "
                  "x.max(axis=-1, keepdims=True)")


def _wrong_axis_max(axis: int):
    """Exercise 02's safe softmax with the max over ``axis`` (not the last), broadcast as keepdims
    does (x.max(axis=0) without keepdims broadcasts the same way); None where ``axis`` is the last."""
    def detector(kw, blocks):
        x = np.asarray(kw["x"])
        if axis >= x.ndim - 1:
            return None
        return _softmax_global_max(x, axis).astype(x.dtype)
    return detector


_GLOBAL_MAX = ((GLOBAL_MAX, _global_max(None)), (GLOBAL_MAX, _global_max((-2, -1))),
               (WRONG_AXIS_MAX, _wrong_axis_max(0)), (WRONG_AXIS_MAX, _wrong_axis_max(1)))

ONLINE_SHARED_MAX = ("the chunk's max is not taken along each row (xc.max() with no axis, or over the wrong axis, "
                     "not xc.max(axis=-1)): the rows then share one running max, and in a row far below it every "
                     "exp() underflows to 0, so 0/0 gives NaN; keep one max per row, m_new = np.maximum(m, "
                     "xc.max(axis=-1))")


def _online_shared_max(axis):
    """Exercise 02's online softmax as the solution writes it, in the input dtype, with the chunk's max
    taken over ``axis`` (None: the whole chunk; 0: down the rows, per column) instead of the last axis.
    NumPy's broadcasting decides what runs, as in the learner's code: xc.max(axis=0) against m of shape
    (rows,) broadcasts only with one row or chunk, or as many columns in the chunk as rows (otherwise
    the learner's code raises; here too, and the detector names nothing). Any per-row reference gives
    the right softmax up to rounding: the mistake shows only where exp() under- or overflows."""
    def detector(kw, blocks):
        x, chunk = np.asarray(kw["x"]), kw["chunk"]
        if x.ndim < 2 or x.shape[-2] < 2:
            return None  # one row: its own max, the right answer
        n = x.shape[-1]
        with np.errstate(invalid="ignore", divide="ignore", over="ignore", under="ignore"):
            m = np.full(x.shape[:-1], -np.inf, dtype=x.dtype)  # (...)
            l = np.zeros(x.shape[:-1], dtype=x.dtype)  # (...)
            for start in range(0, n, chunk):
                xc = x[..., start:start + chunk]  # (..., c)
                m_new = np.maximum(m, xc.max(axis=axis))
                l = l * np.exp(m - m_new) + np.exp(xc - m_new[..., None]).sum(axis=-1)
                m = m_new
            return (np.exp(x - m[..., None]) / l[..., None]).astype(x.dtype)
    return detector


_ATTENTION = ((DIAGONAL_HIDDEN, diagonal_hidden), (NO_SCALE, no_scale), (SCALE_IGNORED, scale_ignored),
              (CAUSAL_IGNORED, causal_ignored))
RAGGED_ROWS_DROPPED = ("the ragged last query block is never computed (its rows stay 0): the loop over query blocks "
                       "must reach Nq, e.g. range(0, nq, block_q), with the last block's rows ending at min(i0 + "
                       "block_q, nq)")
RAGGED_KEYS_DROPPED = ("the ragged last key block is never read: the loop over key blocks must reach Nk, e.g. "
                       "range(0, nk, block_k), the last block holding the keys from its start to nk")


def _ragged_dropped(rows: bool):
    """Exercise 03 with the ragged last query block (``rows``) or key block never visited: its rows
    left 0, or its keys never counted (None where the block sizes divide Nq, Nk)."""
    def detector(kw, blocks):
        q, k, v = kw["q"], kw["k"], kw["v"]
        nq, nk = q.shape[-2], k.shape[-2]
        size, n = (kw.get("block_q"), nq) if rows else (kw.get("block_k"), nk)
        if type(size) is not int or n % size == 0 or n < size:
            return None
        cut = n // size * size
        if rows:
            out = _attention(q, k, v, kw.get("causal", False), _scale(kw))
            out[..., cut:, :] = 0
            return out
        if kw.get("causal") and cut < nq:  # rows past the cut would see no key at all
            return None
        return _attention(q, k[..., :cut, :], v[..., :cut, :], kw.get("causal", False), _scale(kw))
    return detector


_TILED = ((NO_RESCALE, no_rescale), (ACC_NOT_RESCALED, acc_not_rescaled), (L_NOT_RESCALED, l_not_rescaled),
          (MAX_NOT_CARRIED, max_not_carried),
          (NORMALISED_IN_LOOP, _normalised_in_loop("only")), (NORMALISED_IN_LOOP, _normalised_in_loop("and_after"))
          ) + _ATTENTION
DIAGONAL_TILE_DROPPED = ("the causal loop stops at the first key tile that ends past the query block's last row (a "
                         "test like k0 + block_k > q1), so the tile the diagonal crosses is never read: when block_k "
                         "does not line up with the query blocks, rows miss keys up to their own position (and a row "
                         "that reaches no tile is 0/0 = NaN). Skip a tile only when it starts past the block's last "
                         "row: k0 > q1 - 1")


def _tiled_causal(upper):
    """Exercise 03's causal loop with the bound ``upper(b, hi, block_q, block_k)`` on the key tiles of query block b
    (``_causal_kernel``, with the blocks of the call's arguments in place of a kernel's constexprs)."""
    inner = _causal_kernel(upper)

    def detector(kw, blocks):
        if kw.get("block_q") is None or kw.get("block_k") is None:
            return None
        return inner(kw, {"BLOCK_M": kw["block_q"], "BLOCK_N": kw["block_k"]})
    return detector


_TILED_LOOP = _TILED + ((RAGGED_ROWS_DROPPED, _ragged_dropped(rows=True)), (RAGGED_KEYS_DROPPED, _ragged_dropped(rows=False)),
                        (DIAGONAL_TILE_DROPPED, _tiled_causal(lambda b, hi, bm, bn: hi - bn + 1)))
_KERNEL = _TILED + ((DIAGONAL_UNMASKED, diagonal_unmasked), (PADDED_KEYS_UNMASKED, padded_keys_unmasked),
                    (K_NOT_TRANSPOSED, k_not_transposed),
                    (EXP_WITH_LOG2E, exp_with_log2e),
                    (EXP2_WITHOUT_LOG2E, exp2_without_log2e),
                    (ACC_NOT_DIVIDED, lambda kw, blocks: _attention(kw["q"], kw["k"], kw["v"], kw.get("causal", False),
                                                                     _scale(kw), normalise_in_loop="never")),
                    (SCALE_TWICE, lambda kw, blocks: _attention(kw["q"], kw["k"], kw["v"], kw.get("causal", False),
                                                                 _scale(kw) ** 2)))

# the loop bound at the block's first row (hi = start_m * BLOCK_M), or the right bound less one key block
_CAUSAL_KERNEL = _KERNEL + ((DIAGONAL_BLOCK_SKIPPED, _causal_kernel(lambda b, hi, bm, bn: b * bm)),
                            (DIAGONAL_BLOCK_SKIPPED, _causal_kernel(lambda b, hi, bm, bn: hi - bn)),
                            (CAUSAL_MASK_FLIPPED, _causal_kernel(flipped=True)),
                            (CAUSAL_BOTTOM_RIGHT, _causal_kernel(shift_mask=True, shift_loop=True)),
                            (CAUSAL_BOTTOM_RIGHT, _causal_kernel(shift_mask=True)))
PARTIAL_NO_SCALE = "the partial scores are not multiplied by scale = 1/sqrt(d) (or the scale argument)"
PARTIAL_NOT_NORMALISED = ("o_part holds acc, not acc / l: each split's partial output is normalised by its own "
                          "sum l before it is stored (the combine weighs it by exp(lse_s - lse))")
PARTIAL_LSE_LOG2 = ("lse_part is in log2 units (m + log2(l) with scores in exp2 units): store the natural-log "
                    "lse, (m2 + log2(l)) * ln(2)")
PARTIAL_LSE_WITHOUT_MAX = "lse_part is log(l) without the running max m: store lse = m + log(l)"
PARTIAL_LSE_MAX_ONLY = "lse_part holds the running max m alone, without log(l): store lse = m + log(l)"
SPLIT_PER_FLOOR = ("the splits are N_K // num_splits keys long (rounded down): the last keys then belong to no "
                   "split; per = ceil(N_K / num_splits) = (N_K + num_splits - 1) // num_splits")
SPLIT_ONE_KEY_OVER = ("each split reads one key past its end (an upper bound of (s + 1) * per + 1, or <= where < "
                      "belongs): split s covers keys [s * per, min((s + 1) * per, N_K)), its end excluded")


def _partials(kw, scale=None, normalised=True, lse="natural", per_floor=False, one_key_over=False):
    """Exercise 14's partial states with one mistake: (o_part, lse_part) as float32. per_floor: splits of
    N_K // num_splits keys (the last keys in none; None where that is the right length); one_key_over: each
    split reads one key past its end."""
    q, k, v = (np.asarray(kw[n], np.float64) for n in ("q", "k", "v"))
    z, nk, d = k.shape
    splits = kw["num_splits"]
    per = max(1, nk // splits) if per_floor else -(-nk // splits)
    if per_floor and per == -(-nk // splits):
        return None
    scale = _scale(kw) if scale is None else scale
    o_part, lse_part = np.zeros((z, splits, v.shape[-1])), np.full((z, splits), -np.inf)
    for s in range(splits):
        lo, hi = min(s * per, nk), min((s + 1) * per + (1 if one_key_over else 0), nk)
        if hi > lo:
            scores = scale * np.einsum("zd,znd->zn", q, k[:, lo:hi])
            m = scores.max(-1, keepdims=True)
            p = np.exp(scores - m)
            acc = np.einsum("zn,znd->zd", p, v[:, lo:hi])
            o_part[:, s] = acc / p.sum(-1, keepdims=True) if normalised else acc
            if lse == "natural":
                lse_part[:, s] = m[:, 0] + np.log(p.sum(-1))
            elif lse == "log2":
                lse_part[:, s] = (m[:, 0] + np.log(p.sum(-1))) / np.log(2.0)
            elif lse == "max_only":
                lse_part[:, s] = m[:, 0]
            else:  # without the max
                lse_part[:, s] = np.log(p.sum(-1))
    return o_part.astype(np.float32), lse_part.astype(np.float32)


def _partials_max_not_carried(kw, blocks):
    """Exercise 14's partial states when each key block's own max replaces the running max (float32)."""
    bn = blocks.get("BLOCK_N")
    q, k, v = (np.asarray(kw[n], np.float64) for n in ("q", "k", "v"))
    z, nk, d = k.shape
    splits, per = kw["num_splits"], -(-nk // kw["num_splits"])
    if not bn or per <= bn:
        return None
    o_part, lse_part = np.zeros((z, splits, v.shape[-1]), np.float32), np.full((z, splits), -np.inf, np.float32)
    overflowed = False
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for s in range(splits):
            lo, hi = min(s * per, nk), min((s + 1) * per, nk)
            m, l = np.full(z, -np.inf, np.float32), np.zeros(z, np.float32)
            acc = np.zeros((z, v.shape[-1]), np.float32)
            for j in range(lo, hi, bn):
                scores = (_scale(kw) * np.einsum("zd,znd->zn", q, k[:, j:min(j + bn, hi)])).astype(np.float32)
                m_new = scores.max(-1)
                alpha, p = np.exp(m - m_new), np.exp(scores - m_new[:, None])
                overflowed |= bool(np.isinf(alpha[np.isfinite(m) & np.isfinite(m_new)]).any())
                l = alpha * l + p.sum(-1)
                acc = alpha[:, None] * acc + np.einsum("zn,znd->zd", p, v[:, j:min(j + bn, hi)].astype(np.float32))
                m = m_new
            if hi > lo:
                o_part[:, s], lse_part[:, s] = acc / l[:, None], m + np.log(l)
    return (o_part, lse_part) if overflowed else None  # the mistake shows only through an overflow


_PARTIALS = ((PARTIAL_NO_SCALE, lambda kw, blocks: _partials(kw, scale=1.0) if _scale(kw) != 1.0 else None),
             (PARTIAL_NOT_NORMALISED, lambda kw, blocks: _partials(kw, normalised=False)),
             (PARTIAL_LSE_LOG2, lambda kw, blocks: _partials(kw, lse="log2")),
             (PARTIAL_LSE_WITHOUT_MAX, lambda kw, blocks: _partials(kw, lse="without_max")),
             (PARTIAL_LSE_MAX_ONLY, lambda kw, blocks: _partials(kw, lse="max_only")),
             (SPLIT_PER_FLOOR, lambda kw, blocks: _partials(kw, per_floor=True)),
             (SPLIT_ONE_KEY_OVER, lambda kw, blocks: _partials(kw, one_key_over=True)),
             (MAX_NOT_CARRIED, _partials_max_not_carried))

ROW_SUM_NOT_RESCALED = ("the running sum l_i is not rescaled by exp(m_i_old - m_i_new) when a later block raises "
                        "the row max")
ROW_MAX_NOT_CARRIED = ("the running max is not carried from one block to the next (m_new = the block's own max, "
                       "not max(m_i, max of the block)): when a later block's values lie far below an earlier "
                       "one's, exp(m_i - m_new) overflows to inf and the row turns NaN")
ROW_EXP2 = "exp2 is used on x - m without the factor log2(e) = 1.4427 (exp2(x log2 e) = exp(x)): use exp, or scale by it"
ROW_NOT_DIVIDED = "the output is exp(x - m) without the division by the row sum l"
ROW_PAD_ZERO = ("the masked columns past the row's end are loaded as 0, not -inf: they add exp(0 - m) to the sum "
                "(use other=-float('inf') in the masked load)")
ROW_ONE_PASS = ("each block is written with the max and sum of the blocks read so far: read the whole row "
                "once for m and l, then a second time to write exp(x - m) / l")


def _row_softmax(kw, blocks, rescale=True, exp2=False, divide=True, pad_zero=False, one_pass=False, carry_max=True,
                 first_block=False):
    """Exercise 12's blockwise row softmax with one mistake, in the input dtype (None if it cannot show).
    carry_max=False is worked in float32, as the kernel's, where its overflow shows; first_block: the max and
    the sum of the row's first block only (pass 1 walks one block)."""
    x = np.asarray(kw["x"], np.float64 if carry_max else np.float32)
    bn = kw.get("block_n") or blocks.get("BLOCK_N") or 32
    n = x.shape[-1]
    if (not rescale or one_pass or not carry_max or first_block) and n <= bn or pad_zero and n % bn == 0:
        return None
    if first_block:
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            m = x[..., :bn].max(axis=-1, keepdims=True)
            m = np.where(m == -np.inf, 0.0, m)
            return (np.exp(x - m) / np.exp(x[..., :bn] - m).sum(axis=-1, keepdims=True)).astype(kw["x"].dtype)
    ex = (lambda a: np.exp2(a)) if exp2 else np.exp
    out = np.empty_like(x)
    overflowed = False
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m, l = np.full(x.shape[:-1], -np.inf, x.dtype), np.zeros(x.shape[:-1], x.dtype)
        for j in range(0, n, bn):
            block = x[..., j:j + bn]
            if pad_zero and block.shape[-1] < bn:
                block = np.concatenate([block, np.zeros(block.shape[:-1] + (bn - block.shape[-1],))], axis=-1)
            m_new = np.maximum(m, block.max(axis=-1)) if carry_max else block.max(axis=-1)
            overflowed |= bool(np.isinf(ex(m - m_new)[np.isfinite(m) & np.isfinite(m_new)]).any())
            m_ref = np.where(m_new == -np.inf, 0.0, m_new)
            l = (ex(m - m_ref) if rescale else 1.0) * l + ex(block - m_ref[..., None]).sum(axis=-1)
            m = m_new
            if one_pass:
                out[..., j:j + bn] = ex(x[..., j:j + bn] - m_ref[..., None]) / l[..., None]
        if not one_pass:
            out = ex(x - np.where(m == -np.inf, 0.0, m)[..., None]) / (l[..., None] if divide else 1.0)
    if not carry_max and not overflowed:
        return None  # the mistake shows only through an overflow (see _attention)
    return out.astype(kw["x"].dtype)


def _row_softmax_lanes_not_rescaled(kw, blocks):
    """Exercise 12's row softmax kept per lane (m and l vectors of BLOCK_N lanes, each lane walking the
    columns lane, lane + BLOCK_N, ..., merged after the loop), with each lane's sum not rescaled when its
    max rises; in the input dtype (None where a row fits one block, where nothing is rescaled)."""
    x = np.asarray(kw["x"], np.float64)
    bn = kw.get("block_n") or blocks.get("BLOCK_N") or 32
    n = x.shape[-1]
    if n <= bn:
        return None
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        padded = np.concatenate([x, np.full(x.shape[:-1] + (-n % bn,), -np.inf)], axis=-1)
        lanes = padded.reshape(x.shape[:-1] + (-1, bn))  # (..., blocks, BLOCK_N)
        m = np.full(x.shape[:-1] + (bn,), -np.inf)
        l = np.zeros(x.shape[:-1] + (bn,))
        for j in range(lanes.shape[-2]):
            m_new = np.maximum(m, lanes[..., j, :])
            l = l + np.exp(lanes[..., j, :] - np.where(m_new == -np.inf, 0.0, m_new))  # l never rescaled
            m = m_new
        m_row = m.max(axis=-1)  # (...)
        l_row = (l * np.exp(m - m_row[..., None])).sum(axis=-1)
        out = np.exp(x - m_row[..., None]) / l_row[..., None]
    return out.astype(kw["x"].dtype)


ROWS_BY_LENGTH = ("x's rows are read n_cols apart (the row length), not x.stride(0) apart: here x is a column "
                  "slice of a wider array, its rows further apart than their length (step by x.stride(0) for x "
                  "and by out.stride(0) for out)")


def rows_by_length(kw, blocks):
    """A row softmax whose program r reads x at r * n_cols (its row length) when x's rows lie
    ``kw["row_padding"]["x"]`` elements further apart, -inf between them, as the grader lays the case out."""
    pad = int((kw.get("row_padding") or {}).get("x", 0))
    x = np.asarray(kw["x"], np.float64)
    if not pad or x.ndim != 2 or x.shape[0] < 2:
        return None
    m, n = x.shape
    flat = np.concatenate([x, np.full((m, pad), -np.inf)], axis=1).reshape(-1)
    windows = np.stack([flat[r * n:r * n + n] for r in range(m)])
    with np.errstate(invalid="ignore", over="ignore"):
        e = np.exp(windows - windows.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).astype(kw["x"].dtype)


ROW_FIRST_BLOCK_ONLY = ("the max and the sum come from the row's first block only: pass 1 walks every block of the "
                        "row, for start in range(0, n_cols, BLOCK_N)")
_ROW_SOFTMAX = ((ROW_SUM_NOT_RESCALED, lambda kw, blocks: _row_softmax(kw, blocks, rescale=False)),
                (ROW_SUM_NOT_RESCALED, _row_softmax_lanes_not_rescaled),
                (ROW_FIRST_BLOCK_ONLY, lambda kw, blocks: _row_softmax(kw, blocks, first_block=True)),
                (ROW_EXP2, lambda kw, blocks: _row_softmax(kw, blocks, exp2=True)),
                (ROW_NOT_DIVIDED, lambda kw, blocks: _row_softmax(kw, blocks, divide=False)),
                (ROW_PAD_ZERO, lambda kw, blocks: _row_softmax(kw, blocks, pad_zero=True)),
                (ROW_ONE_PASS, lambda kw, blocks: _row_softmax(kw, blocks, one_pass=True)),
                (ROW_MAX_NOT_CARRIED, lambda kw, blocks: _row_softmax(kw, blocks, carry_max=False)),
                (ROWS_BY_LENGTH, rows_by_length))

BWD_NO_DELTA = "dS is P * dP without the D_i term: dS = P * (dP - D_i[:, None]), D = rowsum(dO * O)"
BWD_DK_UNSCALED = "dK is dS^T Q without the factor scale (dK = scale dS^T Q)"
BWD_DQ_UNSCALED = "dQ is dS K without the factor scale (dQ = scale dS K)"
BWD_OVERWRITTEN = ("the accumulator is overwritten in the loop (dk = ..., not dk += ...): only the last block "
                   "the loop visits is kept")
BWD_DIAGONAL_HIDDEN = ("the causal mask hides the diagonal (it keeps key c only where c < r): the key at a query's "
                       "own position counts in the forward, so it must in P here too; mask only keys c > r")
BWD_CAUSAL_FLIPPED = "the causal mask is on the wrong side: key c counts for query row r when c <= r, not c >= r"


def _backward(kw, blocks, delta=True, scale_dk=True, scale_dq=True, rows=None, cols=None, flipped=False,
              hide_diagonal=False, scale_s=True, subtract_lse=True, mask=True, visited=None, tile_max=None):
    """(dq, dk, dv) of exercise 13 with one mistake, float64; P from the given lse, D from the given o.
    rows / cols: only these query rows / key columns contribute (an overwritten accumulator); scale_s=False:
    P from unscaled scores; subtract_lse=False: P = exp(S); mask=False: a causal case's P not masked;
    tile_max=BLOCK_N: P = exp(S - each row's max over its key block), taken before the mask, a last partial
    block's missing keys (loaded as 0) scoring 0."""
    q, k, v, o, do = (np.asarray(kw[n], np.float64) for n in ("q", "k", "v", "o", "do"))
    lse = np.asarray(kw["lse"], np.float64)
    scale = _scale(kw)
    nq, nk = q.shape[-2], k.shape[-2]
    r, c = np.arange(nq)[:, None], np.arange(nk)[None, :]
    keep = np.ones((nq, nk), bool)
    if kw.get("causal") and mask:
        keep = c >= r if flipped else c < r if hide_diagonal else c <= r
    elif kw.get("causal") and visited is not None:  # P unmasked in the tiles a causal loop visits
        keep = visited(r, c, blocks)
    if rows is not None:
        keep = keep & np.isin(np.arange(nq), rows)[:, None]
    if cols is not None:
        keep = keep & np.isin(np.arange(nk), cols)[None, :]
    with np.errstate(over="ignore", invalid="ignore"):
        s = (scale if scale_s else 1.0) * (q @ np.swapaxes(k, -1, -2))  # (..., Nq, Nk)
        if tile_max:
            shift = np.empty_like(s)
            for c0 in range(0, nk, tile_max):
                block = s[..., c0:c0 + tile_max].max(axis=-1, keepdims=True)
                shift[..., c0:c0 + tile_max] = np.maximum(block, 0.0) if c0 + tile_max > nk else block
        else:
            shift = lse[..., None] if subtract_lse else 0.0
        p = np.where(keep, np.exp(s - shift), 0.0)
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (do * o).sum(-1)[..., None]) if delta else p * dp
    dk = (scale if scale_dk else 1.0) * (np.swapaxes(ds, -1, -2) @ q)
    dq = (scale if scale_dq else 1.0) * (ds @ k)
    dv = np.swapaxes(p, -1, -2) @ do
    return dq, dk, dv


def _dkdv(**options):
    def detector(kw, blocks):
        _, dk, dv = _backward(kw, blocks, **options)
        return dk.astype(np.float32), dv.astype(np.float32)
    return detector


def _dq(**options):
    def detector(kw, blocks):
        return _backward(kw, blocks, **options)[0].astype(np.float32)
    return detector


def _last_block(size_key, block_key):
    """Rows (or columns) of the last block a non-causal loop visits, when there is more than one."""
    def rows(kw, blocks):
        n, b = kw[size_key].shape[-2], blocks.get(block_key)
        if kw.get("causal") or type(b) is not int or n <= b:
            return None
        return np.arange((n - 1) // b * b, n)
    return rows


def _overwritten(part, which=("dk", "dv")):
    """An accumulator overwritten instead of added to: dq, or dk and / or dv (``which``)."""
    rows_of = _last_block("q", "BLOCK_M") if part == "dkdv" else _last_block("k", "BLOCK_N")

    def detector(kw, blocks):
        last = rows_of(kw, blocks)
        if last is None:
            return None
        if part == "dq":
            return _dq(cols=last)(kw, blocks)
        wrong, right = _dkdv(rows=last)(kw, blocks), _dkdv()(kw, blocks)
        return tuple(w if name in which else r for name, w, r in zip(("dk", "dv"), wrong, right))
    return detector


def _causal_only(detector):
    return lambda kw, blocks: detector(kw, blocks) if kw.get("causal") else None


_DKDV = ((BWD_NO_DELTA, _dkdv(delta=False)), (BWD_DK_UNSCALED, _dkdv(scale_dk=False)),
         (BWD_OVERWRITTEN, _overwritten("dkdv")), (BWD_OVERWRITTEN, _overwritten("dkdv", ("dk",))),
         (BWD_OVERWRITTEN, _overwritten("dkdv", ("dv",))), (BWD_CAUSAL_FLIPPED, _causal_only(_dkdv(flipped=True))),
         (BWD_DIAGONAL_HIDDEN, _causal_only(_dkdv(hide_diagonal=True))))
_DQ = ((BWD_NO_DELTA, _dq(delta=False)), (BWD_DQ_UNSCALED, _dq(scale_dq=False)),
       (BWD_OVERWRITTEN, _overwritten("dq")), (BWD_CAUSAL_FLIPPED, _causal_only(_dq(flipped=True))),
       (BWD_DIAGONAL_HIDDEN, _causal_only(_dq(hide_diagonal=True))))

DS_NO_BRACKETS = ("dS = P * dP - D: the brackets are missing; D is subtracted from dP before the product: "
                  "dS = P * (dP - D[..., None])")
DS_WITHOUT_P = "dS is dP - D without the factor P: dS = P * (dP - D[..., None])"
DS_SIGN = "dS has the wrong sign: P * (D - dP), not P * (dP - D)"
DS_D_PER_COLUMN = ("D is broadcast along the wrong axis (one value per column, D[None, :] or plain D on a square "
                   "tile): D has one value per row, D[..., None]")


DS_D_FROM_DP = ("D is recomputed as rowsum(dP), without P (and the D argument left unused): D_i = sum_j P_ij dP_ij "
                "= rowsum(dO * O), the value passed in as D")


def _softmax_backward(brackets=True, times_p=True, sign=1.0, d_axis=-1, d_from_dp=False):
    """Exercise 09's dS from (p, dp, D) with one mistake, in the input dtype; ``d_axis=-2`` puts D's
    value i on column i, which only a square tile allows (None otherwise); ``d_from_dp``: D taken as
    rowsum(dP) instead of the D given."""
    def detector(kw, blocks):
        p, dp, d = (np.asarray(kw[n], np.float64) for n in ("p", "dp", "D"))
        if d_axis == -2 and p.shape[-1] != p.shape[-2]:
            return None
        if d_from_dp:
            d = dp.sum(axis=-1)  # (..., Nq)
        d = d[..., None] if d_axis == -1 else d[..., None, :]  # (..., Nq, 1) or (..., 1, Nk)
        ds = p * dp - d if not brackets else (p if times_p else 1.0) * (dp - d)
        return (sign * ds).astype(kw["p"].dtype)
    return detector


_SOFTMAX_BACKWARD = ((DS_NO_BRACKETS, _softmax_backward(brackets=False)),
                     (DS_WITHOUT_P, _softmax_backward(times_p=False)),
                     (DS_SIGN, _softmax_backward(sign=-1.0)),
                     (DS_D_PER_COLUMN, _softmax_backward(d_axis=-2)),
                     (DS_D_FROM_DP, _softmax_backward(d_from_dp=True)))

P_SCORES_UNSCALED = ("P is recomputed from scores without the scale: P = exp(scale Q_i K_j^T - lse_i), the scores "
                     "the forward's lse was taken over")
D_PER_TILE = ("D is computed per key tile (rowsum(P * dP) over the tile's keys, or rowsum(dO * O) with a partial "
              "O): D must come from the whole row, D = rowsum(dO * O) with the O the forward returned, once, before "
              "the loops (FlashAttention-2 Algorithm 2, line 4); dV does not use D, which is why it alone is right")


def _tiled_backward(kw, d_per_tile=False, delta=True, scale_dq=True, scale_dk=True, hide_diagonal=False,
                    dq_last_tile=False, last_q_block=(), scale_s=True, d_times_o=True, chunk=64):
    """Exercise 10's (dq, dk, dv) with one mistake, float64 inside, in the input dtype; query rows
    ``chunk`` at a time, so the memory case never holds an Nq x Nk array.
    d_per_tile: D of row r in key tile j is the sum of P * dP over the tile's keys only.
    scale_s=False: P = exp(Q K^T - lse), the scale left out of the recomputed scores.
    d_times_o=False: D = rowsum(dO), the factor O left out.
    dq_last_tile: dQ_i overwritten (=, not +=), so only the last key tile query block i visits
    counts; last_q_block ("dk", "dv" or both): those accumulators overwritten, so only the last
    query block counts."""
    q, k, v, o, do, lse = (np.asarray(kw[n], np.float64) for n in ("q", "k", "v", "o", "do", "lse"))
    scale, causal = _scale(kw), kw.get("causal", False)
    nq, nk = q.shape[-2], k.shape[-2]
    bq, bk = kw.get("block_q", 64), kw.get("block_k", 64)
    if (d_per_tile or dq_last_tile) and nk <= bk or last_q_block and nq <= bq:
        return None  # one tile: the mistake changes nothing
    cols = np.arange(nk)
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    last_q0 = (nq - 1) // bq * bq
    for r0 in range(0, nq, chunk):
        rows = np.arange(r0, min(r0 + chunk, nq))
        keep = np.ones((rows.size, nk), bool)
        if causal:
            keep = cols[None, :] < rows[:, None] if hide_diagonal else cols[None, :] <= rows[:, None]
        if dq_last_tile:  # the last key tile each row's query block visits (causal: up to the block's last row)
            q1 = np.minimum((rows // bq + 1) * bq, nq)  # (rows,)
            last = (np.minimum(q1 - 1, nk - 1) if causal else np.full(rows.size, nk - 1)) // bk * bk
            keep_dq = keep & (cols[None, :] >= last[:, None])
        with np.errstate(over="ignore", invalid="ignore"):
            s = (scale if scale_s else 1.0) * (q[..., rows, :] @ np.swapaxes(k, -1, -2))  # (..., rows, Nk)
            p = np.where(keep, np.exp(s - lse[..., rows, None]), 0.0)
        do_r = do[..., rows, :]  # (..., rows, dv)
        dp = do_r @ np.swapaxes(v, -1, -2)  # (..., rows, Nk)
        if not delta:
            d = 0.0
        elif d_per_tile:
            d = np.repeat(np.add.reduceat(p * dp, np.arange(0, nk, bk), axis=-1), bk, axis=-1)[..., :nk]
        else:
            d = (do_r * (o[..., rows, :] if d_times_o else 1.0)).sum(-1)[..., None]
        ds = p * (dp - d)  # (..., rows, Nk)
        dq[..., rows, :] = (scale if scale_dq else 1.0) * (np.where(keep_dq, ds, 0.0) if dq_last_tile else ds) @ k
        counts = {n: (rows >= last_q0)[:, None] if n in last_q_block else True for n in ("dk", "dv")}  # (rows, 1)
        dk += (scale if scale_dk else 1.0) * np.swapaxes(np.where(counts["dk"], ds, 0.0), -1, -2) @ q[..., rows, :]
        dv += np.swapaxes(np.where(counts["dv"], p, 0.0), -1, -2) @ do_r
    return tuple(t.astype(kw[n].dtype) for t, n in ((dq, "q"), (dk, "k"), (dv, "v")))


P_TILE_SOFTMAX = ("P is recomputed as each key tile's own softmax (a max and a sum over the tile's keys): P is the "
                  "forward's probabilities over the whole row, P = exp(scale Q_i K_j^T - lse_i) with the lse the "
                  "forward saved, no max or sum per tile (FlashAttention-2 Algorithm 2, line 11); a causal row "
                  "whose keys in a tile are all masked then gives 0/0 = NaN")
P_TILE_MAX = ("P is recomputed as exp(S - the tile's own row max): the forward's lse is what makes P the "
              "softmax over the whole row, P = exp(scale Q_i K_j^T - lse_i) (FlashAttention-2 Algorithm 2, line 11); "
              "no max per tile, since exp(S - lse) <= 1 cannot overflow")
DK_UNTRANSPOSED = ("dK_j is accumulated as dS Q_i, without the transpose: dS is (query rows x keys), so dK_j += "
                   "scale dS^T Q_i (np.swapaxes(ds, -1, -2) @ q_i); on square tiles the shapes fit and only the "
                   "numbers are wrong (a ragged tile raises)")
D_WITHOUT_O = ("D is rowsum(dO) without the factor O: D = rowsum(dO * O), with the O the forward returned, "
               "once, before the loops (FlashAttention-2 Algorithm 2, line 4)")


BWD_CAUSAL_UNMASKED = ("the recomputed P is not causally masked: in a causal backward the scores of keys after the "
                       "query row (key c > row r) are -inf before P = exp(S - lse), as in the forward; the tiles on "
                       "the diagonal hold such keys, so P there is not 0 where it must be")


def _tile_loop(kw, tile_softmax=False, dk_untransposed=False, mask=True, tile_max=False):
    """Exercise 10's loops tile by tile as the solution runs them (key blocks outside, query blocks
    inside, fully masked tiles skipped), float64, in the input dtype, with one mistake:
    tile_softmax: P = softmax of the tile's masked scores over the tile's keys (NaN in a row whose keys
    in the tile are all masked, which spreads to that tile's dK_j, dV_j and the row's dQ, as in the
    learner's loop); tile_max: P = exp(S - the tile's row max), the max taken before the causal mask (no
    NaN: masked scores still give 0); dk_untransposed: dK_j += scale dS Q_i, None unless every visited tile is square
    (the learner's code raises there); mask=False: the causal tiles visited, their scores not masked. At most
    4096 tiles (the memory case has 1024)."""
    q, k, v, o, do, lse = (np.asarray(kw[n], np.float64) for n in ("q", "k", "v", "o", "do", "lse"))
    scale, causal = _scale(kw), kw.get("causal", False)
    nq, nk = q.shape[-2], k.shape[-2]
    bq, bk = kw.get("block_q", 64), kw.get("block_k", 64)
    if -(-nq // bq) * -(-nk // bk) > 4096:
        return None
    D = (do * o).sum(axis=-1)  # (..., Nq)
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        for k0 in range(0, nk, bk):
            k1 = min(k0 + bk, nk)
            k_j, v_j = k[..., k0:k1, :], v[..., k0:k1, :]  # (..., Bk, d), (..., Bk, dv)
            for q0 in range(0, nq, bq):
                q1 = min(q0 + bq, nq)
                if causal and k0 > q1 - 1:
                    continue
                if dk_untransposed and q1 - q0 != k1 - k0:
                    return None  # ds @ q_i raises on this tile
                q_i, do_i = q[..., q0:q1, :], do[..., q0:q1, :]
                s = scale * (q_i @ np.swapaxes(k_j, -1, -2))  # (..., Bq, Bk)
                row_max = s.max(axis=-1, keepdims=True)  # the tile's, before the mask
                if causal and mask:
                    s = np.where(np.arange(k0, k1)[None, :] > np.arange(q0, q1)[:, None], -np.inf, s)
                if tile_max:
                    p = np.exp(s - row_max)
                elif tile_softmax:
                    p = np.exp(s - s.max(axis=-1, keepdims=True))
                    p = p / p.sum(axis=-1, keepdims=True)
                else:
                    p = np.exp(s - lse[..., q0:q1, None])
                dv[..., k0:k1, :] += np.swapaxes(p, -1, -2) @ do_i
                ds = p * (do_i @ np.swapaxes(v_j, -1, -2) - D[..., q0:q1, None])  # (..., Bq, Bk)
                dq[..., q0:q1, :] += scale * (ds @ k_j)
                dk[..., k0:k1, :] += scale * (ds @ q_i if dk_untransposed else np.swapaxes(ds, -1, -2) @ q_i)
    return tuple(t.astype(kw[n].dtype) for t, n in ((dq, "q"), (dk, "k"), (dv, "v")))


def _tile_softmax(kw, blocks):
    """None where every visited tile holds the whole row (one key tile, no row fully masked in it):
    the tile's softmax is then the row's."""
    if kw["k"].shape[-2] <= kw.get("block_k", 64):
        return None
    return _tile_loop(kw, tile_softmax=True)


def _tiled_backward_mistake(**options):
    return lambda kw, blocks: _tiled_backward(kw, **options)


_TILED_BACKWARD = ((D_PER_TILE, _tiled_backward_mistake(d_per_tile=True)),
                   (BWD_NO_DELTA, _tiled_backward_mistake(delta=False)),
                   (BWD_DQ_UNSCALED, _tiled_backward_mistake(scale_dq=False)),
                   (BWD_DK_UNSCALED, _tiled_backward_mistake(scale_dk=False)),
                   (BWD_OVERWRITTEN, _tiled_backward_mistake(dq_last_tile=True)),
                   *((BWD_OVERWRITTEN, _tiled_backward_mistake(last_q_block=which))
                     for which in (("dk", "dv"), ("dk",), ("dv",))),
                   (BWD_DIAGONAL_HIDDEN, _causal_only(_tiled_backward_mistake(hide_diagonal=True))),
                   (P_SCORES_UNSCALED, lambda kw, blocks: _tiled_backward(kw, scale_s=False) if _scale(kw) != 1.0
                    else None),
                   (P_TILE_SOFTMAX, _tile_softmax),
                   (P_TILE_MAX, lambda kw, blocks: _tile_loop(kw, tile_max=True)),
                   (DK_UNTRANSPOSED, lambda kw, blocks: _tile_loop(kw, dk_untransposed=True)),
                   (D_WITHOUT_O, _tiled_backward_mistake(d_times_o=False)),
                   (BWD_CAUSAL_UNMASKED, _causal_only(lambda kw, blocks: _tile_loop(kw, mask=False))),
                   (BWD_CAUSAL_UNMASKED, _causal_only(lambda kw, blocks: _tiled_backward(dict(kw, causal=False)))))

AUTOGRAD_NO_SCALE = "the scores are not multiplied by scale = 1/sqrt(d) (S = scale Q K^T, in forward and backward)"
AUTOGRAD_ORDER = ("the gradients come back in the wrong order: backward returns one gradient per input of forward, "
                  "in forward's order (dq, dk, dv, then None for causal)")


def _autograd(kw, scale=None, order=(0, 1, 2)):
    """Exercise 15's (o, dq, dk, dv) with one mistake (None where the gradients' shapes tell the order apart)."""
    from flashlab.reference import naive_attention, naive_attention_backward

    f64 = [np.asarray(kw[n], np.float64) for n in ("q", "k", "v", "do")]
    scale = _scale(kw) if scale is None else scale
    grads = naive_attention_backward(*f64, causal=kw.get("causal", False), scale=scale)
    if any(grads[i].shape != grads[j].shape for j, i in enumerate(order)):
        return None
    o = naive_attention(*f64[:3], causal=kw.get("causal", False), scale=scale)
    return tuple(t.astype(kw["q"].dtype) for t in (o, *(grads[i] for i in order)))


AUTOGRAD_P_UNMASKED = ("backward recomputes P = exp(S - lse) without the causal mask: P must be 0 where the key "
                       "is past the query (mask S with -inf there, as the forward does, before the exp)")


def _autograd_p_unmasked(tile=None):
    """Exercise 15's (o, dq, dk, dv) when backward recomputes P without the causal mask (causal cases):
    in every (query, key) pair, or (``tile``: square tiles, 8 to 64; the stub's 16) only in the tiles a causal
    loop visits, those whose query block is not before the key block."""
    def detector(kw, blocks):
        from flashlab.reference import naive_attention

        if not kw.get("causal"):
            return None
        q, k, v, do = (np.asarray(kw[n], np.float64) for n in ("q", "k", "v", "do"))
        scale = _scale(kw)
        o, lse = naive_attention(q, k, v, causal=True, scale=scale, return_lse=True)
        rows, cols = np.arange(q.shape[-2])[:, None], np.arange(k.shape[-2])[None, :]
        visited = np.ones((rows.size, cols.size), bool) if tile is None else rows // tile >= cols // tile
        with np.errstate(over="ignore", invalid="ignore"):
            p = np.where(visited, np.exp(scale * (q @ np.swapaxes(k, -1, -2)) - lse[..., None]), 0.0)
            ds = p * (do @ np.swapaxes(v, -1, -2) - (do * o).sum(-1)[..., None])
            grads = scale * (ds @ k), scale * (np.swapaxes(ds, -1, -2) @ q), np.swapaxes(p, -1, -2) @ do
        return tuple(t.astype(kw["q"].dtype) for t in (o, *grads))
    return detector


def _lse_no_scale(kw, blocks):
    from flashlab.reference import naive_attention

    f64 = [np.asarray(kw[n], np.float64) for n in ("q", "k", "v")]
    o, lse = naive_attention(*f64, causal=kw.get("causal", False), scale=1.0, return_lse=True)
    return o.astype(kw["q"].dtype), lse.astype(kw["q"].dtype)


_AUTOGRAD = ((AUTOGRAD_NO_SCALE, lambda kw, blocks: _autograd(kw, scale=1.0)),
             *((AUTOGRAD_P_UNMASKED, _autograd_p_unmasked(tile)) for tile in (None, 8, 16, 32, 64))) + tuple(
    (AUTOGRAD_ORDER, lambda kw, blocks, order=order: _autograd(kw, order=order))
    for order in ((1, 0, 2), (0, 2, 1), (2, 1, 0), (1, 2, 0), (2, 0, 1)))

RAGGED_COUNTED_FULL = ("ragged last blocks were counted as full blocks: the last query block moves only its real "
                       "rows (Q_i read, O_i and lse_i written), the last key block only its real keys (K_j, V_j "
                       "read); count min(start + block, n) - start of each")
RAGGED_ROWS_COUNTED_FULL = ("the ragged last query block was counted as a full block: it reads Q_i and writes O_i "
                            "and lse_i for its real rows only, min(i0 + block_q, nq) - i0 of them")
RAGGED_KEYS_COUNTED_FULL = ("the ragged last key block was counted as a full block: each tile of it reads K_j and "
                            "V_j for its real keys only, min(j0 + block_k, nk) - j0 of them")
RAGGED_SKIP_AS_FULL = ("the causal skip takes the ragged last query block as full: its last row is min((i + 1) * "
                       "block_q, nq) - 1, so a key block starting past it is skipped and reads nothing (exercise 04)")


def _fa2_bytes(kw, full_rows=False, full_cols=False, full_skip=False):
    """Exercise 05's bytes, walked as the loop moves them, with a ragged last query block counted as
    block_q rows (``full_rows``) or a ragged last key block as block_k keys (``full_cols``);
    ``full_skip``: the causal skip takes the last query row of every block as (i + 1) * block_q - 1.
    None where an option asked for changes nothing here (its block divides n, or a causal loop never
    reads the block): the count is then the right one, or another option's."""
    nq, nk, d, bq, bk = (kw[n] for n in ("nq", "nk", "d", "block_q", "block_k"))
    dv = d if kw.get("dv") is None else kw["dv"]
    item, stat, causal = kw.get("itemsize", 2), kw.get("stat_itemsize", 4), kw.get("causal", False)
    if (full_rows or full_skip) and nq % bq == 0 or full_cols and nk % bk == 0:
        return None
    total = 0
    for i0 in range(0, nq, bq):
        rows = min(i0 + bq, nq) - i0  # the block's real rows
        last_row = i0 + (bq if full_skip else rows) - 1
        counted = bq if full_rows else rows
        total += counted * (d + dv) * item + counted * stat  # Q_i read; O_i, lse_i written
        for j0 in range(0, nk, bk):
            if causal and j0 > last_row:
                break
            total += (bk if full_cols else min(j0 + bk, nk) - j0) * (d + dv) * item  # K_j, V_j read
    return None if (full_rows or full_cols or full_skip) and total == _fa2_bytes(kw) else total


_TRAFFIC = tuple((description, lambda kw, blocks, options=options: _fa2_bytes(kw, *options))
                 for description, options in ((RAGGED_COUNTED_FULL, (True, True, True)),
                                              (RAGGED_COUNTED_FULL, (True, True, False)),
                                              (RAGGED_ROWS_COUNTED_FULL, (True, False, True)),
                                              (RAGGED_ROWS_COUNTED_FULL, (True, False, False)),
                                              (RAGGED_KEYS_COUNTED_FULL, (False, True, False)))) + (
    (RAGGED_SKIP_AS_FULL, lambda kw, blocks: _fa2_bytes(kw, full_skip=True) if kw.get("causal") else None),)


# (exercise, part) -> detectors; used when the registry's Part gives none of its own.
MISTAKES = {
    ("ex01_naive", "naive_attention"): _ATTENTION + ((GLOBAL_MAX, _attention_global_max(None)),
                                                     (GLOBAL_MAX, _attention_global_max((-2, -1)))),
    ("ex02_softmax", "safe_softmax"): _GLOBAL_MAX,
    ("ex02_softmax", "online_softmax"): tuple(
        (description, lambda kw, blocks, detector=detector: detector(dict(kw, block_n=kw["chunk"]), blocks))
        for description, detector in _ROW_SOFTMAX if description in (ROW_SUM_NOT_RESCALED, ROW_MAX_NOT_CARRIED)
    ) + ((ONLINE_SHARED_MAX, _online_shared_max(None)), (ONLINE_SHARED_MAX, _online_shared_max(0))),
    ("ex03_tiled_forward", "tiled_attention"): _TILED_LOOP,
    ("ex05_traffic", "fa2_forward_bytes"): _TRAFFIC,
    ("ex07_kernel_inner_loop", "flash_forward"): _KERNEL,
    ("ex08_kernel_causal", "flash_forward"): _CAUSAL_KERNEL,
    ("ex09_backward_pieces", "softmax_backward"): _SOFTMAX_BACKWARD,
    ("ex10_tiled_backward", "tiled_attention_backward"): _TILED_BACKWARD,
    ("ex14_split_kv_decode", "split_kv_partials"): _PARTIALS,
    ("ex06_triton_primer", "row_softmax"): ((ROWS_BY_LENGTH, rows_by_length),),
    ("ex12_triton_online_softmax", "online_row_softmax"): _ROW_SOFTMAX,
    ("ex13_triton_backward", "flash_backward_dkdv"): _DKDV,
    ("ex13_triton_backward", "flash_backward_dq"): _DQ,
    ("ex15_autograd_flash", "flash_forward_lse"): ((AUTOGRAD_NO_SCALE, _lse_no_scale),),
    ("ex15_autograd_flash", "forward_and_backward"): _AUTOGRAD,
}


# ----------------------------------------------------------------------------- ex14 combine, ex04 tile count, ex11 quiz
COMBINE_WITHOUT_MAX = ("the splits are combined without subtracting the largest lse first (weights exp(lse_s) / "
                       "sum_s exp(lse_s), or log(sum_s exp(lse_s)) as lse): exp() overflows to inf once an lse passes "
                       "88 (float32) or 709 (float64), and inf / inf is NaN (exp(lse_s - inf) is 0); weight each split "
                       "by exp(lse_s - lse) with lse = logsumexp over the splits (torch.logsumexp subtracts the max)")


def _combine_without_max(work_dtype, log_of_sum: bool):
    """Exercise 14's combine_splits without the max, worked in ``work_dtype``: w = exp(lse_s) /
    sum exp(lse_s), or (``log_of_sum``) w = exp(lse_s - log(sum exp(lse_s))). None unless some exp(lse_s)
    overflows there: otherwise the mistake changes nothing (a row with no key is NaN either way)."""
    def detector(kw, blocks):
        o_part = np.asarray(kw["o_part"])  # (Z, S, d)
        lse_part = np.asarray(kw["lse_part"]).astype(work_dtype)  # (Z, S)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            e = np.exp(lse_part)  # (Z, S)
            if not np.isinf(e[np.isfinite(lse_part)]).any():
                return None
            total = e.sum(-1, keepdims=True)  # (Z, 1)
            w = np.exp(lse_part - np.log(total)) if log_of_sum else e / total
            return (w[..., None] * o_part.astype(work_dtype)).sum(1).astype(o_part.dtype)
    return detector


COMBINE_MEAN = ("the splits are averaged (o = the mean of o_s): split s weighs exp(lse_s - lse), its share of the "
                "row's sum exp(lse) = sum_s exp(lse_s), not 1 / num_splits")
_COMBINE = tuple((COMBINE_WITHOUT_MAX, _combine_without_max(dtype, log_of_sum))
                 for dtype in (np.float32, np.float64) for log_of_sum in (False, True)) + (
    (COMBINE_MEAN, lambda kw, blocks: np.asarray(kw["o_part"], np.float64).mean(axis=1).astype(
        np.asarray(kw["o_part"]).dtype) if np.asarray(kw["o_part"]).shape[1] > 1 else None),)

_COUNT_BUILDS_ON = (" (count_computed_tiles builds on causal_tile_skipped: count the tiles (i, j) it says are "
                    "computed rather than with a rule of its own, and if that part fails too, fix the rule there)")
COUNT_UNCLIPPED = ("the skip rule takes a query block's last row as (i + 1) * block_q - 1, not clipped to nq: the "
                   "ragged last block ends at row nq - 1 (min((i + 1) * block_q, nq) - 1), so a key block starting "
                   "past nq - 1 is skipped, and this count computes it" + _COUNT_BUILDS_ON)
COUNT_ONE_OFF = ("the skip rule is one off (>= for >): a key block that starts exactly at a query block's last row is "
                 "computed, since that row sees the block's first key; skip only when j * block_k > the last row"
                 + _COUNT_BUILDS_ON)
COUNT_BOTH = ("the skip rule is off twice: the last row is taken as (i + 1) * block_q - 1, not clipped to nq, and "
              "the comparison is >= for >: skip when j * block_k > min((i + 1) * block_q, nq) - 1" + _COUNT_BUILDS_ON)
# exercise 04's count with a wrong skip rule: (unclipped last row, >= for >)
_COUNT_RULES = {COUNT_UNCLIPPED: (True, False), COUNT_ONE_OFF: (False, True), COUNT_BOTH: (True, True)}


def _tiles_counted(kw, unclipped: bool, inclusive: bool) -> int:
    nq, nk, bq, bk = kw["nq"], kw["nk"], kw["block_q"], kw["block_k"]
    count = 0
    for i in range(-(-nq // bq)):
        last = (i + 1) * bq - 1 if unclipped else min((i + 1) * bq, nq) - 1
        count += sum(not (j * bk >= last if inclusive else j * bk > last) for j in range(-(-nk // bk)))
    return count


def _rule_counts(kw):
    """(right, unclipped, one off, both) counts; None without causal (every rule counts every tile)."""
    if not kw.get("causal"):
        return None
    return (_tiles_counted(kw, False, False), *(_tiles_counted(kw, *rule) for rule in _COUNT_RULES.values()))


def _count_with_rule(description):
    """The count a wrong skip rule gives, where it is wrong. The unclipped last row only adds tiles and
    >= only removes them, so the two never give one wrong count; the rule with both is named only where
    neither alone gives its count (where one change alone does, that one is named)."""
    def detector(kw, blocks):
        counts = _rule_counts(kw)
        if counts is None:
            return None
        right, unclipped, one_off, both = counts
        mine = {COUNT_UNCLIPPED: unclipped, COUNT_ONE_OFF: one_off, COUNT_BOTH: both}[description]
        return None if mine == right or description == COUNT_BOTH and mine in (unclipped, one_off) else mine
    return detector


COUNT_BLOCKS_FLOORED = ("the blocks are counted as nq // block_q and nk // block_k (rounded down): a ragged last "
                        "block is a tile too, so there are ceil(nq / block_q) = -(-nq // block_q) query blocks (and "
                        "the same for the keys)")


def _count_floored(kw, blocks):
    nq, nk, bq, bk = kw["nq"], kw["nk"], kw["block_q"], kw["block_k"]
    if nq % bq == 0 and nk % bk == 0:
        return None
    def count(n_i, n_j):
        if not kw.get("causal"):
            return n_i * n_j
        return sum(not (j * bk > min((i + 1) * bq, nq) - 1) for i in range(n_i) for j in range(n_j))
    floored = count(nq // bq, nk // bk)
    return None if floored == count(-(-nq // bq), -(-nk // bk)) else floored  # the ragged blocks skipped anyway


_COUNT_TILES = tuple((d, _count_with_rule(d)) for d in _COUNT_RULES) + ((COUNT_BLOCKS_FLOORED, _count_floored),)


def _quiz_answer(value):
    return lambda kw, blocks: value


_QUIZ_SIZES = dict(nk=4096, d=128, block_q=128, block_k=128, itemsize=2, stat_itemsize=4)


def _naive_bytes(nq):
    from flashlab.traffic import naive_traffic

    return naive_traffic(nq, 4096, 128, itemsize=2).total


def _flash_bytes(nq, fa1=False, causal=False):
    from flashlab.traffic import fa1_forward_traffic, fa2_forward_traffic

    return (fa1_forward_traffic if fa1 else fa2_forward_traffic)(nq, causal=causal, **_QUIZ_SIZES).total


def _quiz_ratio(nq, naive=_naive_bytes, flash=_flash_bytes):
    """Exercise 11's Q5 (nq = 4096) or Q6 (nq = 1): naive / FlashAttention-2 forward bytes, either
    counted another way (a function of nq, in bytes)."""
    return lambda kw, blocks: naive(nq) / flash(nq)


def _kv_read_once(nq):  # Q read, K and V read once, O written (fp16); lse written (fp32)
    return (nq * 128 + 2 * 4096 * 128 + nq * 128) * 2 + nq * 4


QUIZ_INVERTED = ("the ratio is upside down: the question asks for naive attention's bytes divided by the "
                 "FlashAttention-2 forward's")
QUIZ_KV_ONCE = ("K and V were counted as read once: the FlashAttention-2 forward reads them once per query block "
                "(every query block loops over all the key blocks), Nq / block_q times")
QUIZ_SP_ONCE = ("naive attention's S and P were counted once each: Algorithm 0 writes each to HBM and reads it back "
                "(4 Nq Nk elements in all)")
QUIZ_NAIVE_SP_ONLY = ("naive attention's bytes were counted for S and P only: it also reads Q, K, V and writes O "
                      "(exercise 01's naive_hbm_bytes)")
QUIZ_CAUSAL = "the forward was counted as causal (about half the tiles skipped): the question's attention is not causal"
QUIZ_FA1 = ("the forward was counted in FlashAttention-1's loop order (O, l, m read and written back for every tile): "
            "the question is about FlashAttention-2, which keeps each O_i on chip through its key loop")
QUIZ_DECODE_ROWS = ("the one query row was counted as a full query block of 128 rows (exercise 05's mistake: a ragged "
                    "last block moves only its real rows), or the ratio is upside down (naive's bytes go on top): "
                    "both give about 0.985")
QUIZ_PREFILL_SHAPE = "that is the prefill ratio of Q5: Q6 has one query row (Nq = 1)"

# Exercise 11's wrong letters, stored as answer_hash(question, letter) like the answers themselves (so a
# glance at the source shows no letter): what a learner who picked it took for the saving or the reason.
_QUIZ_LETTERS = {
    "Q1": (("b2c466d224339bc4a5f4", "the FLOPs were taken for the saving: the tiled loop computes every score naive "
            "attention computes (flashlab.flops.attention_flops gives both the same count; the backward even "
            "recomputes S)"),
           ("7bd9460c07a9ed178756", "on-chip SRAM was taken for the saving: FlashAttention sizes its tiles to fill "
            "SRAM, it uses it rather than saves it"),
           ("686fb355b2791bd42c56", "the exp() evaluations were taken for the saving: every score still goes through "
            "one exp(), and the online softmax adds a rescale exp() per tile")),
    "Q2": (("04aa75db1de5523f1538", "S and P's HBM traffic was taken for something FlashAttention keeps: it removes it, "
            "since in the tiled loop S and P never leave on-chip memory"),
           ("0b6c5b9c454d12318c97", "the attention matrix's storage was taken for something FlashAttention keeps: it is "
            "never stored, so memory grows with N, not N^2"),
           ("445c5cd5a551d628badd", "reads of S from HBM were taken for something FlashAttention keeps: S is never "
            "written to HBM, so it is never read back from it")),
    "Q3": (("6d26525147b7b26993d7", "rounding was taken for the argument: the claim is that the online softmax gives "
            "the same number as the two-pass one in exact arithmetic, not that its error is small"),
           ("04583cbd4ac48a3e2c2b", "the running max was taken for an estimate: it is the exact max of the columns seen "
            "so far, and when a later column raises it the old sum is corrected, not guessed"),
           ("3b0cc5fceef75298570e", "softmax was taken for linear: chunks normalised separately each sum to 1, and "
            "adding them does not give the softmax of the whole row")),
    "Q4": (("f40fc060e57d057700bc", "decode was taken for compute-bound: with one query row it reads all of K and V "
            "for about 2 FLOPs per element read, the most memory-bound step there is"),
           ("11e3dbb2b93b5867bc46", "FlashAttention was taken to need several query rows: it runs with one (exercise "
            "14's split-KV kernel does)"),
           ("d4a916e424c71d808f5c", "tile sizes were taken for the cause: what FlashAttention saves is S and P's "
            "traffic, whatever the tiles")),
}

_QUIZ = {("ex11_quiz", question): tuple((description, _quiz_answer(stored)) for stored, description in letters)
         for question, letters in _QUIZ_LETTERS.items()}
_QUIZ[("ex11_quiz", "Q5")] = (
    (QUIZ_KV_ONCE, _quiz_ratio(4096, flash=_kv_read_once)),
    (QUIZ_INVERTED, _quiz_ratio(4096, naive=_flash_bytes, flash=_naive_bytes)),
    (QUIZ_SP_ONCE, _quiz_ratio(4096, naive=lambda nq: (2 * nq * 128 + 2 * 4096 * 128 + 2 * nq * 4096) * 2)),
    (QUIZ_NAIVE_SP_ONLY, _quiz_ratio(4096, naive=lambda nq: 4 * nq * 4096 * 2)),
    (QUIZ_CAUSAL, _quiz_ratio(4096, flash=lambda nq: _flash_bytes(nq, causal=True))),
    (QUIZ_FA1, _quiz_ratio(4096, flash=lambda nq: _flash_bytes(nq, fa1=True))))
_QUIZ[("ex11_quiz", "Q6")] = (  # a full block's ratio (0.9849) and the inverted one (0.9846): one name for both
    (QUIZ_DECODE_ROWS, _quiz_ratio(1, flash=lambda nq: _fa2_bytes(dict(_QUIZ_SIZES, nq=nq), full_rows=True))),
    (QUIZ_PREFILL_SHAPE, _quiz_ratio(4096)))

MISTAKES.update({("ex14_split_kv_decode", "combine_splits"): _COMBINE,
                 ("ex04_causal_tiles", "count_computed_tiles"): _COUNT_TILES, **_QUIZ})


# ----------------------------------------------------------------------------- the same mistakes in sibling exercises
P_WITHOUT_LSE = ("P is exp(S) without the forward's lse subtracted: P = exp(scale Q_i K_j^T - lse_i) (FlashAttention-2 "
                 "Algorithm 2, line 11), which is each row's softmax with no max or sum to recompute")
def _kernel_p(which, option):
    def detector(kw, blocks):
        if option == "scale_s" and _scale(kw) == 1.0:
            return None
        return (_dq if which == "dq" else _dkdv)(**{option: False})(kw, blocks)
    return detector




def _visited_dkdv(r, c, blocks):
    """The (query row, key) pairs exercise 13's causal dK/dV loop visits: key block j walks the query blocks
    from the one holding row j * BLOCK_N on."""
    bm, bn = blocks.get("BLOCK_M"), blocks.get("BLOCK_N")
    return r >= (c // bn * bn) // bm * bm


def _visited_dq(r, c, blocks):
    """The pairs exercise 13's causal dQ loop visits: query block i walks the key blocks below (i + 1) * BLOCK_M."""
    bm, bn = blocks.get("BLOCK_M"), blocks.get("BLOCK_N")
    return c < -(-((r // bm + 1) * bm) // bn) * bn


def _causal_unmasked(which):
    def detector(kw, blocks):
        if not kw.get("causal") or type(blocks.get("BLOCK_M")) is not int or type(blocks.get("BLOCK_N")) is not int:
            return None
        visited = _visited_dq if which == "dq" else _visited_dkdv
        return (_dq if which == "dq" else _dkdv)(mask=False, visited=visited)(kw, blocks)
    return detector


def _kernel_tile_max(which):
    def detector(kw, blocks):
        if type(blocks.get("BLOCK_N")) is not int or blocks["BLOCK_N"] < 1:
            return None
        return (_dq if which == "dq" else _dkdv)(tile_max=blocks["BLOCK_N"])(kw, blocks)
    return detector


for _which, _part in (("dkdv", "flash_backward_dkdv"), ("dq", "flash_backward_dq")):  # as exercise 10 names them
    MISTAKES[("ex13_triton_backward", _part)] = MISTAKES[("ex13_triton_backward", _part)] + (
        (P_TILE_MAX, _kernel_tile_max(_which)),
        (P_SCORES_UNSCALED, _kernel_p(_which, "scale_s")), (P_WITHOUT_LSE, _kernel_p(_which, "subtract_lse")),
        (BWD_CAUSAL_UNMASKED, _causal_only(_kernel_p(_which, "mask"))), (BWD_CAUSAL_UNMASKED, _causal_unmasked(_which)))

LSE_MAX_ONLY = "lse is the running max m alone, without log(l_i): lse = m_i + log(l_i), after the key loop"
O_NOT_DIVIDED = ("o is acc without the division by l_i: O_i = acc / l_i once, after the key loop (FlashAttention-2 "
                 "Algorithm 1, line 12)")


def _forward_lse(kw, max_only=False, undivided=False):
    """Exercise 15's (o, lse) with lse = m alone or o not divided by l, float64 inside."""
    q, k, v = (np.asarray(kw[n], np.float64) for n in ("q", "k", "v"))
    s = _scale(kw) * (q @ np.swapaxes(k, -1, -2))  # (..., Nq, Nk)
    if kw.get("causal"):
        s = np.where(np.arange(k.shape[-2])[None, :] > np.arange(q.shape[-2])[:, None], -np.inf, s)
    m = s.max(axis=-1)
    p = np.exp(s - m[..., None])
    l = p.sum(axis=-1)
    o = p @ v if undivided else (p @ v) / l[..., None]
    lse = m if max_only else m + np.log(l)
    return o.astype(kw["q"].dtype), lse.astype(kw["q"].dtype)


def _autograd_backward(**options):
    """Exercise 15's (o, dq, dk, dv) with one of exercise 13's backward mistakes (float64 inside)."""
    def detector(kw, blocks):
        from flashlab.reference import naive_attention

        f64 = [np.asarray(kw[n], np.float64) for n in ("q", "k", "v")]
        o, lse = naive_attention(*f64, causal=kw.get("causal", False), scale=_scale(kw), return_lse=True)
        grads = _backward(dict(kw, o=o, lse=lse), blocks, **options)
        return tuple(t.astype(kw["q"].dtype) for t in (o, *grads))
    return detector


MISTAKES[("ex15_autograd_flash", "flash_forward_lse")] += (
    (LSE_MAX_ONLY, lambda kw, blocks: _forward_lse(kw, max_only=True)),
    (O_NOT_DIVIDED, lambda kw, blocks: _forward_lse(kw, undivided=True)))
AUTOGRAD_K_TILES = (16, 32, 64, 128, 256)  # the key tiles a learner's K_TILE is tried at (it is not passed in)


def _autograd_tiles(**options):
    """Exercise 15's (o, dq, dk, dv) with P recomputed per key tile (``_tile_loop``'s tile_max or tile_softmax),
    one detector per tile size of AUTOGRAD_K_TILES (query tiles as large)."""
    def at(block_k):
        def detector(kw, blocks):
            from flashlab.reference import naive_attention

            if options.get("tile_softmax") and kw["k"].shape[-2] <= block_k:
                return None  # one key tile: its row max and sum are the row's
            f64 = [np.asarray(kw[n], np.float64) for n in ("q", "k", "v")]
            o, lse = naive_attention(*f64, causal=kw.get("causal", False), scale=_scale(kw), return_lse=True)
            grads = _tile_loop(dict(kw, o=o, lse=lse, block_q=block_k, block_k=block_k), **options)
            return None if grads is None else (o.astype(kw["q"].dtype), *grads)
        return detector
    return tuple(at(block_k) for block_k in AUTOGRAD_K_TILES)


MISTAKES[("ex15_autograd_flash", "forward_and_backward")] += (
    (BWD_NO_DELTA, _autograd_backward(delta=False)), (BWD_DK_UNSCALED, _autograd_backward(scale_dk=False)),
    (BWD_DQ_UNSCALED, _autograd_backward(scale_dq=False)), (P_WITHOUT_LSE, _autograd_backward(subtract_lse=False)),
    *((P_TILE_MAX, d) for d in _autograd_tiles(tile_max=True)),
    *((P_TILE_SOFTMAX, d) for d in _autograd_tiles(tile_softmax=True)))
