"""Triton kernels: the primer (vector add, row softmax, matmul) and FlashAttention forward/backward.

Submodules import torch and triton; importing this package does not. ``_mode`` decides whether
Triton is compiled for a GPU or run in its CPU interpreter (read it before importing triton
yourself). Public entry point: ``flashlab.kernels.attention.flash_attention``; the forward rungs
for the benchmarks are in ``flashlab.kernels.ladder.RUNGS``.
"""
