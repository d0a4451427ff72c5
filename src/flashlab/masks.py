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
