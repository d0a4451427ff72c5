"""Cheating ex13_triton_backward: P and dS computed in torch before any launch (elementwise products and
sums, no matmul), cut into chunks of one key block (part 1) or one query block (part 2), each under twice
the largest input, and handed to kernels that only multiply them, one launch per chunk. Refused: the
derived inputs of a call are counted together; more than twice the inputs in all are products of them."""
import torch
import triton
import triton.language as tl

BLOCK = 16


@triton.jit
def flash_bwd_dkdv_kernel(A, B, Out, R, C, stride_az, stride_ar, stride_ac, stride_bz, stride_bc, stride_oz, stride_or,
               scale, BR: tl.constexpr, BC: tl.constexpr, D: tl.constexpr):
    z = tl.program_id(0)
    offs_r = tl.arange(0, BR)
    offs_d = tl.arange(0, D)
    acc = tl.zeros([BR, D], dtype=tl.float32)
    for c0 in range(0, C, BC):
        offs_c = c0 + tl.arange(0, BC)
        a = tl.load(A + z * stride_az + offs_r[:, None] * stride_ar + offs_c[None, :] * stride_ac,
                    mask=(offs_r[:, None] < R) & (offs_c[None, :] < C), other=0.0)
        b = tl.load(B + z * stride_bz + offs_c[:, None] * stride_bc + offs_d[None, :],
                    mask=offs_c[:, None] < C, other=0.0)
        acc += tl.dot(a, b)
    tl.store(Out + z * stride_oz + offs_r[:, None] * stride_or + offs_d[None, :], acc * scale,
             mask=offs_r[:, None] < R)


@triton.jit
def flash_bwd_dq_kernel(A, B, Out, R, C, stride_az, stride_ar, stride_ac, stride_bz, stride_bc, stride_oz, stride_or,
               scale, BR: tl.constexpr, BC: tl.constexpr, D: tl.constexpr):
    z = tl.program_id(0)
    offs_r = tl.arange(0, BR)
    offs_d = tl.arange(0, D)
    acc = tl.zeros([BR, D], dtype=tl.float32)
    for c0 in range(0, C, BC):
        offs_c = c0 + tl.arange(0, BC)
        a = tl.load(A + z * stride_az + offs_r[:, None] * stride_ar + offs_c[None, :] * stride_ac,
                    mask=(offs_r[:, None] < R) & (offs_c[None, :] < C), other=0.0)
        b = tl.load(B + z * stride_bz + offs_c[:, None] * stride_bc + offs_d[None, :],
                    mask=offs_c[:, None] < C, other=0.0)
        acc += tl.dot(a, b)
    tl.store(Out + z * stride_oz + offs_r[:, None] * stride_or + offs_d[None, :], acc * scale,
             mask=offs_r[:, None] < R)


def _p_ds(q, k, v, o, lse, do, causal, scale):
    s = (q[:, :, None, :] * k[:, None, :, :]).sum(-1) * scale
    p = torch.exp(s - lse[:, :, None])
    if causal:
        nq, nk = q.shape[1], k.shape[1]
        p = p.masked_fill(torch.arange(nk, device=q.device)[None, :] > torch.arange(nq, device=q.device)[:, None], 0.0)
    dp = (do[:, :, None, :] * v[:, None, :, :]).sum(-1)
    delta = (do * o).sum(-1)
    return p, p * (dp - delta[:, :, None])


def _launch(a, b, out, scale, kernel):
    z, r, c = a.shape
    kernel[(z,)](a, b, out, r, c, a.stride(0), a.stride(1), a.stride(2), b.stride(0), b.stride(1),
                 out.stride(0), out.stride(1), scale, BR=BLOCK, BC=BLOCK, D=b.shape[-1])


def flash_backward_dkdv(q, k, v, o, lse, do, causal=False, scale=None):
    z, nq, d = q.shape
    nk = k.shape[1]
    scale = d ** -0.5 if scale is None else scale
    q, k, v, do, o = (t.contiguous() for t in (q, k, v, do, o))
    p, ds = _p_ds(q, k, v, o, lse.float(), do, causal, scale)
    chunks = [(n0, p[:, :, n0:n0 + BLOCK].contiguous(), ds[:, :, n0:n0 + BLOCK].contiguous())
              for n0 in range(0, nk, BLOCK)]
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    for n0, p_j, ds_j in chunks:
        _launch(p_j.transpose(1, 2), do, dv[:, n0:n0 + BLOCK], 1.0, flash_bwd_dkdv_kernel)
        _launch(ds_j.transpose(1, 2), q, dk[:, n0:n0 + BLOCK], scale, flash_bwd_dkdv_kernel)
    return dk, dv


def flash_backward_dq(q, k, v, o, lse, do, causal=False, scale=None):
    z, nq, d = q.shape
    scale = d ** -0.5 if scale is None else scale
    q, k, v, do, o = (t.contiguous() for t in (q, k, v, do, o))
    _, ds = _p_ds(q, k, v, o, lse.float(), do, causal, scale)
    chunks = [(m0, ds[:, m0:m0 + BLOCK].contiguous()) for m0 in range(0, nq, BLOCK)]
    dq = torch.empty_like(q)
    for m0, ds_i in chunks:
        _launch(ds_i, k, dq[:, m0:m0 + BLOCK], scale, flash_bwd_dq_kernel)
    return dq
