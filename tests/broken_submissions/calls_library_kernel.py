"""Broken ex08_kernel_causal: keeps the stub's kernel but hands the work to the course's forward rung v1."""
import triton
import triton.language as tl


@triton.jit
def flash_fwd_kernel(Q, K, V, Out, N_Q, N_K, BLOCK_M: tl.constexpr):
    pass  # never launched


def flash_forward(q, k, v, causal=False):
    from flashlab.kernels import flash_fwd

    o, _lse = flash_fwd.forward_v1(q[:, None], k[:, None], v[:, None], causal, 1.0 / q.shape[-1] ** 0.5)
    return o[:, 0]  # (Z, 1, Nq, d) -> (Z, Nq, d)
