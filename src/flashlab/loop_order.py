"""FA1's loop order against FA2's: what the traffic model says about their HBM bytes, and why.

Non-causal, Nq = Nk = N, d = dv, ignoring the row statistics (see :mod:`flashlab.traffic` for
the exact counts, which these tables use):

* FA1 (outer loop over key blocks of Bc rows): K, V read once; per key block, Q, O (read and
  written) and m, l round-trip once: about 2 N d + (N / Bc) * 3 N d elements = 3 N^2 d / Bc.
* FA2 (outer loop over query blocks of Br rows): Q read and O written once; K, V read once per
  query block: about 2 N d + (N / Br) * 2 N d elements = 2 N^2 d / Br.

So FA1's bytes fall with the *key* block Bc and FA2's with the *query* block Br. With equal
blocks, FA2 moves about 2/3 of FA1's bytes. With the paper's block sizes for an SRAM of M
elements (Bc = ceil(M / 4d), Br = min(Bc, d): the FlashAttention paper's choice for FA1), Br stops
at d once M > 4 d (d - 1) (:func:`fa2_floor_sram`, just under 4 d^2), so from there FA2's bytes
stop falling at about 2 N^2 elements (half of naive attention's 4 N^2), while FA1's keep falling
as 12 N^2 d^2 / M. Below it Br = ceil(M / 4d) < d and FA2 moves about 8 N^2 d^2 / M elements:
more than half of naive, and as much as naive at M = 2 d^2. Neither is FA2's reason to exist:
its gains are the parallelism over query blocks, fewer non-matmul FLOPs and no combining
between warps (FlashAttention-2, Section 3), and on a GPU the L2 cache absorbs most K/V re-reads
(ncu, notebook 04).
"""
from __future__ import annotations

from . import traffic as tr
from ._checks import check_positive_int


def fa2_floor_sram(d: int) -> int:
    """The smallest SRAM size M (ELEMENTS) at which the paper's Br = min(ceil(M / 4d), d) equals d:
    ceil(M / 4d) >= d  <=>  M > 4 d (d - 1). From this M on, FA2's loop order with the paper's
    blocks moves about 2 N^2 elements (half of naive attention) whatever M; below it, more."""
    d = check_positive_int("d", d)
    return 4 * d * (d - 1) + 1


def loop_order_rows(n: int = 16384, d: int = 64, sram_kib=(16, 32, 64, 128, 228), itemsize: int = 2,
                    equal_block: int = 128) -> list[dict]:
    """Per SRAM size: the paper's (Br, Bc), FA1 and FA2 bytes with them, and both with equal blocks."""
    n, d = check_positive_int("n", n), check_positive_int("d", d)
    equal_block = check_positive_int("equal_block", equal_block)
    kw = dict(itemsize=itemsize, stat_itemsize=4)
    equal = dict(block_q=equal_block, block_k=equal_block, **kw)
    fa1_eq = tr.fa1_forward_traffic(n, n, d, **equal).total
    fa2_eq = tr.fa2_forward_traffic(n, n, d, **equal).total
    rows = []
    for kib in sram_kib:
        m = check_positive_int("sram_kib", kib) * 1024 // itemsize
        br, bc = tr.paper_block_sizes(m, d)
        rows.append({"sram_kib": kib, "block_r": br, "block_c": bc,
                     "fa1": tr.fa1_forward_traffic(n, n, d, block_q=br, block_k=bc, **kw).total,
                     "fa2": tr.fa2_forward_traffic(n, n, d, block_q=br, block_k=bc, **kw).total,
                     "fa1_equal": fa1_eq, "fa2_equal": fa2_eq,
                     "naive": tr.naive_traffic(n, n, d, itemsize=itemsize).total})
    return rows


def loop_order_table(n: int = 16384, d: int = 64, sram_kib=(16, 32, 64, 128, 228), equal_block: int = 128) -> str:
    """:func:`loop_order_rows` as text, bytes in GiB."""
    gib = 2**30
    rows = loop_order_rows(n, d, sram_kib, equal_block=equal_block)
    lines = [f"N = {n}, d = {d}, fp16 tensors, fp32 statistics; naive attention moves {rows[0]['naive'] / gib:.2f} GiB",
             f"{'SRAM':>8} {'paper (Br, Bc)':>15} {'FA1 bytes':>10} {'FA2 bytes':>10}   "
             f"| equal {equal_block} x {equal_block} blocks: FA1 {rows[0]['fa1_equal'] / gib:.2f} GiB, "
             f"FA2 {rows[0]['fa2_equal'] / gib:.2f} GiB"]
    for r in rows:
        lines.append(f"{r['sram_kib']:>4} KiB {str((r['block_r'], r['block_c'])):>15} "
                     f"{r['fa1'] / gib:>8.2f} G {r['fa2'] / gib:>8.2f} G")
    return "\n".join(lines)
