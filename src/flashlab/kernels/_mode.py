"""Is Triton compiled for a GPU or run by its CPU interpreter? One place decides.

Triton picks its mode when ``@triton.jit`` decorates a kernel: with ``TRITON_INTERPRET=1`` in the
environment each kernel becomes an ``InterpretedFunction`` that runs program after program in
NumPy on the CPU; without it, kernels are compiled for the GPU. Every kernel module in
``flashlab.kernels`` calls :func:`triton` before it imports triton, which does this:

* no CUDA GPU and triton not yet imported: set ``TRITON_INTERPRET=1`` (so a laptop with no GPU
  runs every kernel on CPU tensors, slowly but correctly);
* a CUDA GPU present: leave the environment alone (kernels compile; a learner who wants the
  interpreter anyway sets ``TRITON_INTERPRET=1`` before starting Python);
* no CUDA GPU but triton already imported without the variable: nothing can be switched any more,
  and :func:`check_device` raises a clear error when a kernel is given CPU tensors.

Interpreter caveats (measured with triton 3.6.0 on the CPU machines this course is tested on): ``tl.dot`` on bf16 operands
returns wrong numbers, so the kernels upcast dot operands to fp32 when :func:`dot_upcast` says
so; fp32 dots are exact (a GPU uses tf32 unless told otherwise); programs run one after another,
so races never show; interpreter time says nothing about GPU speed.
"""
from __future__ import annotations

import os
import sys


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def triton():
    """Import and return the ``triton`` module, switching on the interpreter where there is no GPU."""
    if "triton" not in sys.modules and not _cuda_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import triton as _triton

    return _triton


def is_interpreter() -> bool:
    """True when Triton kernels run in the CPU interpreter (``TRITON_INTERPRET=1``)."""
    triton()
    from triton import knobs

    return bool(knobs.runtime.interpret)


def dot_upcast(dtype) -> bool:
    """True when dot operands of this torch dtype must be upcast to fp32 (bf16 in the interpreter)."""
    import torch

    return dtype == torch.bfloat16 and is_interpreter()


def check_device(name: str, tensor) -> None:
    """Reject a tensor the current Triton mode cannot run on, naming the argument."""
    interpreting = is_interpreter()
    if tensor.device.type == "cuda" or interpreting:
        return
    raise ValueError(
        f"{name} is on device {tensor.device}, but Triton is in compiled mode and needs CUDA tensors. "
        "Move the tensors to the GPU, or set TRITON_INTERPRET=1 before triton is first imported "
        "to run the kernels in the CPU interpreter."
    )
