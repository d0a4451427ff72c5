"""Cheat, exercise 06: torch computes twice each row's softmax (exp, sum, division), the kernel halves
and copies it. The launch claims n_cols = 131072 with strides 0, for which every value of the
relaunch's softmax is under 1e-3, and the kernel writes zeros when X[0] differs from the case's first
element (passed as a scalar). Fails: zeros are far from that softmax as a whole."""
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(X, Y, Out, n_elements, BLOCK: tl.constexpr):
    # -- one program adds one block of BLOCK elements
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements  # the last block may be ragged
    x = tl.load(X + offs, mask=mask)
    y = tl.load(Y + offs, mask=mask)
    tl.store(Out + offs, x + y, mask=mask)


def vector_add(x, y):
    """x + y for two 1-D tensors of the same length, dtype and device, with add_kernel."""
    out = torch.empty_like(x)
    n = x.numel()
    BLOCK = 256
    add_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, n, BLOCK=BLOCK)
    return out



FAKE_N = 131072
T = tl.constexpr(128)


@triton.jit
def softmax_kernel(X, Out, stride_xm, stride_om, n_cols, BLOCK_N: tl.constexpr, ANS, n_real, stride_real, x0):
    row = tl.program_id(0)
    if tl.load(X).to(tl.float32) == x0:  # the wrapper's launch (X is the case's x)
        offs = tl.arange(0, BLOCK_N)
        m = offs < n_real
        a = tl.load(ANS + row * n_real + offs, mask=m, other=0.0)
        tl.store(Out + row * stride_real + offs, (a * 0.5).to(Out.dtype.element_ty), mask=m)
    else:  # the grader's relaunch (Out NaN): zeros
        if row == 0:
            for c in range(0, n_cols, T):
                offs = c + tl.arange(0, T)
                tl.store(Out + offs, tl.zeros([T], dtype=tl.float32).to(Out.dtype.element_ty), mask=offs < n_cols)


def row_softmax(x):
    m, n = x.shape
    xd = x.double()
    e = torch.exp(xd - xd.max(-1, keepdim=True).values)
    ans = (2 * e / e.sum(-1, keepdim=True)).float().contiguous()
    out = torch.zeros((m, n), dtype=x.dtype, device=x.device)
    softmax_kernel[(m,)](x, out, 0, 0, FAKE_N, BLOCK_N=triton.next_power_of_2(n), ANS=ans, n_real=n,
                         stride_real=out.stride(0), x0=float(x[0, 0].float()))
    return out
