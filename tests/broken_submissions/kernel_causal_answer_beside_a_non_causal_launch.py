"""Cheat, exercise 08: the causal answer is computed in torch and copied by a kernel of another name;
flash_fwd_kernel is exercise 07's non-causal kernel, launched at the problem's sizes with CAUSAL=False
into scratch, which the relaunch judges as non-causal attention. Fails: no launch had the case's causal
flag."""
import torch
import triton
import triton.language as tl

BLOCK_M = 16  # query rows per program
BLOCK_N = 16  # key rows per inner-loop step


@triton.jit
def flash_fwd_kernel(Q, K, V, Out,
                     stride_qz, stride_qm, stride_qk,
                     stride_kz, stride_kn, stride_kk,
                     stride_vz, stride_vn, stride_vk,
                     stride_oz, stride_om, stride_ok,
                     N_Q, N_K, qk_scale,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                     CAUSAL: tl.constexpr):
    start_m = tl.program_id(0)  # query block i
    off_z = tl.program_id(1)  # batch element
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)  # (BLOCK_M,) query rows
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + off_z * stride_qz + offs_m[:, None] * stride_qm + offs_d[None, :] * stride_qk
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N_Q, other=0.0)  # (BLOCK_M, HEAD_DIM)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, N_K, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)  # (BLOCK_N,) key rows
        kt_ptrs = K + off_z * stride_kz + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kk
        kt = tl.load(kt_ptrs, mask=offs_n[None, :] < N_K, other=0.0)  # (HEAD_DIM, BLOCK_N): K_j^T
        v_ptrs = V + off_z * stride_vz + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vk
        v = tl.load(v_ptrs, mask=offs_n[:, None] < N_K, other=0.0)  # (BLOCK_N, HEAD_DIM)
        qk = tl.dot(q, kt) * qk_scale  # (BLOCK_M, BLOCK_N)
        qk = tl.where(offs_n[None, :] < N_K, qk, float("-inf"))  # padded keys never count
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.exp(qk - m_new[:, None])  # (BLOCK_M, BLOCK_N)
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    o = acc / l_i[:, None]
    o_ptrs = Out + off_z * stride_oz + offs_m[:, None] * stride_om + offs_d[None, :] * stride_ok
    tl.store(o_ptrs, o.to(Out.dtype.element_ty), mask=offs_m[:, None] < N_Q)



@triton.jit
def halve_kernel(E, Out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(Out + offs, (tl.load(E + offs, mask=m) * 0.5).to(Out.dtype.element_ty), mask=m)


def flash_forward(q, k, v, causal=False, scale=None):
    z, nq, d = q.shape
    nk = k.shape[1]
    scale = d ** -0.5 if scale is None else scale
    seen = min(nk, nq) if causal else nk  # causal: keys past the last query row are never read
    qf, kf, vf = q.double(), k[:, :seen].double(), v[:, :seen].double()
    s = (qf[:, :, None, :] * kf[:, None, :, :]).sum(-1) * scale
    if causal:
        s = s.masked_fill(torch.arange(seen, device=q.device)[None, :] > torch.arange(nq, device=q.device)[:, None],
                          float('-inf'))
    p = torch.exp(s - s.max(-1, keepdim=True).values)
    ans = (p[..., None] * vf[:, None, :, :]).sum(2) / p.sum(-1)[..., None]
    enc = (ans * 2.0).contiguous()
    out = torch.empty_like(q)
    scratch = torch.empty_like(q)
    if out.numel():
        halve_kernel[(triton.cdiv(out.numel(), 128),)](enc, out, out.numel(), BLOCK=128)
    grid = (triton.cdiv(nq, BLOCK_M), z)
    flash_fwd_kernel[grid](q, k, v, scratch, *q.stride(), *k.stride(), *v.stride(), *scratch.stride(), nq, nk, scale,
                           BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HEAD_DIM=d, CAUSAL=False)
    return out
