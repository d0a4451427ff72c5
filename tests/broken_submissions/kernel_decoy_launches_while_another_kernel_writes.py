"""Cheat, exercise 13: the wrappers compute dQ, dK and dV in torch (broadcast products and sums, no
matmul) and hand them doubled to a halving kernel of another name, which writes the returned tensors.
The required kernels run only on tiny float64 decoys (HEAD_DIM = 1, one key or one query row) where what
they must write is trivial. Fails: no launch of the required kernel had the problem's sizes."""
import torch
import triton
import triton.language as tl

BLOCK_M = 16
BLOCK_N = 16


@triton.jit
def flash_bwd_dkdv_kernel(Q, K, V, dO, LSE, Delta, dK, dV,
                          stride_qz, stride_qm, stride_kz, stride_kn, stride_lz,
                          N_Q, N_K, sm_scale,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                          CAUSAL: tl.constexpr):
    # no attention: the column sums of dO into dV, zeros into dK
    acc = tl.zeros([HEAD_DIM], dtype=tl.float64)
    offs_d = tl.arange(0, HEAD_DIM)
    for m in range(0, N_Q):
        acc += tl.load(dO + m * stride_qm + offs_d).to(tl.float64)
    tl.store(dV + offs_d, acc.to(dV.dtype.element_ty))
    tl.store(dK + offs_d, (acc * 0.0).to(dK.dtype.element_ty))


@triton.jit
def flash_bwd_dq_kernel(Q, K, V, dO, LSE, Delta, dQ,
                        stride_qz, stride_qm, stride_kz, stride_kn, stride_lz,
                        N_Q, N_K, sm_scale,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                        CAUSAL: tl.constexpr):
    pid = tl.program_id(0)  # writes nothing


@triton.jit
def halve_kernel(E, Out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(Out + offs, (tl.load(E + offs, mask=m) * 0.5).to(Out.dtype.element_ty), mask=m)


def _grads(q, k, v, o, lse, do, causal, scale):
    q, k, v, o, lse, do = (t.double() for t in (q, k, v, o, lse, do))
    s = (q[:, :, None, :] * k[:, None, :, :]).sum(-1) * scale
    if causal:
        s = s.masked_fill(torch.arange(k.shape[1], device=s.device)[None, :] > torch.arange(q.shape[1], device=s.device)[:, None], float('-inf'))
    p = torch.exp(s - lse[..., None])
    dv = (p[..., None] * do[:, :, None, :]).sum(1)
    dp = (do[:, :, None, :] * v[:, None, :, :]).sum(-1)
    ds = p * (dp - (do * o).sum(-1)[..., None])
    dk = scale * (ds[..., None] * q[:, :, None, :]).sum(1)
    dq = scale * (ds[..., None] * k[:, None, :, :]).sum(2)
    return dq, dk, dv


def _emit(ans, like):
    enc = (ans * 2.0).contiguous()
    out = torch.empty(like.shape, dtype=like.dtype, device=like.device)
    if out.numel():
        halve_kernel[(triton.cdiv(out.numel(), 128),)](enc, out, out.numel(), BLOCK=128)
    return out


def _decoy(dev):
    return [torch.randn(1, 1, 1, dtype=torch.float64, device=dev) for _ in range(4)] + \
           [torch.randn(1, 1, dtype=torch.float64, device=dev) for _ in range(2)]


def flash_backward_dkdv(q, k, v, o, lse, do, causal=False, scale=None):
    d = q.shape[-1]
    scale = d ** -0.5 if scale is None else scale
    _, dk, dv = _grads(q, k, v, o, lse, do, causal, scale)
    dk, dv = _emit(dk, k), _emit(dv, v)
    Q, K, V, dO, L, D = _decoy(q.device)
    gk, gv = torch.empty_like(K), torch.empty_like(V)
    flash_bwd_dkdv_kernel[(1, 1)](Q, K, V, dO, L, D, gk, gv, 1, 1, 1, 1, 1, 1, 1, 0.5,
                                  BLOCK_M=16, BLOCK_N=16, HEAD_DIM=1, CAUSAL=False)
    return dk, dv


def flash_backward_dq(q, k, v, o, lse, do, causal=False, scale=None):
    d = q.shape[-1]
    scale = d ** -0.5 if scale is None else scale
    dq, _, _ = _grads(q, k, v, o, lse, do, causal, scale)
    dq = _emit(dq, q)
    Q, K, V, dO, L, D = _decoy(q.device)
    gq = torch.zeros_like(Q)
    flash_bwd_dq_kernel[(1, 1)](Q, K, V, dO, L, D, gq, 1, 1, 1, 1, 1, 1, 1, 0.5,
                                BLOCK_M=16, BLOCK_N=16, HEAD_DIM=1, CAUSAL=True)
    return dq
