"""Broken ex04_causal_tiles: causal_tile_skipped is right, but count_computed_tiles uses a skip rule of
its own with >= for >: a key block that starts exactly at a query block's last row is skipped, though
that row sees the block's first key."""


def causal_tile_skipped(i, j, block_q, block_k, nq):
    return j * block_k > min((i + 1) * block_q, nq) - 1


def count_computed_tiles(nq, nk, block_q, block_k, causal):
    n_i, n_j = -(-nq // block_q), -(-nk // block_k)
    if not causal:
        return n_i * n_j
    return sum(not (j * block_k >= min((i + 1) * block_q, nq) - 1) for i in range(n_i) for j in range(n_j))
