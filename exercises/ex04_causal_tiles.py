"""Exercise 04: which tiles a causal tiled loop skips.

Grade with ``check("ex04_causal_tiles")``.
Causal, top-left aligned: query row r sees key column c when c <= r. Tile (i, j) covers query
rows [i * block_q, min((i + 1) * block_q, nq)) and key columns starting at j * block_k.
"""


def causal_tile_skipped(i, j, block_q, block_k, nq):
    """True when tile (i, j) is fully masked: its first key column is past its last query row."""
    raise NotImplementedError("Exercise 04: causal tile skipping")


def count_computed_tiles(nq, nk, block_q, block_k, causal):
    """Number of tiles a tiled forward computes: ceil(nq/block_q) * ceil(nk/block_k) without
    causal; with causal, only the tiles that are not skipped. Returns an int."""
    raise NotImplementedError("Exercise 04: count the computed tiles")
