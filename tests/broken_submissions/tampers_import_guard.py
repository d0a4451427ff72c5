"""Cheating ex03_tiled_forward: raises the grading child's "flashlab is importing" counter, under which
a patched library function used to run its original code, and calls flashlab's tiled attention."""
import flashlab.grading.child as _child


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    _child._IMPORTING[0] += 1
    try:
        from flashlab.tiled import tiled_attention as library

        return library(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k)
    finally:
        _child._IMPORTING[0] -= 1
