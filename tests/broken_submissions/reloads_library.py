"""Cheating ex03_tiled_forward: reloads flashlab.tiled (fresh, unwrapped functions?) and calls it."""
import importlib


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    import flashlab.tiled

    fresh = importlib.reload(flashlab.tiled)
    return fresh.tiled_attention(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k)
