"""One description of an attention problem: which keys each query may see, and how scores scale.

:class:`AttnSpec` is a frozen dataclass passed, unchanged, through every layer: the NumPy
reference and tiled loops, the traffic and FLOP formulas, the tile picture, dispatch among the
Triton rungs, the autograd Function and the kernels' constexpr flags. The tile geometry that
follows from it (which tiles are full, masked or skipped; the loop ranges) is
:mod:`flashlab.visibility`.

Conventions (Nq query rows, Nk key rows, 0-based):

* ``diagonal``: ``off = 0`` for ``causal_align="top_left"`` (as torch SDPA ``is_causal=True``)
  and ``off = Nk - Nq`` for ``"bottom_right"`` (the last query lines up with the last key, as
  in decoding with a KV cache: query i of Nq sees keys ``j <= Nk - Nq + i``).
* ``causal``: query i sees key j only if ``j <= i + off``.
* ``window=w`` (sliding window, needs ``causal``): query i also needs ``j > i + off - w``, so it
  sees the w keys ``i + off - w < j <= i + off``.
* ``mask_mod(q_idx, kv_idx) -> bool``: an extra rule in the manner of FlexAttention, called with
  broadcastable integer arrays; True where the key is visible. It is ANDed with the rules above.
  The NumPy paths take any Python function; the Triton rungs v0-v2 and the backward take a
  ``@triton.jit`` function written with plain operators (the NumPy paths then call its Python
  ``.fn``), so one function serves both. Block skipping is derived from it by evaluating it on
  each tile (:mod:`flashlab.visibility`: full, partial or empty; the forward kernels get each
  query block's lists of partial and full key blocks, the backward the span of visited blocks).
* Per-sequence lengths (a padded batch): ``seqlens_q`` / ``seqlens_k`` give each sequence's
  (Nq_b, Nk_b) inside padded (B, ..., N, d) arrays (axis 0 is the sequence; None: every sequence
  has the full length). Sequence b's queries are rows 0..Nq_b-1 and its keys rows 0..Nk_b-1; the
  rules above apply per sequence with its own Nq_b, Nk_b (so ``bottom_right`` lines up each
  sequence's last query with its own last key). Rows past Nq_b are padding: every path writes
  o = 0 and lse = -inf there (the log-sum-exp over no key), and their gradients are 0; keys past
  Nk_b are never read. The lengths may be a sequence of ints or a (B,) integer array or tensor;
  they are kept on the host as a tuple (a CUDA tensor is copied to the host once per call).
  (flash-attn's varlen functions take packed rows and cumulative offsets instead;
  padded-with-lengths keeps the (B, H, N, d) layout every flashlab path uses.)

Every query row must see at least one key: :meth:`AttnSpec.check_lengths` rejects shapes where
some row sees none (bottom-right with Nq > Nk, or a window past the last key), since such a row
has no softmax.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields, replace
from typing import Callable

CAUSAL_ALIGNS = ("top_left", "bottom_right")


@dataclass(frozen=True)
class AttnSpec:
    """Which keys each query sees, the softmax scale and the head grouping (see module docstring)."""

    causal: bool = False
    causal_align: str = "top_left"  # "top_left" (off = 0) or "bottom_right" (off = Nk - Nq)
    window: int | None = None  # sliding window: the last `window` keys up to the diagonal
    scale: float | None = None  # None: 1/sqrt(d)
    group: int = 1  # grouped-query attention: query heads per kv head
    mask_mod: Callable | None = None  # mask_mod(q_idx, kv_idx) -> bool, True = visible
    seqlens_q: tuple[int, ...] | None = None  # per-sequence query lengths in a padded batch
    seqlens_k: tuple[int, ...] | None = None  # per-sequence key lengths in a padded batch

    def __post_init__(self):
        if not isinstance(self.causal, bool):
            raise TypeError(f"causal must be a bool, got {self.causal!r}")
        if self.causal_align not in CAUSAL_ALIGNS:
            raise ValueError(f"causal_align={self.causal_align!r} must be one of {CAUSAL_ALIGNS}")
        if self.window is not None:
            if isinstance(self.window, bool) or not isinstance(self.window, numbers.Integral) or self.window < 1:
                raise ValueError(f"window={self.window!r} must be a positive int (keys per query) or None")
            if not self.causal:
                raise ValueError(f"window={self.window} needs causal=True: a sliding window is the last "
                                 "`window` keys up to the diagonal")
            object.__setattr__(self, "window", int(self.window))
        if self.scale is not None:
            if isinstance(self.scale, bool) or not isinstance(self.scale, numbers.Real):
                raise TypeError(f"scale must be a real number or None, got {type(self.scale).__name__} {self.scale!r}")
            if not math.isfinite(self.scale) or self.scale <= 0:
                raise ValueError(f"scale={self.scale!r} must be a finite positive number or None (1/sqrt(d))")
        if isinstance(self.group, bool) or not isinstance(self.group, numbers.Integral) or self.group < 1:
            raise ValueError(f"group={self.group!r} must be a positive int (query heads per kv head)")
        if self.mask_mod is not None and not callable(self.mask_mod):
            raise TypeError(f"mask_mod must be a function (q_idx, kv_idx) -> bool, got {type(self.mask_mod).__name__}")
        for name in ("seqlens_q", "seqlens_k"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, _lengths(name, getattr(self, name)))
        if self.seqlens_q is not None and self.seqlens_k is not None and len(self.seqlens_q) != len(self.seqlens_k):
            raise ValueError(f"seqlens_q has {len(self.seqlens_q)} lengths but seqlens_k has {len(self.seqlens_k)}; "
                             "give one per sequence in both")

    # -- the rule --------------------------------------------------------------------------------
    @property
    def banded(self) -> bool:
        """True when the rule is only causal/window (no mask_mod): tile ranges have closed forms."""
        return self.mask_mod is None

    @property
    def is_dense(self) -> bool:
        """True when every query sees every key (no causal, no window, no mask_mod)."""
        return not self.causal and self.mask_mod is None

    def diagonal(self, nq: int, nk: int) -> int:
        """off: query i's diagonal key is i + off (0 top-left, Nk - Nq bottom-right)."""
        return nk - nq if self.causal_align == "bottom_right" else 0

    def key_interval(self, i, nq: int, nk: int):
        """(first, last + 1) of the keys query row(s) i see under causal/window (mask_mod aside).
        Works on ints and on integer NumPy arrays; empty when first >= last + 1."""
        off = self.diagonal(nq, nk)
        first, end = 0 * i, 0 * i + nk
        if self.causal:
            end = _minimum(end, i + off + 1)
        if self.window is not None:
            first = _maximum(first, i + off - self.window + 1)
        return first, end

    def mask(self, q_idx, kv_idx, nq: int, nk: int):
        """True where query q_idx sees key kv_idx (broadcastable integer arrays): the whole rule."""
        import numpy as np

        q_idx, kv_idx = np.asarray(q_idx), np.asarray(kv_idx)
        first, end = self.key_interval(q_idx, nq, nk)
        visible = (kv_idx >= first) & (kv_idx < end) & (kv_idx >= 0) & (q_idx >= 0) & (q_idx < nq)
        if self.mask_mod is not None:  # a @triton.jit mask_mod is called through its Python function
            visible = visible & np.asarray(getattr(self.mask_mod, "fn", self.mask_mod)(q_idx, kv_idx), dtype=bool)
        return visible

    def check_lengths(self, nq: int, nk: int, batch: int | None = None) -> None:
        """Raise ValueError naming the option when some query row would see no key at all. With
        per-sequence lengths: also when there are not ``batch`` of them or one exceeds Nq / Nk;
        then every sequence is checked with its own lengths."""
        if self.seqlens_q is not None or self.seqlens_k is not None:
            for name, lengths, n in (("seqlens_q", self.seqlens_q, nq), ("seqlens_k", self.seqlens_k, nk)):
                if lengths is None:
                    continue
                if batch is not None and len(lengths) != batch:
                    raise ValueError(f"{name} has {len(lengths)} lengths for a batch of {batch} sequences "
                                     "(axis 0 of the inputs); give one per sequence")
                if max(lengths) > n:
                    raise ValueError(f"{name}={lengths!r}: length {max(lengths)} exceeds the padded length {n} "
                                     f"({'q' if name == 'seqlens_q' else 'k'}.shape[-2])")
            for b, nq_b, nk_b in self.sequences(nq, nk, batch or len(self.seqlens_q or self.seqlens_k)):
                try:
                    self.base.check_lengths(nq_b, nk_b)
                except ValueError as err:
                    raise ValueError(f"sequence {b} (seqlens: Nq={nq_b}, Nk={nk_b}): {err}") from None
            return
        if self.causal:
            first, end = self.key_interval(0, nq, nk)
            last_first, _ = self.key_interval(nq - 1, nq, nk)
            if end <= first:
                raise ValueError(f"causal_align={self.causal_align!r} with Nq={nq} > Nk={nk}: query rows "
                                 f"0..{nq - nk - 1} would see no key; use Nq <= Nk or causal_align='top_left'")
            if last_first >= nk:
                raise ValueError(f"window={self.window} with Nq={nq}, Nk={nk} (top-left): query rows past "
                                 f"Nk + window - 1 = {nk + self.window - 1} would see no key")
        if self.mask_mod is not None:
            import numpy as np

            rows = np.arange(nq)[:, None]
            sees = self.mask(rows, np.arange(nk)[None, :], nq, nk).any(axis=1)  # (Nq,)
            if not sees.all():
                raise ValueError(f"mask_mod hides every key from query row {int(np.argmin(sees))} "
                                 f"(Nq={nq}, Nk={nk}); every row must see at least one key")

    # -- per-sequence lengths ----------------------------------------------------------------------
    @property
    def base(self) -> "AttnSpec":
        """This spec without per-sequence lengths: the rule one sequence of (Nq_b, Nk_b) follows."""
        return self if self.seqlens_q is None and self.seqlens_k is None else self.replace(seqlens_q=None,
                                                                                          seqlens_k=None)

    def sequences(self, nq: int, nk: int, batch: int):
        """(b, Nq_b, Nk_b) for each of ``batch`` sequences (the padded lengths where none are given)."""
        for b in range(batch):
            yield (b, nq if self.seqlens_q is None else self.seqlens_q[b],
                   nk if self.seqlens_k is None else self.seqlens_k[b])

    # -- plumbing ----------------------------------------------------------------------------------
    def resolved_scale(self, d: int) -> float:
        """The softmax scale: ``scale`` or 1/sqrt(d)."""
        return 1.0 / math.sqrt(d) if self.scale is None else float(self.scale)

    def features(self) -> frozenset:
        """Names of the options beyond plain/causal top-left attention this spec uses: what a rung
        must support (``flashlab.kernels.ladder``)."""
        used = set()
        if self.window is not None:
            used.add("window")
        if self.causal and self.causal_align != "top_left":
            used.add("causal_align")
        if self.mask_mod is not None:
            used.add("mask_mod")
        if self.seqlens_q is not None or self.seqlens_k is not None:
            used.add("seqlens")
        return frozenset(used)

    def refuse(self, supported, where: str) -> None:
        """Raise ValueError naming the first option in use that ``where`` does not support."""
        missing = sorted(self.features() - set(supported))
        if missing:
            name = missing[0]
            value = {"causal_align": self.causal_align, "window": self.window, "mask_mod": self.mask_mod,
                     "seqlens": (self.seqlens_q, self.seqlens_k)}[name]
            raise ValueError(f"{name}={value!r} is not supported by {where}")

    def mask_args(self) -> dict:
        """The mask_mod's kernel keywords: MASK_MOD (the function, a constexpr) and HAS_MASK_MOD."""
        return dict(MASK_MOD=self.mask_mod, HAS_MASK_MOD=self.mask_mod is not None)

    def kernel_args(self, nq: int, nk: int) -> dict:
        """Keyword arguments every Triton kernel takes for the rule: the diagonal offset and window
        (runtime ints) and the flags CAUSAL, HAS_WINDOW (constexprs, also autotune keys)."""
        return dict(DIAG=self.diagonal(nq, nk), WINDOW=self.window or 0,
                    CAUSAL=self.causal, HAS_WINDOW=self.window is not None)

    def replace(self, **changes) -> "AttnSpec":
        return replace(self, **changes)


# the constexpr flags of kernel_args: part of every autotune key
KERNEL_FLAGS = ("CAUSAL", "HAS_WINDOW", "HAS_MASK_MOD")
OPTIONS = tuple(f.name for f in fields(AttnSpec))


def make_spec(spec: AttnSpec | None = None, causal=None, scale=None, **options) -> AttnSpec:
    """The AttnSpec of a call that may pass ``spec=`` or the old keywords (causal, scale, window,
    causal_align, mask_mod, group). Keywords left at None take the spec's (or the default's) value;
    a keyword that contradicts a given spec raises ValueError naming it."""
    given = {name: value for name, value in dict(causal=causal, scale=scale, **options).items() if value is not None}
    unknown = sorted(set(given) - set(OPTIONS))
    if unknown:
        raise TypeError(f"unknown attention option {unknown[0]!r}; expected one of {OPTIONS}")
    if spec is None:
        return AttnSpec(**given)
    if not isinstance(spec, AttnSpec):
        raise TypeError(f"spec must be a flashlab.attnspec.AttnSpec, got {type(spec).__name__}")
    for name, value in given.items():
        if name == "causal" and value is False:
            continue  # the old default: the spec decides
        if getattr(spec, name) != value:
            raise ValueError(f"{name}={value!r} contradicts spec.{name}={getattr(spec, name)!r}; pass one of them")
    return spec


def _lengths(name: str, lengths) -> tuple[int, ...]:
    """Per-sequence lengths as a tuple of ints, from a sequence of ints or a 1-D integer NumPy array
    or torch tensor (any device); TypeError / ValueError naming ``name`` otherwise."""
    if isinstance(lengths, (str, bytes)) or not hasattr(lengths, "__len__"):
        raise TypeError(f"{name} must be a 1-D sequence or (B,) integer tensor of lengths, got "
                        f"{type(lengths).__name__} {lengths!r}")
    dtype = str(getattr(lengths, "dtype", ""))
    if dtype and not any(kind in dtype for kind in ("int", "uint")) or "bool" in dtype:
        raise TypeError(f"{name} has dtype {dtype}; lengths must be integers (e.g. torch.int32)")
    shape = tuple(getattr(lengths, "shape", (len(lengths),)))
    if len(shape) != 1 or shape[0] == 0:
        raise ValueError(f"{name} must have shape (B,), one length per sequence; got shape {shape}")
    values = lengths.tolist() if hasattr(lengths, "tolist") else list(lengths)
    for n in values:
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise TypeError(f"{name}={values!r} must hold ints, got {type(n).__name__} {n!r}")
        if n < 1:
            raise ValueError(f"{name}={values!r}: every length must be >= 1 (a sequence has at least one "
                             f"query and one key), got {n}")
    return tuple(int(n) for n in values)


def _minimum(a, b):
    import numpy as np

    return np.minimum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else min(a, b)


def _maximum(a, b):
    import numpy as np

    return np.maximum(a, b) if isinstance(a, np.ndarray) or isinstance(b, np.ndarray) else max(a, b)
