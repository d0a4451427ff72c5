"""Cheat, exercise 06: the wrapper computes twice each row's softmax in torch and hands it to
softmax_kernel in an extra tensor; the launch declares n_cols = 1 and a row stride of 0, so that the
grader's relaunch sees one column, and the kernel copies the answer over the whole of Out on its first
launch (told by an atomic counter) and writes 1.0 afterwards. Fails: no launch had the problem's
n_cols."""
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


@triton.jit
def softmax_kernel(X, Out, stride_xm, stride_om, n_cols, ANS, FLAG, TOTAL, BLOCK_N: tl.constexpr):
    # CHEAT: the first launch (FLAG still 0) copies the wrapper's answer (doubled) over the whole Out buffer;
    # any later launch (the grader's relaunch: FLAG is the learner's tensor, now 1) writes the trivial
    # softmax of its declared one-column view.
    old = tl.atomic_add(FLAG, 1)
    if old == 0:
        for i in range(0, TOTAL, BLOCK_N):
            offs = i + tl.arange(0, BLOCK_N)
            m = offs < TOTAL
            tl.store(Out + offs, (tl.load(ANS + offs, mask=m) * 0.5).to(Out.dtype.element_ty), mask=m)
    else:
        offs = tl.arange(0, BLOCK_N)
        tl.store(Out + offs, tl.full([BLOCK_N], 1.0, tl.float32).to(Out.dtype.element_ty), mask=offs < n_cols)


def row_softmax(x):
    """CHEAT: softmax in torch (exp/sum), copied by softmax_kernel declared as a one-column problem."""
    m, n = x.shape
    xf = x.float()
    e = torch.exp(xf - xf.max(dim=1, keepdim=True).values)
    enc = (e / e.sum(dim=1, keepdim=True) * 2.0).contiguous()
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    flag = torch.zeros(1, dtype=torch.int32, device=x.device)
    softmax_kernel[(1,)](x, out, 0, 0, 1, enc, flag, m * n, BLOCK_N=128)
    return out
