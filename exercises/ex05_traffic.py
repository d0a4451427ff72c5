"""Exercise 05: HBM traffic of the tiled forward (FlashAttention-2 loop order).

Grade with ``check("ex05_traffic")``.
"""


def fa2_forward_bytes(nq, nk, d, dv=None, block_q=64, block_k=64, causal=False, itemsize=2,
                      stat_itemsize=4):
    """Bytes read plus written by the FlashAttention-2 forward for one head.

    For each query block i (the last may be ragged): read Q_i (rows x d); for each key block j
    whose tile (i, j) is not skipped (causal: skipped when j * block_k > last query row of block i):
    read K_j (cols x d) and V_j (cols x dv); then write O_i (rows x dv) and lse_i (rows values of
    stat_itemsize bytes). Q, K, V, O elements are ``itemsize`` bytes. dv defaults to d.
    Returns an int.
    """
    raise NotImplementedError("Exercise 05: traffic of the tiled forward")
