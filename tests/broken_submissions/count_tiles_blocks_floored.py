"""Broken ex04_causal_tiles, an honest mistake the report names: the blocks counted as nq // block_q, rounded down."""
def causal_tile_skipped(i, j, block_q, block_k, nq):
    """True when every key column of tile (i, j) is past every query row of it (fully masked)."""
    last_row = min((i + 1) * block_q, nq) - 1
    return j * block_k > last_row


def count_computed_tiles(nq, nk, block_q, block_k, causal):
    """How many (block_q x block_k) tiles a tiled forward computes (ragged last tiles count)."""
    n_i = nq // block_q
    n_j = nk // block_k
    if not causal:
        return n_i * n_j
    return sum(not causal_tile_skipped(i, j, block_q, block_k, nq) for i in range(n_i) for j in range(n_j))
