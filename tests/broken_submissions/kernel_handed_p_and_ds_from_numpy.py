"""Cheating ex13_triton_backward: P and dS (the whole Nq x Nk matrices: the work of the exercise)
computed in NumPy in the wrapper; the required kernels only multiply them by dO, Q (dK, dV) or K (dQ).
No value of the answer is handed in, so the check of derived inputs that hold the answer has nothing to
match. Refused: a derived input larger than twice the largest input is a product of the inputs."""
import numpy as np
import torch
import triton
import triton.language as tl

BLOCK = 16


def _p_ds(q, k, v, o, lse, do, causal, scale):
    qn, kn, vn, on, ln, dn = (t.detach().cpu().numpy().astype(np.float64) for t in (q, k, v, o, lse, do))
    s = scale * qn @ np.swapaxes(kn, -1, -2)
    if causal:
        s = np.where(np.arange(s.shape[-1])[None, :] > np.arange(s.shape[-2])[:, None], -np.inf, s)
    p = np.exp(s - ln[..., None])
    ds = p * (dn @ np.swapaxes(vn, -1, -2) - (dn * on).sum(-1)[..., None])
    to = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).to(q.device)  # noqa: E731
    return to(p), to(ds)


@triton.jit
def flash_bwd_dkdv_kernel(P, dS, Q, dO, dK, dV, N_Q, N_K, sm_scale, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    j = tl.program_id(0)
    z = tl.program_id(1)
    offs_n = j * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, HEAD_DIM)
    dk = tl.zeros([BLOCK, HEAD_DIM], tl.float32)
    dv = tl.zeros([BLOCK, HEAD_DIM], tl.float32)
    for m0 in range(0, N_Q, BLOCK):
        offs_m = m0 + tl.arange(0, BLOCK)
        pm = (offs_m[:, None] < N_Q) & (offs_n[None, :] < N_K)
        p = tl.load(P + z * N_Q * N_K + offs_m[:, None] * N_K + offs_n[None, :], mask=pm, other=0.0)
        ds = tl.load(dS + z * N_Q * N_K + offs_m[:, None] * N_K + offs_n[None, :], mask=pm, other=0.0)
        qd = (offs_m[:, None] < N_Q)
        q = tl.load(Q + z * N_Q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=qd, other=0.0)
        do = tl.load(dO + z * N_Q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :], mask=qd, other=0.0)
        dv += tl.dot(tl.trans(p), do)
        dk += tl.dot(tl.trans(ds), q)
    out = z * N_K * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(dK + out, dk * sm_scale, mask=offs_n[:, None] < N_K)
    tl.store(dV + out, dv, mask=offs_n[:, None] < N_K)


def flash_backward_dkdv(q, k, v, o, lse, do, causal=False, scale=None):
    z, nq, d = q.shape
    nk = k.shape[1]
    scale = d ** -0.5 if scale is None else scale
    p, ds = _p_ds(q, k, v, o, lse, do, causal, scale)
    q, do = q.contiguous(), do.contiguous()
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    flash_bwd_dkdv_kernel[(triton.cdiv(nk, BLOCK), z)](p, ds, q, do, dk, dv, nq, nk, scale, HEAD_DIM=d, BLOCK=BLOCK)
    return dk, dv


@triton.jit
def flash_bwd_dq_kernel(dS, K, dQ, N_Q, N_K, sm_scale, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    z = tl.program_id(1)
    offs_m = i * BLOCK + tl.arange(0, BLOCK)
    offs_d = tl.arange(0, HEAD_DIM)
    dq = tl.zeros([BLOCK, HEAD_DIM], tl.float32)
    for n0 in range(0, N_K, BLOCK):
        offs_n = n0 + tl.arange(0, BLOCK)
        ds = tl.load(dS + z * N_Q * N_K + offs_m[:, None] * N_K + offs_n[None, :],
                     mask=(offs_m[:, None] < N_Q) & (offs_n[None, :] < N_K), other=0.0)
        k = tl.load(K + z * N_K * HEAD_DIM + offs_n[:, None] * HEAD_DIM + offs_d[None, :],
                    mask=offs_n[:, None] < N_K, other=0.0)
        dq += tl.dot(ds, k)
    tl.store(dQ + z * N_Q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :], dq * sm_scale,
             mask=offs_m[:, None] < N_Q)


def flash_backward_dq(q, k, v, o, lse, do, causal=False, scale=None):
    z, nq, d = q.shape
    nk = k.shape[1]
    scale = d ** -0.5 if scale is None else scale
    _, ds = _p_ds(q, k, v, o, lse, do, causal, scale)
    k = k.contiguous()
    dq = torch.empty_like(q)
    flash_bwd_dq_kernel[(triton.cdiv(nq, BLOCK), z)](ds, k, dq, nq, nk, scale, HEAD_DIM=d, BLOCK=BLOCK)
    return dq
