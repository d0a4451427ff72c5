"""Tiled FlashAttention in NumPy: forward in both loop orders, and the backward.

- :func:`tiled_attention`: FlashAttention-2 forward (Dao 2023, Algorithm 1). Outer loop over query
  blocks Q_i (block_q rows), inner loop over key/value blocks K_j, V_j (block_k rows); the
  online-softmax state m_i, l_i, acc stays on chip; O_i and lse_i are written once.
- :func:`tiled_attention_fa1`: FlashAttention-1 forward (Dao et al. 2022, Algorithm 1). Outer loop
  over K_j, V_j, inner over Q_i; O, l, m live in (simulated) HBM and every inner step reads and
  writes back O_i, l_i, m_i.
- :func:`tiled_attention_backward`: FlashAttention-2 backward (Dao 2023, Algorithm 2).
  D = rowsum(dO * O) first; outer loop over K_j, V_j with dK_j, dV_j accumulated on chip; inner
  loop over query blocks, P recomputed from lse, dS = P * (dP - D), dQ_i read-modified-written.

None of them allocates an Nq x Nk array: the extra memory is O(block_q * block_k + block_q * d)
per tile (plus the HBM-resident O, l, m of FA1 and D of the backward, which are O(Nq * d)).
The online-softmax arithmetic is :func:`flashlab.softmax.online_update`; it is not repeated here.

Which keys each query sees is an :class:`flashlab.attnspec.AttnSpec` (causal, its alignment, a
sliding window, a ``mask_mod``); which tiles that computes is :mod:`flashlab.visibility`: the loops
walk each block's range from the model, skip tiles it marks SKIPPED (never loaded), and apply the
mask inside PARTIAL tiles only. Per-sequence lengths (``seqlens_q`` / ``seqlens_k``, a padded
batch along axis 0) run sequence by sequence (:mod:`flashlab.ragged`): padding rows get o = 0,
lse = -inf and zero gradients, padding keys are never read. Causal top-left, the course's first case: tile (i, j) is skipped
when its first key column is past its last query row (:func:`causal_tile_skipped`).

Tracing. With ``tracer`` (a :class:`flashlab.tracer.TrafficTracer`) every HBM <-> SRAM transfer is
recorded as docs/ARCHITECTURE.md ("Traffic accounting rules") says, and one Step per inner
iteration (plus prologue/epilogue steps) lists the SRAM-resident buffers. ``Step.flops`` counts
matmul FLOPs (2 per multiply-add), from the shapes of the tiles actually multiplied.
``Step.sram_bytes`` is the number of elements read plus written inside SRAM by the step's matmuls
(both operands read, the result written; an accumulating matmul also reads its accumulator) and
by its tile-sized elementwise ops (each reads its tile inputs and writes its tile output; per-row
statistics are ignored), times the tracer's ``itemsize``. Per tile of rq x ck:
  forward step: S=QK^T (rq d + ck d + rq ck), P=exp(S-m) (2 rq ck), acc=alpha acc+PV
                (rq ck + ck dv + 2 rq dv); FA1 adds un-/re-normalising O_i (4 rq dv);
  forward epilogue (FA2): O_i = acc / l (2 rq dv);
  backward step: S (rq d + ck d + rq ck), P (2 rq ck), dV+=P^T dO (rq ck + rq dv + 2 ck dv),
                 dP=dO V^T (rq dv + ck dv + rq ck), dS=P(dP-D) (3 rq ck), dQ+=dS K
                 (rq ck + ck d + 2 rq d), dK+=dS^T Q (rq ck + rq d + 2 ck d);
  backward preprocessing: D = rowsum(dO * O) (2 rq dv).

Notebook 03's tables: :func:`tiled_vs_naive_table` (the error against the reference on random
inputs) and :func:`causal_skip_table` (tiles a causal run skips).
"""
from __future__ import annotations

import numpy as np

from ._checks import (check_bool, check_like, check_positive_int, check_qkv, check_scale,
                      check_tracer, quiet_nonfinite)
from . import ragged
from .attnspec import AttnSpec, make_spec
from .softmax import online_update
from .visibility import PARTIAL, SKIPPED, num_blocks, tiles


# -- tile geometry: the visibility model, with the causal helpers of the exercises ---------------
def causal_tile_skipped(i: int, j: int, block_q: int, block_k: int, nq: int) -> bool:
    """True when causal (top-left) tile (i, j) is fully masked: its first key is past its last query
    row. The general rule, for any AttnSpec, is ``visibility.tiles(...).state(i, j) == SKIPPED``."""
    return j * block_k > min((i + 1) * block_q, nq) - 1


def kv_blocks_visited(i: int, nq: int, nk: int, block_q: int, block_k: int, causal: bool) -> int:
    """Key blocks computed for query block i, causal top-left or dense: j = 0 .. result - 1.
    (Other rules also need a start: :meth:`flashlab.visibility.TileVisibility.kv_range`.)"""
    return tiles(AttnSpec(causal=bool(causal)), nq, nk, block_q, block_k).kv_range(i)[1]


def first_q_block(j: int, nq: int, block_q: int, block_k: int, causal: bool) -> int:
    """First query block whose tile with key block j is computed (num_blocks(nq) when none is),
    causal top-left or dense (the general form: ``TileVisibility.q_range``)."""
    nk = (j + 1) * block_k  # top-left causal visibility does not depend on Nk past block j
    lo, hi = tiles(AttnSpec(causal=bool(causal)), nq, nk, block_q, block_k).q_range(j)
    return lo if hi > lo else num_blocks(nq, block_q)


def _span(index: int, block: int, n: int) -> tuple[int, int]:
    return index * block, min((index + 1) * block, n)


class _NoTrace:
    """Stands in for a tracer when none is given, so the loops read the same either way."""

    meta = {"itemsize": 0}

    def begin(self, *args, **kwargs): pass
    def step(self, *args, **kwargs): pass
    def read(self, *args, **kwargs): pass
    def write(self, *args, **kwargs): pass


def _prepare(q, k, v, causal, scale, block_q, block_k, tracer, options):
    """Checked inputs and the problem: (dims, spec, scale, grid, tracer); grid is the tile model."""
    dims = check_qkv(q, k, v)
    spec = make_spec(options.pop("spec", None), causal=check_bool("causal", causal), scale=scale, **options)
    scale = check_scale(spec.scale, dims.d)
    spec.refuse(("window", "causal_align", "mask_mod", "seqlens"), "the NumPy tiled functions")
    spec.check_lengths(dims.nq, dims.nk, ragged.check_batch_axis(spec, dims.batch_shape))
    spec = spec.replace(scale=scale)
    block_q = check_positive_int("block_q", block_q)
    block_k = check_positive_int("block_k", block_k)
    tracer = check_tracer(tracer)
    if tracer is not None and spec.base is not spec:
        raise ValueError("tracer= with seqlens_q/seqlens_k is not supported: trace one sequence at a time")
    return dims, spec, scale, tiles(spec.base, dims.nq, dims.nk, block_q, block_k), tracer


def _ragged(fn, dims, spec, inputs, kinds, out_kinds, out_fill, **kwargs):
    """A padded batch with per-sequence lengths: ``fn`` sequence by sequence (flashlab.ragged)."""
    return ragged.per_sequence(fn, inputs, kinds, spec, dims.nq, dims.nk, out_kinds, out_fill, **kwargs)


def _flat(x: np.ndarray, dims) -> np.ndarray:
    return x.astype(dims.work_dtype, copy=False).reshape(dims.batch, *x.shape[-2:])  # (B, N, last)


def _begin(tracer, algorithm, q, dims, grid):
    trace = _NoTrace() if tracer is None else tracer
    spec = grid.spec
    trace.begin(algorithm, q.itemsize, Nq=dims.nq, Nk=dims.nk, d=dims.d, dv=dims.dv, block_q=grid.block_q,
                block_k=grid.block_k, causal=spec.causal, batch=dims.batch, spec=spec)
    return trace, trace.meta["itemsize"]


def _masked_scores(q_i, k_j, scale, grid, i, j):
    s = scale * (q_i @ k_j.T)  # (rq, ck)  S = Q_i K_j^T
    if grid.state(i, j) == PARTIAL:  # some (query, key) pairs of the tile are not visible: mask them
        s = np.where(grid.tile_mask(i, j), s, -np.inf)  # (rq, ck)
    return s


@quiet_nonfinite
def tiled_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False,
                    scale: float | None = None, block_q: int = 64, block_k: int = 64,
                    return_lse: bool = False, tracer=None, **options):
    """FlashAttention-2 forward: same result as :func:`flashlab.naive_attention`, tile by tile.

    q: (..., Nq, d), k: (..., Nk, d), v: (..., Nk, dv). Returns o (..., Nq, dv) in the input dtype
    and, with ``return_lse``, lse (..., Nq) (float32 for float16 inputs). Any Nq, Nk >= 1;
    block sizes need not divide them and may exceed them. ``options``: ``spec=AttnSpec(...)`` or
    its fields as keywords (``window``, ``causal_align``, ``mask_mod``; :mod:`flashlab.attnspec`).
    """
    dims, spec, scale, grid, tracer = _prepare(q, k, v, causal, scale, block_q, block_k, tracer, options)
    block_q, block_k = grid.block_q, grid.block_k
    return_lse = check_bool("return_lse", return_lse)
    if spec.base is not spec:  # per-sequence lengths: padding rows get o = 0, lse = -inf
        o, lse = _ragged(tiled_attention, dims, spec, (q, k, v), "qkk", "qs", (0.0, -np.inf),
                         block_q=block_q, block_k=block_k, return_lse=True)
        return (o, lse) if return_lse else o
    nq, nk, d, dv = dims.nq, dims.nk, dims.d, dims.dv
    q3, k3, v3 = _flat(q, dims), _flat(k, dims), _flat(v, dims)  # (B, Nq, d), (B, Nk, d), (B, Nk, dv)
    o = np.empty((dims.batch, nq, dv), dims.work_dtype)  # (B, Nq, dv)  HBM output
    lse = np.empty((dims.batch, nq), dims.work_dtype)  # (B, Nq)
    trace, size = _begin(tracer, "fa2_forward", q, dims, grid)

    for b in range(dims.batch):
        for i in range(num_blocks(nq, block_q)):  # outer loop over query blocks (FA2 Alg. 1 line 3)
            r0, r1 = _span(i, block_q, nq)
            rows = (r0, r1)
            rq = r1 - r0
            on_chip = (("Q", rows, (0, d)), ("acc", rows, (0, dv)), ("m", rows, (0, 1)), ("l", rows, (0, 1)))
            # -- load Q_i (line 4); initialise m_i = -inf, l_i = 0, acc = 0 on chip (line 5)
            trace.step(f"load Q_{i}", q_block=i, batch=b, resident=on_chip)
            trace.read("Q", rows, (0, d), b)
            q_i = q3[b, r0:r1]  # (rq, d)
            m_i = np.full(rq, -np.inf, dims.work_dtype)  # (rq,)
            l_i = np.zeros(rq, dims.work_dtype)  # (rq,)
            acc = np.zeros((rq, dv), dims.work_dtype)  # (rq, dv)

            for j in range(*grid.kv_range(i)):  # inner loop (line 6) over the key blocks query block i sees
                if not grid.visited(i, j):  # (only a mask_mod leaves skipped tiles inside the range)
                    continue
                c0, c1 = _span(j, block_k, nk)
                k_j, v_j = k3[b, c0:c1], v3[b, c0:c1]  # (ck, d), (ck, dv)
                ck = c1 - c0
                # -- load K_j, V_j (line 7)
                trace.step(f"i={i} j={j}", q_block=i, k_block=j, batch=b,
                           resident=on_chip + (("K", (c0, c1), (0, d)), ("V", (c0, c1), (0, dv)),
                                               ("S", rows, (c0, c1))),
                           flops=2 * rq * ck * d + 2 * rq * ck * dv,
                           sram_bytes=size * (rq * d + ck * d + 4 * rq * ck + ck * dv + 2 * rq * dv))
                trace.read("K", (c0, c1), (0, d), b)
                trace.read("V", (c0, c1), (0, dv), b)
                # -- S = Q_i K_j^T, masked (line 8); update m_i, l_i (line 9) and acc (line 10)
                s = _masked_scores(q_i, k_j, scale, grid, i, j)  # (rq, ck)
                m_i, l_i, acc = online_update(m_i, l_i, acc, s, v_j)

            # -- epilogue: O_i = acc / l_i (line 12), lse_i = m_i + log(l_i) (line 13); write both (lines 14-15)
            trace.step(f"write O_{i}", q_block=i, batch=b, resident=on_chip, sram_bytes=size * 2 * rq * dv)
            with np.errstate(divide="ignore", invalid="ignore"):
                o[b, r0:r1] = acc / l_i[:, None]  # (rq, dv)
                lse[b, r0:r1] = m_i + np.log(l_i)  # (rq,)
            trace.write("O", rows, (0, dv), b)
            trace.write("lse", rows, (0, 1), b)

    return _outputs(o, lse, dims, return_lse)


def _outputs(o, lse, dims, return_lse):
    o = o.reshape(*dims.batch_shape, dims.nq, dims.dv).astype(dims.dtype, copy=False)
    if not return_lse:
        return o
    return o, lse.reshape(*dims.batch_shape, dims.nq)


@quiet_nonfinite
def tiled_attention_fa1(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False,
                        scale: float | None = None, block_q: int = 64, block_k: int = 64,
                        return_lse: bool = False, tracer=None, **options):
    """FlashAttention-1 forward (outer loop over K_j, V_j): same arguments and results as
    :func:`tiled_attention`. lse is computed from the final HBM arrays m, l (FA1 stores m and l,
    not lse, so no lse traffic is traced)."""
    dims, spec, scale, grid, tracer = _prepare(q, k, v, causal, scale, block_q, block_k, tracer, options)
    block_q, block_k = grid.block_q, grid.block_k
    return_lse = check_bool("return_lse", return_lse)
    if spec.base is not spec:  # per-sequence lengths: padding rows get o = 0, lse = -inf
        o, lse = _ragged(tiled_attention_fa1, dims, spec, (q, k, v), "qkk", "qs", (0.0, -np.inf),
                         block_q=block_q, block_k=block_k, return_lse=True)
        return (o, lse) if return_lse else o
    nq, nk, d, dv = dims.nq, dims.nk, dims.d, dims.dv
    n_q_blocks, n_kv_blocks = num_blocks(nq, block_q), num_blocks(nk, block_k)
    q3, k3, v3 = _flat(q, dims), _flat(k, dims), _flat(v, dims)
    o = np.empty((dims.batch, nq, dv), dims.work_dtype)  # (B, Nq, dv)  O in HBM
    lse = np.empty((dims.batch, nq), dims.work_dtype)  # (B, Nq)
    trace, size = _begin(tracer, "fa1_forward", q, dims, grid)

    for b in range(dims.batch):
        # -- Alg. 1 line 2: initialise O = 0, l = 0, m = -inf in HBM
        o_hbm, l_hbm, m_hbm = o[b], np.zeros(nq, dims.work_dtype), np.full(nq, -np.inf, dims.work_dtype)
        o_hbm[:] = 0.0
        trace.step("init O, l, m", batch=b)
        for i in range(n_q_blocks):
            rows = _span(i, block_q, nq)
            trace.write("O", rows, (0, dv), b)
            trace.write("l", rows, (0, 1), b)
            trace.write("m", rows, (0, 1), b)

        for j in range(n_kv_blocks):  # line 5: outer loop over key/value blocks
            i_start, i_end = grid.q_range(j)
            if i_start == i_end:  # no query sees these keys, so K_j, V_j are never loaded
                continue
            c0, c1 = _span(j, block_k, nk)
            cols = (c0, c1)
            ck = c1 - c0
            k_j, v_j = k3[b, c0:c1], v3[b, c0:c1]  # (ck, d), (ck, dv)
            kv_chip = (("K", cols, (0, d)), ("V", cols, (0, dv)))
            # -- line 6: load K_j, V_j
            trace.step(f"load K_{j} V_{j}", k_block=j, batch=b, resident=kv_chip)
            trace.read("K", cols, (0, d), b)
            trace.read("V", cols, (0, dv), b)

            for i in range(i_start, i_end):  # line 7: inner loop over the query blocks that see K_j
                if not grid.visited(i, j):
                    continue
                r0, r1 = _span(i, block_q, nq)
                rows = (r0, r1)
                rq = r1 - r0
                # -- line 8: load Q_i, O_i, l_i, m_i
                trace.step(f"i={i} j={j}", q_block=i, k_block=j, batch=b,
                           resident=kv_chip + (("Q", rows, (0, d)), ("O", rows, (0, dv)), ("l", rows, (0, 1)),
                                               ("m", rows, (0, 1)), ("S", rows, cols)),
                           flops=2 * rq * ck * d + 2 * rq * ck * dv,
                           sram_bytes=size * (rq * d + ck * d + 4 * rq * ck + ck * dv + 6 * rq * dv))
                for name, width in (("Q", d), ("O", dv), ("l", 1), ("m", 1)):
                    trace.read(name, rows, (0, width), b)
                q_i = q3[b, r0:r1]  # (rq, d)
                # -- line 9: S = Q_i K_j^T (masked)
                s = _masked_scores(q_i, k_j, scale, grid, i, j)  # (rq, ck)
                # -- lines 10-11: un-normalise O_i to acc, fold in this tile (m_new, l_new)
                acc = o_hbm[r0:r1] * l_hbm[r0:r1, None]  # (rq, dv)
                m_new, l_new, acc = online_update(m_hbm[r0:r1], l_hbm[r0:r1], acc, s, v_j)
                # -- lines 12-13: write O_i = acc / l_new, l_i, m_i back to HBM
                # (a row that has seen no key yet, l = 0: a window or mask_mod can hide a whole
                #  tile row, keeps O_i = 0 rather than 0/0)
                o_hbm[r0:r1] = np.divide(acc, l_new[:, None], out=np.zeros_like(acc),
                                         where=l_new[:, None] != 0)  # (rq, dv)
                l_hbm[r0:r1], m_hbm[r0:r1] = l_new, m_new
                trace.write("O", rows, (0, dv), b)
                trace.write("l", rows, (0, 1), b)
                trace.write("m", rows, (0, 1), b)

        with np.errstate(divide="ignore", invalid="ignore"):
            lse[b] = m_hbm + np.log(l_hbm)  # (Nq,)  for callers only; not traced

    return _outputs(o, lse, dims, return_lse)


@quiet_nonfinite
def tiled_attention_backward(q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray, lse: np.ndarray,
                             do: np.ndarray, causal: bool = False, scale: float | None = None,
                             block_q: int = 64, block_k: int = 64, tracer=None, **options):
    """FlashAttention-2 backward: gradients (dq, dk, dv) of sum(o * do).

    q: (..., Nq, d), k: (..., Nk, d), v: (..., Nk, dv); o: (..., Nq, dv) and lse: (..., Nq) from
    ``tiled_attention(..., return_lse=True)`` with the same causal and scale; do: (..., Nq, dv).
    Returns dq (..., Nq, d), dk (..., Nk, d), dv (..., Nk, dv) in the input dtype. ``options`` as
    :func:`tiled_attention` (the same spec as the forward).
    """
    dims, spec, scale, grid, tracer = _prepare(q, k, v, causal, scale, block_q, block_k, tracer, options)
    block_q, block_k = grid.block_q, grid.block_k
    nq, nk, d, dv = dims.nq, dims.nk, dims.d, dims.dv
    if spec.base is not spec:  # per-sequence lengths: padding rows and keys get zero gradients
        for name, x, shape in (("o", o, (*dims.batch_shape, nq, dv)), ("lse", lse, (*dims.batch_shape, nq)),
                               ("do", do, (*dims.batch_shape, nq, dv))):
            check_like(name, x, shape, "shaped like the forward's")
        return _ragged(tiled_attention_backward, dims, spec, (q, k, v, o, lse, do), "qkkqsq", "qkk",
                       (0.0, 0.0, 0.0), block_q=block_q, block_k=block_k)
    check_like("o", o, (*dims.batch_shape, nq, dv), "the forward output: (..., Nq, dv)")
    check_like("lse", lse, (*dims.batch_shape, nq), "the forward log-sum-exp: (..., Nq)")
    check_like("do", do, (*dims.batch_shape, nq, dv), "the gradient of o: (..., Nq, dv)")
    n_q_blocks, n_kv_blocks = num_blocks(nq, block_q), num_blocks(nk, block_k)
    q3, k3, v3, o3, do3 = (_flat(x, dims) for x in (q, k, v, o, do))
    lse2 = lse.astype(dims.work_dtype, copy=False).reshape(dims.batch, nq)  # (B, Nq)
    dq = np.zeros((dims.batch, nq, d), dims.work_dtype)  # (B, Nq, d)   dQ in HBM
    dk = np.empty((dims.batch, nk, d), dims.work_dtype)  # (B, Nk, d)
    dvv = np.empty((dims.batch, nk, dv), dims.work_dtype)  # (B, Nk, dv)
    trace, size = _begin(tracer, "backward", q, dims, grid)

    for b in range(dims.batch):
        # -- preprocessing: D = rowsum(dO * O), written to HBM; dQ = 0 in HBM
        D = np.empty(nq, dims.work_dtype)  # (Nq,)
        for i in range(n_q_blocks):
            r0, r1 = _span(i, block_q, nq)
            rows = (r0, r1)
            trace.step(f"D_{i}", q_block=i, batch=b,
                       resident=(("dO", rows, (0, dv)), ("O", rows, (0, dv)), ("D", rows, (0, 1))),
                       sram_bytes=size * 2 * (r1 - r0) * dv)
            trace.read("dO", rows, (0, dv), b)
            trace.read("O", rows, (0, dv), b)
            D[r0:r1] = (do3[b, r0:r1] * o3[b, r0:r1]).sum(axis=-1)  # (rq,)
            trace.write("D", rows, (0, 1), b)
            trace.write("dQ", rows, (0, d), b)

        for j in range(n_kv_blocks):  # outer loop over key/value blocks
            c0, c1 = _span(j, block_k, nk)
            cols = (c0, c1)
            ck = c1 - c0
            dk_acc = np.zeros((ck, d), dims.work_dtype)  # (ck, d)  on chip
            dv_acc = np.zeros((ck, dv), dims.work_dtype)  # (ck, dv)
            kv_chip = (("K", cols, (0, d)), ("V", cols, (0, dv)), ("dK_acc", cols, (0, d)),
                       ("dV_acc", cols, (0, dv)))
            i_start, i_end = grid.q_range(j)
            if i_start < i_end:  # a key block no query sees keeps dK_j = dV_j = 0, never loaded
                # -- load K_j, V_j; dK_j = dV_j = 0 on chip
                trace.step(f"load K_{j} V_{j}", k_block=j, batch=b, resident=kv_chip)
                trace.read("K", cols, (0, d), b)
                trace.read("V", cols, (0, dv), b)
            k_j, v_j = k3[b, c0:c1], v3[b, c0:c1]  # (ck, d), (ck, dv)

            for i in range(i_start, i_end):  # inner loop over the query blocks that see K_j
                if not grid.visited(i, j):
                    continue
                r0, r1 = _span(i, block_q, nq)
                rows = (r0, r1)
                rq = r1 - r0
                # -- load Q_i, dO_i, lse_i, D_i, dQ_i
                trace.step(f"i={i} j={j}", q_block=i, k_block=j, batch=b,
                           resident=kv_chip + (("Q", rows, (0, d)), ("dO", rows, (0, dv)), ("lse", rows, (0, 1)),
                                               ("D", rows, (0, 1)), ("dQ", rows, (0, d)), ("P", rows, cols),
                                               ("dP", rows, cols), ("dS", rows, cols)),
                           flops=2 * rq * ck * (3 * d + 2 * dv),
                           sram_bytes=size * (4 * rq * d + 4 * ck * d + 10 * rq * ck + 2 * rq * dv + 3 * ck * dv))
                for name, width in (("Q", d), ("dO", dv), ("lse", 1), ("D", 1), ("dQ", d)):
                    trace.read(name, rows, (0, width), b)
                q_i, do_i = q3[b, r0:r1], do3[b, r0:r1]  # (rq, d), (rq, dv)
                s = _masked_scores(q_i, k_j, scale, grid, i, j)  # (rq, ck)  recompute S
                p = np.exp(s - lse2[b, r0:r1, None])  # (rq, ck)  P = exp(S - lse_i)
                dv_acc += p.T @ do_i  # (ck, dv)  dV_j += P^T dO_i
                dp = do_i @ v_j.T  # (rq, ck)  dP = dO_i V_j^T
                ds = p * (dp - D[r0:r1, None])  # (rq, ck)  dS = P * (dP - D_i)
                dq[b, r0:r1] += scale * (ds @ k_j)  # (rq, d)  dQ_i += scale dS K_j, written back
                dk_acc += scale * (ds.T @ q_i)  # (ck, d)  dK_j += scale dS^T Q_i
                trace.write("dQ", rows, (0, d), b)

            # -- write dK_j, dV_j to HBM
            trace.step(f"write dK_{j} dV_{j}", k_block=j, batch=b, resident=kv_chip)
            dk[b, c0:c1], dvv[b, c0:c1] = dk_acc, dv_acc
            trace.write("dK", cols, (0, d), b)
            trace.write("dV", cols, (0, dv), b)

    shape = dims.batch_shape
    return (dq.reshape(*shape, nq, d).astype(dims.dtype, copy=False),
            dk.reshape(*shape, nk, d).astype(dims.dtype, copy=False),
            dvv.reshape(*shape, nk, dv).astype(dims.dtype, copy=False))


# -- tables for notebook 03 ------------------------------------------------------------------------
EXACTNESS_CASES = ((100, 100, 32, 32, 16), (100, 37, 16, 64, 8), (5, 200, 64, 7, 40), (64, 64, 64, 64, 64))


def tiled_vs_naive_table(cases=EXACTNESS_CASES, seed: int = 0, batch: int = 2) -> str:
    """max |tiled_attention - naive_attention| on fresh float64 random inputs, one line per case and
    causal setting (False, then True).

    ``cases``: (Nq, Nk, block_q, block_k, d) tuples; the defaults cover ragged last tiles, Nq != Nk
    and blocks larger than N. Inputs are ``(batch, N, d)``, drawn from ``default_rng(seed)`` in
    order: q, k, v of the first case, then of the next.
    """
    from .reference import naive_attention

    try:
        cases = [tuple(case) for case in cases]
    except TypeError:
        raise ValueError(f"cases={cases!r} must be a sequence of (Nq, Nk, block_q, block_k, d) tuples") from None
    if not cases or any(len(case) != 5 for case in cases):
        raise ValueError(f"cases={cases!r} must be a non-empty sequence of (Nq, Nk, block_q, block_k, d) tuples")
    batch = check_positive_int("batch", batch)
    rng = np.random.default_rng(seed)
    lines = []
    for case in cases:
        nq, nk, block_q, block_k, d = (check_positive_int(f"{name} of case {case}", x)
                                       for name, x in zip(("Nq", "Nk", "block_q", "block_k", "d"), case))
        q = rng.standard_normal((batch, nq, d))  # (B, Nq, d)
        k, v = rng.standard_normal((batch, nk, d)), rng.standard_normal((batch, nk, d))  # (B, Nk, d)
        for causal in (False, True):
            err = np.abs(tiled_attention(q, k, v, causal=causal, block_q=block_q, block_k=block_k)
                         - naive_attention(q, k, v, causal=causal)).max()
            lines.append(f"Nq={nq:>3} Nk={nk:>3} block_q={block_q:>2} block_k={block_k:>2} d={d:>2} "
                         f"causal={causal!s:<5}  max |tiled - naive| = {err:.1e}")
    return "\n".join(lines)


def causal_skip_table(ns=(256, 1000, 4096), block: int = 64) -> str:
    """Causal (top-left), Nq = Nk = N, ``block`` x ``block`` tiles: how many tiles
    :func:`causal_tile_skipped` marks skipped, out of all, one line per N."""
    block = check_positive_int("block", block)
    try:
        ns = tuple(ns)
    except TypeError:
        raise ValueError(f"ns={ns!r} must be a sequence of ints >= 1") from None
    if not ns:
        raise ValueError("ns=() must hold at least one sequence length")
    lines = []
    for n in ns:
        n = check_positive_int("ns", n)
        nb = num_blocks(n, block)
        skipped = sum(causal_tile_skipped(i, j, block, block, n) for i in range(nb) for j in range(nb))
        lines.append(f"N = {n:>4}, {block} x {block} tiles: {skipped} of {nb * nb} tiles skipped "
                     f"({skipped / nb**2:.0%})")
    return "\n".join(lines)
