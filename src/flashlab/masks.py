"""Causal masks when Nq != Nk: top-left against bottom-right alignment.

With Nq = Nk both alignments are the same lower triangle. They differ when the query rows are
fewer than the keys (decode: Nq = 1; chunked prefill: a chunk of Nq new tokens after Nk - Nq
cached ones):

* **top-left** (PyTorch SDPA ``is_causal=True``, and flashlab's ``causal=True``): query row i
  sees keys j <= i, counting both from the first position. A single decode query sees key 0 only.
* **bottom-right** (flash-attn 2.1 and later, whose ``causal=True`` changed to this alignment;
  also ``torch.nn.attention.bias.causal_lower_right``): query row i is the token at position
  i + (Nk - Nq) and sees keys j <= i + Nk - Nq. A single decode query sees the whole cache;
  a chunk of new tokens sees the cache plus the chunk's own past. This is what decode and
  chunked prefill need, because the queries are the *last* Nq positions.
"""
from __future__ import annotations

import numpy as np

from ._checks import check_positive_int

ALIGNMENTS = ("top-left", "bottom-right")


def causal_mask(nq: int, nk: int, align: str = "top-left") -> np.ndarray:
    """Boolean (nq, nk): True where query row i may attend to key j."""
    nq, nk = check_positive_int("nq", nq), check_positive_int("nk", nk)
    if align not in ALIGNMENTS:
        raise ValueError(f"align={align!r} must be one of {ALIGNMENTS}")
    offset = 0 if align == "top-left" else nk - nq
    i = np.arange(nq)[:, None]  # (nq, 1)
    j = np.arange(nk)[None, :]  # (1, nk)
    return j <= i + offset  # (nq, nk)


def show_causal_masks(nq: int, nk: int) -> str:
    """Both alignments side by side as text ('#' visible, '.' masked), one line per query row."""
    masks = {a: causal_mask(nq, nk, a) for a in ALIGNMENTS}
    width = max(nk, len(ALIGNMENTS[1]))
    lines = [f"Nq = {nq}, Nk = {nk}", "   ".join(f"{a:<{width}}" for a in ALIGNMENTS)]
    for i in range(nq):
        rows = ["".join("#" if x else "." for x in masks[a][i]) for a in ALIGNMENTS]
        lines.append("   ".join(f"{r:<{width}}" for r in rows))
    for a in ALIGNMENTS:
        empty = int((~masks[a].any(axis=1)).sum())
        lines.append(f"{a}: the last query row sees {int(masks[a][-1].sum())} of {nk} keys; "
                     f"{empty} query rows see no key at all")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- one rule, one tile model
TILE_MARKS = {0: ".", 1: "+", 2: "#"}  # visibility.SKIPPED, PARTIAL, FULL


def lesson_rules(n: int) -> dict:
    """Four attention rules over n tokens, each an :class:`flashlab.attnspec.AttnSpec`: dense,
    causal, a causal sliding window of n // 4 keys, and three packed documents (a token sees the
    earlier tokens of its own document: causal plus a ``mask_mod``)."""
    from .attnspec import AttnSpec

    n = check_positive_int("n", n)
    starts = np.array([0, 5 * n // 16, 11 * n // 16])  # where each document begins

    def same_document(q_idx, kv_idx):
        return np.searchsorted(starts, q_idx, side="right") == np.searchsorted(starts, kv_idx, side="right")

    return {"dense": AttnSpec(), "causal": AttnSpec(causal=True),
            f"window {n // 4}": AttnSpec(causal=True, window=n // 4),
            "3 documents": AttnSpec(causal=True, mask_mod=same_document)}


def tile_map(spec, n: int, block: int) -> list[str]:
    """The (block x block) tiles of an n x n score matrix under ``spec``, one text row per query
    block: '#' full (no mask needed), '+' partial (masked inside), '.' skipped (never loaded)."""
    from .visibility import tiles

    states = tiles(spec, n, n, block, block).states  # (query blocks, key blocks)
    return ["".join(TILE_MARKS[int(s)] for s in row) for row in states]


def show_rules(n: int = 512, d: int = 64, block: int = 64) -> str:
    """Each rule of :func:`lesson_rules` as its tile map, then what it costs a FlashAttention-2
    forward: tiles by state, K/V bytes read (fp16) and matmul FLOPs, against dense attention. All
    numbers come from the one visibility model the kernels, traffic and FLOP counts share."""
    from . import flops, traffic
    from .visibility import FULL, PARTIAL, SKIPPED, tiles

    n, d, block = (check_positive_int(name, x) for name, x in (("n", n), ("d", d), ("block", block)))
    rules = lesson_rules(n)
    maps = {name: tile_map(spec, n, block) for name, spec in rules.items()}
    width = max(len(next(iter(maps.values()))[0]), max(len(name) for name in rules))
    lines = [f"N = {n}, d = {d}, {block} x {block} tiles: '#' full, '+' masked, '.' skipped",
             "   ".join(f"{name:<{width}}" for name in rules)]
    for i in range(len(next(iter(maps.values())))):
        lines.append("   ".join(f"{maps[name][i]:<{width}}" for name in rules))

    def kv_bytes(spec):
        t = traffic.fa2_forward_traffic(n, n, d, block_q=block, block_k=block, spec=spec)
        return t.by_tensor[("K", "read")] + t.by_tensor[("V", "read")]

    dense_bytes = kv_bytes(rules["dense"])
    dense_flops = flops.attention_flops(n, n, d, block_q=block, block_k=block)
    lines.append("")
    lines.append(f"{'rule':<14}{'full':>6}{'masked':>8}{'skipped':>9}{'K+V read':>12}{'of dense':>10}"
                 f"{'FLOPs, of dense':>17}")
    for name, spec in rules.items():
        states = tiles(spec, n, n, block, block).states
        count = {s: int((states == s).sum()) for s in (FULL, PARTIAL, SKIPPED)}
        b = kv_bytes(spec)
        f = flops.attention_flops(n, n, d, block_q=block, block_k=block, spec=spec)
        lines.append(f"{name:<14}{count[FULL]:>6}{count[PARTIAL]:>8}{count[SKIPPED]:>9}"
                     f"{b / 2**10:>8.0f} KiB{b / dense_bytes:>10.0%}{f / dense_flops:>17.0%}")
    return "\n".join(lines)


def check_rules(n: int = 200, d: int = 16, block: int = 32, seed: int = 0) -> str:
    """The NumPy FlashAttention-2 forward under each rule of :func:`lesson_rules` against naive
    attention with the same rule (the full score matrix, masked), on fresh random float64 inputs."""
    from .reference import naive_attention
    from .tiled import tiled_attention

    rng = np.random.default_rng(seed)
    lines = [f"N = {n}, d = {d}, {block} x {block} tiles, float64: max |tiled - naive|"]
    for name, spec in lesson_rules(n).items():
        q, k, v = (rng.standard_normal((n, d)) for _ in range(3))
        out = tiled_attention(q, k, v, block_q=block, block_k=block, spec=spec)
        lines.append(f"{name:<14} {np.abs(out - naive_attention(q, k, v, spec=spec)).max():.1e}")
    return "\n".join(lines)
