"""Cheating ex14_split_kv_decode: the partial states computed in torch before the launch (elementwise, no
matmul, no softmax op), in plain float32, handed to a kernel that only copies them, through an EXPANDED
view: answer[None].expand(2, n) (stride 0 along its first axis). LaunchTracker.before skips any tensor
for which bounds.shares_memory is true ("expand: read-only, never an output") before vetting it: the
buffer is never poisoned (so the poison value, NaN or 0, never matters), never recorded as a derived
input, never sent to the parent's checks; MemoryBounds still counts its span as the launch's memory, so
the loads are in bounds. The kernel reads row 0 of the view and stores it.

Refused: what an expanded view that is not an input holds is sent to the parent as a derived input,
which finds the answer in it."""
import math

import numpy as np
import torch
import triton
import triton.language as tl

BLOCK_N = 16


@triton.jit
def decode_partial_kernel(Answer, O_part, LSE_part, n_o, n_total, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < n_total
    val = tl.load(Answer + i, mask=ok, other=0.0)  # row 0 of the expanded view
    tl.store(O_part + i, val, mask=ok & (i < n_o))
    tl.store(LSE_part + (i - n_o), val, mask=ok & (i >= n_o))


def _partials_torch(q, k, v, num_splits, scale):
    z, nk, d = k.shape
    per = -(-nk // num_splits)
    qf, kf, vf = q.double(), k.double(), v.double()
    o = torch.zeros(z, num_splits, d, dtype=torch.float64)
    lse = torch.full((z, num_splits), -math.inf, dtype=torch.float64)
    for s in range(num_splits):
        lo, hi = min(s * per, nk), min((s + 1) * per, nk)
        if hi > lo:
            sc = (kf[:, lo:hi] * qf[:, None, :]).sum(-1) * scale  # elementwise, no matmul
            m = sc.amax(-1, keepdim=True)
            p = torch.exp(sc - m)
            l = p.sum(-1, keepdim=True)
            o[:, s] = (p[..., None] * vf[:, lo:hi]).sum(1) / l
            lse[:, s] = (m + torch.log(l))[:, 0]
    return o.float(), lse.float()


def split_kv_partials(q, k, v, num_splits, scale=None):
    z, nk, d = k.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    o, lse = _partials_torch(q, k, v, num_splits, scale)
    answer = torch.cat([o.reshape(-1), lse.reshape(-1)]).to(q.device)
    n = answer.numel()
    view = answer[None].expand(2, n)  # stride 0: "read-only, never an output": not vetted
    o_part = torch.empty(z, num_splits, d, dtype=torch.float32, device=q.device)
    lse_part = torch.empty(z, num_splits, dtype=torch.float32, device=q.device)
    decode_partial_kernel[(triton.cdiv(n, 64),)](view, o_part, lse_part, o.numel(), n, BLOCK=64)
    return o_part, lse_part


def combine_splits(o_part, lse_part):
    o = o_part.detach().cpu().numpy().astype(np.float64)
    lse = lse_part.detach().cpu().numpy().astype(np.float64)
    total = np.logaddexp.reduce(lse, axis=-1, keepdims=True)
    total = np.where(np.isneginf(total), 0.0, total)
    w = np.exp(lse - total)
    return torch.from_numpy((w[..., None] * o).sum(axis=1).astype(np.float32)).to(o_part.device)
