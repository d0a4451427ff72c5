"""FLOP counts of attention, naive and tiled, forward and backward.

Matmul FLOPs only, 2 per multiply-add (the convention of the FlashAttention papers' TFLOPs/s
numbers). A (rows x inner) @ (inner x cols) product costs 2 * rows * inner * cols.

- Naive forward: S = Q K^T (2 Nq Nk d) and O = P V (2 Nq Nk dv). Causal naive still computes the
  full matrices, so ``causal`` does not change the naive count.
- Naive backward (FlashAttention paper, Algorithm 3): 4 matmuls, P kept from the forward:
  dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q -> 2 Nq Nk (2 d + 2 dv).
- Tiled (block sizes given): the same matmuls, summed over the tiles actually computed
  (:mod:`flashlab.visibility`: causal, sliding window or ``mask_mod`` skip fully masked tiles and
  compute partly masked ones in full). The tiled backward (FlashAttention-2 Algorithm 2) does 5 matmuls per tile: it
  recomputes S = Q K^T instead of storing P -> 2 * area * (3 d + 2 dv), where area is the number of
  score entries in computed tiles (:func:`computed_area`).

So non-causal tiled forward FLOPs equal naive FLOPs exactly: tiling moves less data, not less math.
"""
from __future__ import annotations

from ._checks import check_bool, check_positive_int
from .attnspec import make_spec
from .visibility import tiles

PASSES = ("forward", "backward")


def computed_area(nq: int, nk: int, block_q: int, block_k: int, causal: bool = False, **options) -> int:
    """Number of score entries (query, key) inside tiles the tiled algorithms compute.

    Nq * Nk when not causal; fewer when causal (skipped tiles), but at least the Nq (Nq+1)/2-ish
    visible entries because diagonal tiles are computed in full. ``options``: ``spec=`` or
    AttnSpec fields (``window``, ``causal_align``, ``mask_mod``).
    """
    nq, nk = check_positive_int("nq", nq), check_positive_int("nk", nk)
    block_q, block_k = check_positive_int("block_q", block_q), check_positive_int("block_k", block_k)
    spec = make_spec(options.pop("spec", None), causal=check_bool("causal", causal), **options)
    spec.refuse(("window", "causal_align", "mask_mod"), "the FLOP counts (one sequence's lengths at a time: "
                "call once per sequence with its Nq, Nk instead of seqlens_q/seqlens_k)")
    spec.check_lengths(nq, nk)
    return tiles(spec, nq, nk, block_q, block_k).computed_area()


def attention_flops(nq: int, nk: int, d: int, dv: int | None = None, causal: bool = False,
                    pass_: str = "forward", block_q: int | None = None, block_k: int | None = None,
                    batch: int = 1, **options) -> int:
    """Matmul FLOPs of one attention pass over `batch` heads.

    Naive when block_q and block_k are both None, tiled when both are given (then ``options``,
    e.g. ``window=``, select the tiles as in :func:`computed_area`; naive computes every entry).
    pass_: "forward" or "backward" (naive backward: 4 matmuls; tiled backward: 5, with recompute).
    """
    nq, nk, d = check_positive_int("nq", nq), check_positive_int("nk", nk), check_positive_int("d", d)
    dv = d if dv is None else check_positive_int("dv", dv)
    batch = check_positive_int("batch", batch)
    causal = check_bool("causal", causal)
    if pass_ not in PASSES:
        raise ValueError(f"pass_={pass_!r} must be one of {PASSES}")
    if (block_q is None) != (block_k is None):
        raise ValueError(f"block_q={block_q!r} and block_k={block_k!r} must both be None (naive) "
                         f"or both be ints (tiled)")
    if block_q is None:
        area = nq * nk  # naive: the full score matrix, causal or not
        per_entry = d + dv if pass_ == "forward" else 2 * d + 2 * dv
    else:
        area = computed_area(nq, nk, block_q, block_k, causal, **options)
        per_entry = d + dv if pass_ == "forward" else 3 * d + 2 * dv
    return 2 * area * per_entry * batch


def softmax_flops(nq: int, nk: int, causal: bool = False, block_q: int | None = None,
                  block_k: int | None = None, batch: int = 1, **options) -> int:
    """Rough non-matmul FLOPs of the forward softmax: 5 per computed score entry (scale, max,
    subtract, exp, sum), ignoring per-row work (rescales, division, log). Naive when no block sizes."""
    causal = check_bool("causal", causal)
    if (block_q is None) != (block_k is None):
        raise ValueError(f"block_q={block_q!r} and block_k={block_k!r} must both be None or both be ints")
    if block_q is None:
        area = check_positive_int("nq", nq) * check_positive_int("nk", nk)
    else:
        area = computed_area(nq, nk, block_q, block_k, causal, **options)
    return 5 * area * check_positive_int("batch", batch)
