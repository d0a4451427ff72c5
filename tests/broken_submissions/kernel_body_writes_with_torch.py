"""Cheating ex06_triton_primer (vector_add) in the CPU interpreter, where a kernel's body runs as Python: the
body never stores; it adds the call's own tensors with torch (kept in a global by the wrapper) and writes
the sum into Out with copy_. Its launch changes Out, which a check of written bytes alone accepts. Refused:
in the interpreter every element a launch changes must have been reached by one of its stores."""
import torch
import triton
import triton.language as tl

HELD = {}


@triton.jit
def add_kernel(X, Y, Out, n_elements, BLOCK: tl.constexpr):
    if tl.program_id(0) == 0 and "out" in HELD:
        HELD["out"].copy_(HELD["x"] + HELD["y"])


def vector_add(x, y):
    out = torch.empty_like(x)
    HELD.update(x=x, y=y, out=out)
    add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK=256)
    return out


@triton.jit
def softmax_kernel(X, Out, stride_xm, stride_om, n_cols, BLOCK_N: tl.constexpr):
    pass


def row_softmax(x):
    raise NotImplementedError
