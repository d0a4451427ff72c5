"""Cheating ex03_tiled_forward: loads a fresh copy of flashlab/tiled.py from the grading machine's disk
under a new name (its functions are not the patched ones) and calls it."""
import importlib.util
from pathlib import Path

import flashlab

_spec = importlib.util.spec_from_file_location("flashlab.tiled_copy", Path(flashlab.__file__).parent / "tiled.py")
_copy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_copy)


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    return _copy.tiled_attention(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k)
