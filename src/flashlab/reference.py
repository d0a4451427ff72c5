"""Reference attention in NumPy: the plain, materialised algorithm every fast path is checked against.

Forward (FlashAttention paper, Algorithm 0, "standard attention"):
    S = scale * Q K^T,  P = softmax(S) (row-wise),  O = P V.
Backward (FlashAttention paper, Appendix B.2 / Algorithm 3, "standard attention backward"):
    dV = P^T dO,  dP = dO V^T,  dS = P * (dP - rowsum(dP * P)),  dQ = scale dS K,  dK = scale dS^T Q.

Both build the full Nq x Nk matrices S and P: that is the point of the reference, and what
tiling removes. ``causal=True`` is top-left aligned like
``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``: query i sees keys j <= i;
the other rules (bottom-right alignment, sliding window, ``mask_mod``) are those of
:class:`flashlab.attnspec.AttnSpec`, passed as ``spec=`` or as keywords.
Dtypes follow :mod:`flashlab._checks` (float16 inputs are computed in float32).
"""
from __future__ import annotations

import numpy as np

from ._checks import check_bool, check_like, check_qkv, check_scale, quiet_nonfinite
from . import ragged
from .attnspec import make_spec
from .softmax import logsumexp


def causal_mask(nq: int, nk: int, q_start: int = 0, k_start: int = 0) -> np.ndarray:
    """Boolean (nq, nk) mask, True where query q_start + r may NOT see key k_start + c (key > query)."""
    rows = np.arange(q_start, q_start + nq)[:, None]  # (nq, 1)
    cols = np.arange(k_start, k_start + nk)[None, :]  # (1, nk)
    return cols > rows  # (nq, nk)


def _spec(dims, causal, scale, options):
    spec = make_spec(options.pop("spec", None), causal=check_bool("causal", causal), scale=scale, **options)
    spec.refuse(("window", "causal_align", "mask_mod", "seqlens"), "the NumPy reference")
    spec.check_lengths(dims.nq, dims.nk, ragged.check_batch_axis(spec, dims.batch_shape))
    scale = check_scale(spec.scale, dims.d)
    return spec.replace(scale=scale), scale


def _scores(q, k, spec, scale: float) -> np.ndarray:
    s = scale * (q @ np.swapaxes(k, -1, -2))  # (..., Nq, Nk)
    if not spec.is_dense:
        nq, nk = q.shape[-2], k.shape[-2]
        visible = spec.mask(np.arange(nq)[:, None], np.arange(nk)[None, :], nq, nk)  # (Nq, Nk)
        s = np.where(visible, s, -np.inf)  # (..., Nq, Nk)
    return s


@quiet_nonfinite
def naive_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False,
                    scale: float | None = None, return_lse: bool = False, **options):
    """softmax(scale * q k^T) v, materialising the full score matrix.

    q: (..., Nq, d), k: (..., Nk, d), v: (..., Nk, dv), same leading dims and dtype.
    scale defaults to 1/sqrt(d). Returns o (..., Nq, dv) in the input dtype, and with
    ``return_lse=True`` also lse (..., Nq), the natural-log log-sum-exp of each score row.
    ``options``: ``spec=AttnSpec(...)`` or its fields (``window``, ``causal_align``, ``mask_mod``,
    ``seqlens_q``/``seqlens_k``: per-sequence lengths along axis 0, see :mod:`flashlab.ragged`).
    """
    dims = check_qkv(q, k, v)
    spec, scale = _spec(dims, causal, scale, options)
    return_lse = check_bool("return_lse", return_lse)
    if spec.base is not spec:  # a padded batch: sequence by sequence
        o, lse = ragged.per_sequence(naive_attention, (q, k, v), "qkk", spec, dims.nq, dims.nk, "qs",
                                     (0.0, -np.inf), return_lse=True)
        return (o, lse) if return_lse else o
    w = dims.work_dtype
    q, k, v = q.astype(w, copy=False), k.astype(w, copy=False), v.astype(w, copy=False)

    s = _scores(q, k, spec, scale)  # (..., Nq, Nk)
    lse = logsumexp(s, axis=-1)  # (..., Nq)
    p = np.exp(s - lse[..., None])  # (..., Nq, Nk)  softmax(S): rows sum to 1
    o = (p @ v).astype(dims.dtype, copy=False)  # (..., Nq, dv)
    return (o, lse) if return_lse else o


@quiet_nonfinite
def naive_attention_backward(q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray,
                             causal: bool = False, scale: float | None = None, **options):
    """Gradients (dq, dk, dv) of sum(o * do) for o = naive_attention(q, k, v, causal, scale).

    q: (..., Nq, d), k: (..., Nk, d), v: (..., Nk, dv), do: (..., Nq, dv).
    Returns dq (..., Nq, d), dk (..., Nk, d), dv (..., Nk, dv) in the input dtype.
    """
    dims = check_qkv(q, k, v)
    check_like("do", do, (*dims.batch_shape, dims.nq, dims.dv), "the gradient of o: (..., Nq, dv)")
    spec, scale = _spec(dims, causal, scale, options)
    if spec.base is not spec:  # a padded batch: sequence by sequence, padding rows get 0
        return ragged.per_sequence(naive_attention_backward, (q, k, v, do), "qkkq", spec, dims.nq, dims.nk,
                                   "qkk", (0.0, 0.0, 0.0))
    w = dims.work_dtype
    q, k, v, do = (x.astype(w, copy=False) for x in (q, k, v, do))

    s = _scores(q, k, spec, scale)  # (..., Nq, Nk)
    p = np.exp(s - logsumexp(s, axis=-1)[..., None])  # (..., Nq, Nk)
    dv = np.swapaxes(p, -1, -2) @ do  # (..., Nk, dv)
    dp = do @ np.swapaxes(v, -1, -2)  # (..., Nq, Nk)
    ds = p * (dp - (dp * p).sum(axis=-1, keepdims=True))  # (..., Nq, Nk)  softmax backward
    dq = scale * (ds @ k)  # (..., Nq, d)
    dk = scale * (np.swapaxes(ds, -1, -2) @ q)  # (..., Nk, d)
    return tuple(x.astype(dims.dtype, copy=False) for x in (dq, dk, dv))
