"""Per-sequence lengths in a padded batch: run an attention function one sequence at a time.

A batch of sequences of different lengths is stored padded: q (B, ..., N, d) with sequence b's
queries in rows 0..Nq_b-1 and its keys in rows 0..Nk_b-1 (``AttnSpec.seqlens_q`` /
``seqlens_k``, see :mod:`flashlab.attnspec`). :func:`per_sequence` gives every path that has no
ragged loop of its own the same meaning: it cuts each sequence out of the padded arrays, calls the
function on it with the spec's rule for one sequence (``spec.base``), and writes the results back
into padded outputs filled with what a padding row gets (o = 0, lse = -inf, gradients 0). The
NumPy reference and tiled functions, and the backward of ``flash_attention``, use it; the Triton
forward rungs v0-v3 read the lengths inside the kernel instead (``kernels.visible.seq_lengths``).

Keys past Nk_b are never read: only the rows 0..Nk_b-1 are passed on.
"""
from __future__ import annotations

import numpy as np

# how an argument or result is cut per sequence: rows of the query axis, rows of the key axis,
# or the last axis of a per-query-row statistic (lse)
Q_ROWS, K_ROWS, Q_STAT = "q", "k", "s"


def check_batch_axis(spec, batch_shape: tuple[int, ...]) -> int | None:
    """The number of sequences (axis 0) when ``spec`` has per-sequence lengths, else None.
    Raises ValueError naming seqlens_q / seqlens_k when the inputs have no batch axis."""
    if spec.seqlens_q is None and spec.seqlens_k is None:
        return None
    if not batch_shape:
        name = "seqlens_q" if spec.seqlens_q is not None else "seqlens_k"
        raise ValueError(f"{name} needs a batch axis: q, k, v must be (B, ..., N, d) with one length per "
                         "sequence along axis 0")
    return batch_shape[0]


def _cut(x, kind: str, nq: int, nk: int):
    if kind == Q_STAT:
        return x[..., :nq]
    return x[..., : nq if kind == Q_ROWS else nk, :]


def _padded(result, kind: str, nq: int, nk: int, batch: int, fill: float):
    shape = list(result.shape)
    shape[-1 if kind == Q_STAT else -2] = nq if kind in (Q_ROWS, Q_STAT) else nk
    if isinstance(result, np.ndarray):
        return np.full((batch, *shape), fill, dtype=result.dtype)
    import torch

    return torch.full((batch, *shape), fill, dtype=result.dtype, device=result.device)


def per_sequence(fn, inputs, kinds, spec, nq: int, nk: int, out_kinds, out_fill, **kwargs):
    """Call ``fn(*inputs cut to sequence b, spec=spec.base, **kwargs)`` for every sequence b and
    return its results padded back to (B, ..., N, ...).

    ``kinds[i]`` says how ``inputs[i]`` is cut (Q_ROWS, K_ROWS, Q_STAT), ``out_kinds`` and
    ``out_fill`` the same and the padding value for each result. Works on NumPy arrays and torch
    tensors alike. Returns one array, or a tuple when ``fn`` returns one.
    """
    batch = inputs[0].shape[0]
    outs, single = None, False
    for b, nq_b, nk_b in spec.sequences(nq, nk, batch):
        result = fn(*(_cut(x[b], kind, nq_b, nk_b) for x, kind in zip(inputs, kinds)), spec=spec.base, **kwargs)
        single = not isinstance(result, tuple)
        result = (result,) if single else result
        if outs is None:
            outs = [_padded(r, kind, nq, nk, batch, fill) for r, kind, fill in zip(result, out_kinds, out_fill)]
        for out, r, kind in zip(outs, result, out_kinds):
            _cut(out[b], kind, nq_b, nk_b)[...] = r
    return outs[0] if single else tuple(outs)
