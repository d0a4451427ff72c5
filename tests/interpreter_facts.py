"""Print what Triton's CPU interpreter gets wrong, for the installed triton (README "Notes for developers").

    TRITON_INTERPRET=1 python tests/interpreter_facts.py

Three facts the kernels work around or the README states, each measured afresh: ``tl.dot`` on
bf16 operands (compared with float64 on exactly representable inputs), fp32 -> bf16 conversion
(1 + 3 * 2^-9 lies 3/4 of the way from 1.0 to the next bf16, so rounding to nearest gives
1.0078125), and whether an fp32 ``tl.dot`` with ``input_precision="tf32"`` keeps the bits below
tf32's 10-bit mantissa (a GPU drops them). Not a test: it reports, so a new triton can be checked.
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def dot_kernel(A, B, C, M: tl.constexpr, PREC: tl.constexpr):
    offs = tl.arange(0, M)
    a = tl.load(A + offs[:, None] * M + offs[None, :])  # (M, M)
    b = tl.load(B + offs[:, None] * M + offs[None, :])  # (M, M)
    tl.store(C + offs[:, None] * M + offs[None, :], tl.dot(a, b, input_precision=PREC))


@triton.jit
def to_bf16_kernel(X, Y):
    tl.store(Y, tl.load(X).to(tl.bfloat16))


def main() -> None:
    import numpy as np

    print(f"triton {triton.__version__}, numpy {np.__version__}, torch {torch.__version__}")
    M = 16
    g = torch.Generator().manual_seed(0)
    a = torch.randn(M, M, generator=g).to(torch.bfloat16)  # (M, M)
    b = torch.randn(M, M, generator=g).to(torch.bfloat16)  # (M, M)
    c = torch.empty(M, M)  # (M, M) fp32
    dot_kernel[(1,)](a, b, c, M=M, PREC="ieee")
    err = (c.double() - a.double() @ b.double()).abs().max().item()
    print(f"bf16 tl.dot: max |error| against float64 {err:.3g} ({'WRONG' if err > 1e-3 else 'correct'}; "
          "fp32 accumulation of exact bf16 products is off by about 1e-6)")
    x = torch.tensor([1 + 3 * 2**-9])
    y = torch.empty(1, dtype=torch.bfloat16)
    to_bf16_kernel[(1,)](x, y)
    print(f"fp32 1 + 3 * 2^-9 -> bf16: triton {y.item()!r}, torch {x.to(torch.bfloat16).item()!r} "
          f"({'truncates' if y.item() == 1.0 else 'rounds to nearest'})")
    a32 = (1 + torch.arange(M * M, dtype=torch.float64).reshape(M, M) * 2**-20).float()  # (M, M) low bits set
    dot_kernel[(1,)](a32, torch.eye(M), c, M=M, PREC="tf32")
    print(f"fp32 tl.dot with input_precision='tf32' keeps the bits tf32 drops: {torch.equal(c, a32)}")


if __name__ == "__main__":
    main()
