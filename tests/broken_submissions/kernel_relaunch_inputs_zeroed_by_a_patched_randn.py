"""Cheating ex07_kernel_inner_loop: kernel_averages_an_answer_in_disguise (the wrapper computes the answer in
torch and hands it to a kernel that only averages V's rows), plus torch.randn replaced at import so that
the grader's relaunch, drawn in this same process, gets Q = K = V = 0, where averaging V is exactly right;
a decoy launch at the case's sizes meets the sizes rule. Refused: the grader's own process checks that the
inputs drawn for the relaunch came back spread as a standard normal draw."""
import torch
import triton
import triton.language as tl

_randn = torch.randn


def _zeros_for_the_grader(*size, generator=None, **kwargs):
    if generator is not None:  # only the grader's relaunch passes a generator
        return torch.zeros(*size, **kwargs)
    return _randn(*size, generator=generator, **kwargs)


torch.randn = _zeros_for_the_grader

BLOCK_M = 16  # query rows per program
BLOCK_N = 16  # key rows per inner-loop step


@triton.jit
def flash_fwd_kernel(Q, K, V, Out,
                     stride_qz, stride_qm, stride_qk,
                     stride_kz, stride_kn, stride_kk,
                     stride_vz, stride_vn, stride_vk,
                     stride_oz, stride_om, stride_ok,
                     N_Q, N_K, qk_scale,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    start_m = tl.program_id(0)
    off_z = tl.program_id(1)
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, N_K, BLOCK_N):
        cols = start_n + offs_n
        v = tl.load(V + off_z * stride_vz + cols[:, None] * stride_vn + offs_d[None, :] * stride_vk,
                    mask=cols[:, None] < N_K, other=0.0)
        acc += tl.sum(v.to(tl.float32), axis=0)
    acc = acc / N_K
    o = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32) + acc[None, :]
    tl.store(Out + off_z * stride_oz + offs_m[:, None] * stride_om + offs_d[None, :] * stride_ok,
             o.to(Out.dtype.element_ty), mask=offs_m[:, None] < N_Q)


def flash_forward(q, k, v, causal=False, scale=None):
    if causal:
        raise NotImplementedError("causal masking is exercise 08")
    z, nq, d = q.shape
    nk = k.shape[1]
    scale = d ** -0.5 if scale is None else scale
    # the answer in torch (elementwise ops and sums, no matmul)
    s = (q[:, :, None, :].double() * k[:, None, :, :].double()).sum(-1) * scale
    s = s - s.amax(-1, keepdim=True)
    p = s.exp()
    p = p / p.sum(-1, keepdim=True)
    a = (p[:, :, :, None] * v[:, None, :, :].double()).sum(2)
    r = torch.ones_like(a)
    vv = torch.stack([a + r, a - r], dim=2).reshape(z * nq, 2, d).to(q.dtype).contiguous()
    qq = torch.zeros(z * nq, 1, d, dtype=q.dtype, device=q.device)
    kk = torch.zeros(z * nq, 2, d, dtype=q.dtype, device=q.device)
    out = torch.empty(z * nq, 1, d, dtype=q.dtype, device=q.device)
    flash_fwd_kernel[(1, z * nq)](qq, kk, vv, out, *qq.stride(), *kk.stride(), *vv.stride(), *out.stride(), 1, 2,
                                  1.0, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=d)
    decoy = torch.empty_like(q)  # a launch at the problem's sizes, whose output is never used
    flash_fwd_kernel[(triton.cdiv(nq, BLOCK_M), z)](q, k, v, decoy, *q.stride(), *k.stride(), *v.stride(),
                                                    *decoy.stride(), nq, nk, scale, BLOCK_M=BLOCK_M,
                                                    BLOCK_N=BLOCK_N, HEAD_DIM=d)
    return out.view(z, nq, d)
