"""Broken ex07_kernel_inner_loop: right numbers from torch matmuls, the Triton kernel never runs."""
import torch


def flash_forward(q, k, v):
    p = torch.softmax(q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, dim=-1)  # (Z, Nq, Nk)
    return p @ v
