"""flashlab: FlashAttention end to end, from naive attention to a Triton kernel.

``import flashlab`` needs only NumPy. Public names are loaded on first use, so the Triton
kernels (torch, triton) and the figures (matplotlib, ipywidgets) cost nothing until asked for.
"""
from __future__ import annotations

from flashlab._lazy import lazy_exports

__version__ = "0.2.0.dev0"  # as pyproject.toml (tests/test_release.py checks)

_EXPORTS = {
    # reference and softmax building blocks (NumPy)
    "naive_attention": "reference",
    "naive_attention_backward": "reference",
    "safe_softmax": "softmax",
    "logsumexp": "softmax",
    "softmax_state": "softmax",
    "combine_states": "softmax",
    "online_softmax": "softmax",
    # tiled FlashAttention (NumPy) and its traffic accounting
    "tiled_attention": "tiled",
    "tiled_attention_fa1": "tiled",
    "tiled_attention_backward": "tiled",
    "online_update": "softmax",
    "causal_tile_skipped": "tiled",
    "TrafficTracer": "tracer",
    # closed-form traffic and FLOP models
    "Traffic": "traffic",
    "naive_traffic": "traffic",
    "naive_backward_traffic": "traffic",
    "fa2_forward_traffic": "traffic",
    "fa1_forward_traffic": "traffic",
    "backward_traffic": "traffic",
    "paper_block_sizes": "traffic",
    "flash_hbm_accesses": "traffic",
    "standard_hbm_accesses": "traffic",
    "io_lower_bound": "traffic",
    "attention_flops": "flops",
    "softmax_flops": "flops",
    # Triton (torch tensors)
    "flash_attention": "kernels.attention",
    "flash_decode": "decode",
    # the autograder
    "check": "grading",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
