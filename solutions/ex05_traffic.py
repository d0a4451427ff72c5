"""Exercise 05 (solution): the HBM bytes of the tiled forward (FlashAttention-2 loop order).

For each query block i: read Q_i; for each key block j whose tile is not skipped: read K_j and V_j;
then write O_i and lse_i (lse: one value of stat_itemsize bytes per row).
"""


def fa2_forward_bytes(nq, nk, d, dv=None, block_q=64, block_k=64, causal=False, itemsize=2,
                      stat_itemsize=4):
    """Total bytes read plus written by the FlashAttention-2 forward for one head."""
    dv = d if dv is None else dv
    total = 0
    for q0 in range(0, nq, block_q):
        rows = min(q0 + block_q, nq) - q0
        total += rows * d * itemsize  # read Q_i
        for k0 in range(0, nk, block_k):
            if causal and k0 > q0 + rows - 1:
                break
            cols = min(k0 + block_k, nk) - k0
            total += cols * (d + dv) * itemsize  # read K_j, V_j
        total += rows * dv * itemsize + rows * stat_itemsize  # write O_i, lse_i
    return total
