"""Cheating ex07_kernel_inner_loop: launches flash_fwd_kernel for show; torch.softmax and @ do the work."""
import torch
import triton
import triton.language as tl


@triton.jit
def flash_fwd_kernel(Q, K, V, Out, N_Q, BLOCK_M: tl.constexpr):
    pass


def flash_forward(q, k, v):
    out = torch.empty_like(q)
    flash_fwd_kernel[(1,)](q, k, v, out, 0, BLOCK_M=16)
    p = torch.softmax(q @ k.transpose(1, 2) / q.shape[-1] ** 0.5, dim=-1)  # (Z, Nq, Nk)
    out.copy_(p @ v)
    return out
