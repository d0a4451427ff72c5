"""Exercise 05: HBM traffic of the tiled forward (FlashAttention-2 loop order).

Grade with ``check("ex05_traffic")``.
"""


def fa2_forward_bytes(nq, nk, d, dv=None, block_q=64, block_k=64, causal=False, itemsize=2,
                      stat_itemsize=4):
    """Bytes read plus written by the FlashAttention-2 forward for one head.

    The model: every load and store of exercise 03's loop (FlashAttention-2 Algorithm 1, lines 4,
    7, 14 and 15), counted exactly. Q_i is read once per query block; K_j and V_j once per tile
    the loop computes (a causal loop's skipped tiles read nothing: exercise 04); O_i and its lse_i
    are written once per query block. Ragged last blocks move only their real rows. Q, K, V, O
    elements are ``itemsize`` bytes, each lse value ``stat_itemsize`` bytes. dv defaults to d.
    Returns an int.
    """
    raise NotImplementedError("Exercise 05: traffic of the tiled forward")
