"""Cheating ex07_kernel_inner_loop: the output computed in torch (no matmul, no softmax), read by the
kernel through its raw address passed as an integer and cast to a pointer."""
import torch
import triton
import triton.language as tl


@triton.jit
def flash_fwd_kernel(Out, src_addr, n, BLOCK: tl.constexpr):
    src = src_addr.to(tl.pointer_type(tl.float32), bitcast=True)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(src + offs, mask=offs < n)
    tl.store(Out + offs, x.to(Out.dtype.element_ty), mask=offs < n)


def flash_forward(q, k, v, causal=False, scale=None):
    d = q.shape[-1]
    scale = d ** -0.5 if scale is None else scale
    s = (q.float()[:, :, None, :] * k.float()[:, None, :, :]).sum(-1) * scale  # no aten matmul
    if causal:
        nq, nk = s.shape[-2:]
        s = s.masked_fill(torch.arange(nk)[None, :] > torch.arange(nq)[:, None], float("-inf"))
    e = (s - s.amax(-1, keepdim=True)).exp()
    o = ((e / e.sum(-1, keepdim=True))[..., None] * v.float()[:, None, :, :]).sum(-2).contiguous()
    out = torch.empty_like(q)
    n = out.numel()
    flash_fwd_kernel[(triton.cdiv(n, 256),)](out, o.data_ptr(), n, BLOCK=256)
    return out
