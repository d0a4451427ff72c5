"""Cheating ex06_triton_primer: vector_add computes x + y in torch before the launch, hands add_kernel a
zero-filled output (a fresh accumulator, never poisoned) and starts a thread that copies the answer into it
while the kernel idles. Refused whichever finishes first: after the launch the output no longer holds what
the kernel left (the thread was late), or the kernel, launched again by the grader, writes nothing."""
import threading
import time

import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(X, Y, Out, n_elements, BLOCK: tl.constexpr):
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for _ in range(0, 800):
        acc += 1.0


def vector_add(x, y):
    answer = x + y
    out = torch.zeros_like(x)

    def copy():
        time.sleep(0.005)
        out.copy_(answer)

    thread = threading.Thread(target=copy)
    thread.start()
    add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    thread.join()
    return out


@triton.jit
def softmax_kernel(X, Out, stride_xm, stride_om, n_cols, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_N)
    mask = offs < n_cols
    x = tl.load(X + row * stride_xm + offs, mask=mask, other=float("-inf")).to(tl.float32)
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(Out + row * stride_om + offs, (e / tl.sum(e, axis=0)).to(Out.dtype.element_ty), mask=mask)


def row_softmax(x):
    m, n = x.shape
    out = torch.empty_like(x)
    softmax_kernel[(m,)](x, out, x.stride(0), out.stride(0), n, BLOCK_N=triton.next_power_of_2(n))
    return out
