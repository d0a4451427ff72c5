"""Closed-form HBM traffic of naive and tiled attention, and the paper's view as a function of SRAM size.

Byte counts (:class:`Traffic`) follow the "Traffic accounting rules" of docs/ARCHITECTURE.md,
transfer for transfer: a traced run of :mod:`flashlab.tiled` with the same shapes, block sizes,
``itemsize`` and ``stat_itemsize`` records exactly these bytes (tested). Every count is for the
whole batch: the per-head count times ``batch``. ``itemsize`` is bytes per element of Q, K, V, O,
S, P and the gradients (2 for fp16/bf16); ``stat_itemsize`` is bytes per row statistic (lse, m, l,
D; defaults to ``itemsize``; real kernels use 4). Tiled counts sum over the tiles that
:mod:`flashlab.visibility` marks computed for the problem (``causal``, or ``spec=`` / ``window=``
/ ``causal_align=`` / ``mask_mod=`` as in :mod:`flashlab.attnspec`), so they are exact for ragged
tiles; for causal and window rules they cost O(number of tiles) array work, never O(N^2).

- naive forward (FlashAttention paper, Algorithm 0): S and P are written to HBM and read back.
- naive backward (FlashAttention paper, Appendix B, Algorithm 3, "standard attention backward"),
  with P kept from the forward pass: read P, dO, write dV; read dO, V, write dP; read P, dP, write
  dS; read dS, K, write dQ; read dS, Q, write dK. So P is read twice, dS twice, dO twice.
- FA1 / FA2 forward and the FA2 backward: see :mod:`flashlab.tiled`.

Paper view (Dao et al. 2022, Section 3.2): SRAM holds M ELEMENTS (not bytes); FlashAttention uses
block_k = Bc = ceil(M / (4d)) and block_q = Br = min(Bc, d) and makes Theta(N^2 d^2 / M) HBM
accesses (Theorem 2) against Theta(N d + N^2) for standard attention; Proposition 3: no exact
attention algorithm makes o(N^2 d^2 / M) accesses for all M in [d, N d].

Tables of these counts for notebooks 01 and 04: :func:`naive_traffic_table`,
:func:`flops_and_bytes_table`, :func:`paper_accesses_table`, :func:`prefill_decode_table`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ._checks import check_bool, check_positive_int
from .attnspec import make_spec
from .tracer import READ, STAT_TENSORS, WRITE
from .visibility import tiles


@dataclass(frozen=True)
class Traffic:
    """HBM bytes read and written; ``by_tensor`` maps (tensor, "read"|"write") to bytes."""

    read_bytes: int
    write_bytes: int
    by_tensor: dict = field(default_factory=dict, hash=False)

    @property
    def total(self) -> int:
        return self.read_bytes + self.write_bytes


class _Tally:
    """Adds up transfers per (tensor, direction), in elements times bytes per element."""

    def __init__(self, itemsize: int, stat_itemsize: int, batch: int):
        self.sizes = {"stat": stat_itemsize, "elem": itemsize}
        self.batch = batch
        self.bytes: dict[tuple[str, str], int] = {}

    def add(self, tensor: str, direction: str, elements: int) -> None:
        size = self.sizes["stat"] if tensor in STAT_TENSORS else self.sizes["elem"]
        key = (tensor, direction)
        self.bytes[key] = self.bytes.get(key, 0) + elements * size * self.batch

    def traffic(self) -> Traffic:
        by = {key: n for key, n in self.bytes.items() if n}
        reads = sum(n for (_, direction), n in by.items() if direction == READ)
        writes = sum(n for (_, direction), n in by.items() if direction == WRITE)
        return Traffic(reads, writes, by)


def _sizes(nq, nk, d, dv, itemsize, stat_itemsize, batch, block_q=1, block_k=1, causal=False, options=None):
    nq, nk, d = (check_positive_int(n, x) for n, x in (("nq", nq), ("nk", nk), ("d", d)))
    dv = d if dv is None else check_positive_int("dv", dv)
    itemsize = check_positive_int("itemsize", itemsize)
    stat_itemsize = itemsize if stat_itemsize is None else check_positive_int("stat_itemsize", stat_itemsize)
    batch = check_positive_int("batch", batch)
    block_q, block_k = check_positive_int("block_q", block_q), check_positive_int("block_k", block_k)
    spec = make_spec((options or {}).pop("spec", None), causal=check_bool("causal", causal), **(options or {}))
    spec.refuse(("window", "causal_align", "mask_mod"), "the traffic counts (one sequence's lengths at a time: "
                "call once per sequence with its Nq, Nk instead of seqlens_q/seqlens_k)")
    spec.check_lengths(nq, nk)
    return nq, nk, d, dv, _Tally(itemsize, stat_itemsize, batch), tiles(spec, nq, nk, block_q, block_k)


def naive_traffic(nq: int, nk: int, d: int, dv: int | None = None, itemsize: int = 2, batch: int = 1,
                  causal: bool = False, scale_pass: bool = False) -> Traffic:
    """Standard attention forward: read Q, K; write S; read S; write P; read P, V; write O.

    S and P (Nq x Nk) are materialised in full even when causal (``causal`` changes nothing).
    ``scale_pass``: S = Q K^T and S * scale are two kernels, as in the naive attention the course
    measured (``torch.matmul(q, k.transpose(-1, -2)) * scale``, benchmarks/_common.py): the scaling
    reads S and writes it back once more. Algorithm 0 folds the scale into the product (the default).
    """
    nq, nk, d, dv, t, _ = _sizes(nq, nk, d, dv, itemsize, None, batch, causal=causal)
    t.add("Q", READ, nq * d)
    t.add("K", READ, nk * d)
    t.add("S", WRITE, nq * nk)
    if check_bool("scale_pass", scale_pass):
        t.add("S", READ, nq * nk)
        t.add("S", WRITE, nq * nk)
    t.add("S", READ, nq * nk)
    t.add("P", WRITE, nq * nk)
    t.add("P", READ, nq * nk)
    t.add("V", READ, nk * dv)
    t.add("O", WRITE, nq * dv)
    return t.traffic()


def naive_backward_traffic(nq: int, nk: int, d: int, dv: int | None = None, itemsize: int = 2,
                           batch: int = 1, causal: bool = False) -> Traffic:
    """Standard attention backward (FlashAttention paper, Algorithm 3), P stored by the forward."""
    nq, nk, d, dv, t, _ = _sizes(nq, nk, d, dv, itemsize, None, batch, causal=causal)
    # dV = P^T dO
    t.add("P", READ, nq * nk)
    t.add("dO", READ, nq * dv)
    t.add("dV", WRITE, nk * dv)
    # dP = dO V^T
    t.add("dO", READ, nq * dv)
    t.add("V", READ, nk * dv)
    t.add("dP", WRITE, nq * nk)
    # dS = P * (dP - rowsum(P * dP))
    t.add("P", READ, nq * nk)
    t.add("dP", READ, nq * nk)
    t.add("dS", WRITE, nq * nk)
    # dQ = dS K ; dK = dS^T Q
    t.add("dS", READ, 2 * nq * nk)
    t.add("K", READ, nk * d)
    t.add("Q", READ, nq * d)
    t.add("dQ", WRITE, nq * d)
    t.add("dK", WRITE, nk * d)
    return t.traffic()


def fa2_forward_traffic(nq: int, nk: int, d: int, dv: int | None = None, block_q: int = 64, block_k: int = 64,
                        causal: bool = False, itemsize: int = 2, stat_itemsize: int | None = None,
                        batch: int = 1, **options) -> Traffic:
    """FlashAttention-2 forward: Q_i read once; K_j, V_j read once per computed tile; O, lse written once.
    ``options``: ``spec=`` or AttnSpec fields (``window``, ``causal_align``, ``mask_mod``)."""
    nq, nk, d, dv, t, grid = _sizes(nq, nk, d, dv, itemsize, stat_itemsize, batch, block_q, block_k, causal, options)
    kv_rows = int(grid.visited_tiles.sum(axis=0) @ grid.col_counts)  # keys loaded, summed over tiles
    t.add("Q", READ, nq * d)
    t.add("K", READ, kv_rows * d)
    t.add("V", READ, kv_rows * dv)
    t.add("O", WRITE, nq * dv)
    t.add("lse", WRITE, nq)
    return t.traffic()


def _per_key_block(grid):
    """(ck, q_rows, loaded) per key block: its keys, the query rows of its computed tiles, and
    whether any tile of it is computed (K_j, V_j loaded)."""
    visited = grid.visited_tiles  # (nqb, nkb)
    return grid.col_counts, grid.row_counts @ visited, visited.any(axis=0)


def fa1_forward_traffic(nq: int, nk: int, d: int, dv: int | None = None, block_q: int = 64, block_k: int = 64,
                        causal: bool = False, itemsize: int = 2, stat_itemsize: int | None = None,
                        batch: int = 1, **options) -> Traffic:
    """FlashAttention-1 forward: O, l, m initialised in HBM, then read and written back per tile."""
    nq, nk, d, dv, t, grid = _sizes(nq, nk, d, dv, itemsize, stat_itemsize, batch, block_q, block_k, causal, options)
    ck, q_rows, loaded = _per_key_block(grid)
    kv_rows, q_rows = int(ck @ loaded), int(q_rows.sum())  # key blocks some query sees: K_j, V_j loaded
    t.add("O", WRITE, nq * dv)
    t.add("l", WRITE, nq)
    t.add("m", WRITE, nq)
    t.add("K", READ, kv_rows * d)
    t.add("V", READ, kv_rows * dv)
    for name, width in (("Q", d), ("O", dv), ("l", 1), ("m", 1)):
        t.add(name, READ, q_rows * width)
    for name, width in (("O", dv), ("l", 1), ("m", 1)):
        t.add(name, WRITE, q_rows * width)
    return t.traffic()


def backward_traffic(nq: int, nk: int, d: int, dv: int | None = None, block_q: int = 64, block_k: int = 64,
                     causal: bool = False, itemsize: int = 2, stat_itemsize: int | None = None,
                     batch: int = 1, **options) -> Traffic:
    """FlashAttention-2 backward (Algorithm 2): D preprocessing, then per computed tile Q_i, dO_i,
    lse_i, D_i, dQ_i read and dQ_i written; K_j, V_j read (when some tile of them is computed) and
    dK_j, dV_j written once per key block."""
    nq, nk, d, dv, t, grid = _sizes(nq, nk, d, dv, itemsize, stat_itemsize, batch, block_q, block_k, causal, options)
    ck, q_rows, loaded = _per_key_block(grid)
    kv_rows, q_rows = int(ck @ loaded), int(q_rows.sum())
    t.add("dO", READ, nq * dv)
    t.add("O", READ, nq * dv)
    t.add("D", WRITE, nq)
    t.add("dQ", WRITE, nq * d)
    t.add("K", READ, kv_rows * d)
    t.add("V", READ, kv_rows * dv)
    for name, width in (("Q", d), ("dO", dv), ("lse", 1), ("D", 1), ("dQ", d)):
        t.add(name, READ, q_rows * width)
    t.add("dQ", WRITE, q_rows * d)
    t.add("dK", WRITE, nk * d)
    t.add("dV", WRITE, nk * dv)
    return t.traffic()


# -- the paper's view: M = SRAM size in elements -------------------------------------------------
def paper_block_sizes(sram_elements: int, d: int) -> tuple[int, int]:
    """(block_r, block_c) = (min(Bc, d), ceil(M / (4 d))) for an SRAM of M = sram_elements ELEMENTS."""
    m = check_positive_int("sram_elements", sram_elements)
    d = check_positive_int("d", d)
    block_c = -(-m // (4 * d))
    return min(block_c, d), block_c


def flash_hbm_accesses(n: int, d: int, sram_elements: int) -> int:
    """HBM accesses (ELEMENTS read + written) of FlashAttention-1 forward, Nq = Nk = n, dv = d,
    non-causal, with the paper's block sizes for an SRAM of M = sram_elements elements.
    Theta(N^2 d^2 / M) (Theorem 2)."""
    n = check_positive_int("n", n)
    block_r, block_c = paper_block_sizes(sram_elements, d)
    return fa1_forward_traffic(n, n, d, block_q=block_r, block_k=block_c, itemsize=1, stat_itemsize=1).total


def standard_hbm_accesses(n: int, d: int) -> int:
    """HBM accesses (ELEMENTS) of standard attention forward (Algorithm 0): 4 N d + 4 N^2, Theta(N d + N^2)."""
    n = check_positive_int("n", n)
    return naive_traffic(n, n, d, itemsize=1).total


def io_lower_bound(n: int, d: int, sram_elements: int) -> int:
    """A lower bound on HBM accesses (ELEMENTS) of exact attention, Nq = Nk = n, dv = d.

    max(ceil(N^2 d^2 / M), 4 N d): the second term is reading Q, K, V and writing O once each;
    the first is the Omega(N^2 d^2 / M) of Proposition 3 taken with constant 1 (the paper states
    it for M in [d, N d] and gives no constant, so it shows the scaling, not an exact floor).
    """
    n, d = check_positive_int("n", n), check_positive_int("d", d)
    m = check_positive_int("sram_elements", sram_elements)
    return max(-(-(n * n * d * d) // m), 4 * n * d)


# -- tables for notebooks 01 and 04 ----------------------------------------------------------------
def _sizes_arg(name: str, values) -> tuple[int, ...]:
    """A non-empty sequence of positive ints (sequence lengths, SRAM sizes)."""
    try:
        values = tuple(values)
    except TypeError:
        raise ValueError(f"{name}={values!r} must be a sequence of ints >= 1") from None
    if not values:
        raise ValueError(f"{name}={values!r} must hold at least one size")
    return tuple(check_positive_int(name, v) for v in values)


def naive_traffic_table(n: int = 4096, d: int = 128, itemsize: int = 2) -> str:
    """:func:`naive_traffic` of one head, Nq = Nk = n, tensor by tensor, largest first; then the
    total, the share of it that S and P make, and the arithmetic intensity (matmul FLOPs per HBM
    byte) beside the measured H200's ridge point."""
    from .flops import attention_flops
    from .hardware import H200_MEASURED
    from .viz.style import format_bytes

    n, d = check_positive_int("n", n), check_positive_int("d", d)
    t = naive_traffic(n, n, d, itemsize=itemsize)
    parts = sorted(t.by_tensor.items(), key=lambda kv: -kv[1])
    lines = [f"{direction:<5} {tensor:<2} {format_bytes(nbytes):>10}" for (tensor, direction), nbytes in parts]
    sp = sum(b for (tensor, _), b in t.by_tensor.items() if tensor in ("S", "P"))
    lines.append(f"total {format_bytes(t.total)}; S and P are {sp / t.total:.1%} of it")
    lines.append(f"arithmetic intensity: {attention_flops(n, n, d) / t.total:.0f} FLOP/byte "
                 f"(the measured H200 ridge point is about {H200_MEASURED.ridge_point:.0f} FLOP/byte: notebook 00)")
    return "\n".join(lines)


def flops_and_bytes_table(ns=(1024, 4096, 16384, 65536), d: int = 128, block: int = 128, itemsize: int = 2) -> str:
    """Naive against tiled attention for one head, Nq = Nk = N, non-causal, one line per N: matmul
    FLOPs of both (equal), HBM bytes of both (:func:`naive_traffic`, :func:`fa2_forward_traffic`
    with ``block`` x ``block`` tiles and fp32 statistics) and how many times fewer the tiled moves."""
    from .flops import attention_flops
    from .viz.style import format_bytes

    ns, d, block = _sizes_arg("ns", ns), check_positive_int("d", d), check_positive_int("block", block)
    lines = [f"{'N':>6} {'naive FLOPs':>14} {'tiled FLOPs':>14} {'naive bytes':>12} {'flash bytes':>12} "
             f"{'bytes saved':>12}"]
    for n in ns:
        f_naive, f_tiled = attention_flops(n, n, d), attention_flops(n, n, d, block_q=block, block_k=block)
        b_naive = naive_traffic(n, n, d, itemsize=itemsize).total
        b_flash = fa2_forward_traffic(n, n, d, block_q=block, block_k=block, itemsize=itemsize, stat_itemsize=4).total
        lines.append(f"{n:>6} {f_naive:>14.3e} {f_tiled:>14.3e} {format_bytes(b_naive):>12} "
                     f"{format_bytes(b_flash):>12} {b_naive / b_flash:>11.1f}x")
    return "\n".join(lines)


def paper_accesses_table(n: int = 16384, d: int = 64, sram_kib=(16, 32, 64, 128, 228), itemsize: int = 2) -> str:
    """The paper's view, one line per SRAM size: HBM accesses (elements) of FlashAttention with the
    paper's block sizes (:func:`flash_hbm_accesses`), the lower bound (:func:`io_lower_bound`) and
    standard attention (:func:`standard_hbm_accesses`). An SRAM of ``sram_kib`` KiB holds
    M = sram_kib * 1024 / itemsize elements."""
    n, d = check_positive_int("n", n), check_positive_int("d", d)
    sram_kib, itemsize = _sizes_arg("sram_kib", sram_kib), check_positive_int("itemsize", itemsize)
    standard = standard_hbm_accesses(n, d)
    lines = []
    for kib in sram_kib:
        m = kib * 1024 // itemsize
        if m < 1:
            raise ValueError(f"sram_kib={kib} holds no {itemsize}-byte element")
        lines.append(f"M = {kib:>3} KiB: flash {flash_hbm_accesses(n, d, m):>14,} accesses; "
                     f"lower bound {io_lower_bound(n, d, m):>12,}; standard {standard:,}")
    return "\n".join(lines)


def prefill_decode_table(n: int = 8192, d: int = 128, block: int = 128, itemsize: int = 2) -> str:
    """Prefill (Nq = Nk = n) against decode (one query row, Nk = n), one head: HBM bytes of naive
    and of the FlashAttention-2 forward (``block`` x ``block`` tiles, fp32 statistics), their
    ratio, and the flash forward's arithmetic intensity (matmul FLOPs per HBM byte)."""
    from .flops import attention_flops
    from .viz.style import format_bytes

    n, d, block = check_positive_int("n", n), check_positive_int("d", d), check_positive_int("block", block)
    lines = []
    for name, nq in (("prefill", n), ("decode", 1)):
        naive = naive_traffic(nq, n, d, itemsize=itemsize).total
        flash = fa2_forward_traffic(nq, n, d, block_q=block, block_k=block, itemsize=itemsize, stat_itemsize=4).total
        lines.append(f"{name:<8} Nq = {nq:>5}: naive {format_bytes(naive):>10}, flash {format_bytes(flash):>10}, "
                     f"ratio {naive / flash:6.1f}x, flash intensity {attention_flops(nq, n, d) / flash:6.1f} FLOP/byte")
    return "\n".join(lines)
