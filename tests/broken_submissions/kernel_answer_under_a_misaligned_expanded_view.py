"""Cheating ex07_kernel_inner_loop: the answer computed in torch before any launch (elementwise products
and sums), written into out_buf[1:], and one launch that computes nothing (N_Q = N_K = 0) handed an
expanded int16 view of out_buf starting 2 bytes in. An expanded view is never poisoned, and its bytes,
read from the wrong offset, hold no answer value; the launch's record of that argument used to count
as the kernel having written the returned bytes."""
import math

import torch
import triton
import triton.language as tl

BLOCK_M = 16
BLOCK_N = 16


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
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + off_z * stride_qz + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk,
                mask=offs_m[:, None] < N_Q, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, N_K, BLOCK_N):  # N_K = 0: never entered
        offs_n = start_n + tl.arange(0, BLOCK_N)
        kt = tl.load(K + off_z * stride_kz + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kk,
                     mask=offs_n[None, :] < N_K, other=0.0)
        v = tl.load(V + off_z * stride_vz + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vk,
                    mask=offs_n[:, None] < N_K, other=0.0)
        qk = tl.dot(q, kt) * qk_scale
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    o = acc / l_i[:, None]
    tl.store(Out + off_z * stride_oz + offs_m[:, None] * stride_om + offs_d[None, :] * stride_ok,
             o.to(Out.dtype.element_ty), mask=offs_m[:, None] < N_Q)


def torch_attention(q, k, v, causal, scale):
    """softmax(scale q k^T) v in float64 by broadcasting (no matmul, no softmax operator)."""
    qd, kd, vd = (torch.nan_to_num(t.double()) for t in (q, k, v))
    s = (qd[:, :, None, :] * kd[:, None, :, :]).sum(-1) * scale  # (Z, Nq, Nk)
    if causal:
        nq, nk = s.shape[-2:]
        s = s.masked_fill(torch.arange(nk)[None, :] > torch.arange(nq)[:, None], -math.inf)
    p = torch.exp(s - s.amax(-1, keepdim=True))
    return (p[..., None] * vd[:, None, :, :]).sum(-2) / p.sum(-1)[..., None]


def launder(answer, q, k, v, d):
    """One launch of flash_fwd_kernel that computes nothing, with a misaligned expanded view over the
    buffer holding the answer; returns the answer as a view of that buffer."""
    n = answer.numel()
    out_buf = torch.empty(n + 1, dtype=answer.dtype, device=answer.device)
    out_buf[1:].copy_(answer.reshape(-1))
    half = torch.int16 if answer.element_size() == 4 else torch.uint8
    overlay = out_buf.view(half)[1:]
    overlay = overlay[None].expand(2, overlay.numel())
    flash_fwd_kernel[(1, 1)](q, k, k, overlay, *q.stride(), *k.stride(), 0, 0, 0, 0, 0, 0,
                             0, 0, 1.0, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=d)
    return out_buf[1:].view(answer.shape)


def flash_forward(q, k, v, causal=False, scale=None):
    if causal:
        raise NotImplementedError("causal masking is exercise 08")
    d = q.shape[-1]
    scale = d ** -0.5 if scale is None else scale
    answer = torch_attention(q, k, v, False, scale).to(q.dtype)
    return launder(answer, q, k, v, d)
