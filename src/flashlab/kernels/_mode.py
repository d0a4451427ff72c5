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

Interpreter caveats (measured with triton 3.6.0 and 3.7.1 on the CPU machines this course is tested
on): ``tl.dot`` on bf16 operands returns wrong numbers, so the kernels upcast dot operands to fp32
when :func:`dot_upcast` says so; fp32 dots are exact (a GPU uses tf32 unless told otherwise);
fp32 -> bf16 conversion truncates; programs run one after another, so races never show;
interpreter time says nothing about GPU speed.

One version-specific repair: triton 3.6's interpreter turns a one-element block into a Python
int with ``int(array)`` (used by ``range(lo, hi, BLOCK_N)`` when ``hi`` is a tensor), which numpy
2.4 turned from a deprecation warning into ``TypeError: only 0-dimensional arrays can be
converted to Python scalars``. triton 3.7 converts the 0-d view instead. :func:`triton` gives
triton < 3.7 the same conversion (:func:`_repair_interpreter_index`); where triton's interpreter
is not laid out as expected it refuses with the versions and ``pip install "numpy<2.4"``.
"""
from __future__ import annotations

import inspect
import os
import re
import sys


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def triton():
    """Import and return the ``triton`` module, switching on the interpreter where there is no GPU."""
    if "triton" not in sys.modules and not _cuda_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import triton as _triton

    from triton import knobs

    if knobs.runtime.interpret:
        _repair_interpreter_index(_triton.__version__)
    return _triton


def release(version: str) -> tuple[int, ...]:
    """(major, minor) of a version string: '3.6.0' -> (3, 6), '2.13.0+cpu' -> (2, 13), '2.4.0rc1' -> (2, 4)."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:2])


def _index_of_one_element(self) -> int:
    """``operator.index`` of an interpreter tensor: its single element, as numpy >= 2.4 requires."""
    return int(self.handle.data.reshape(()))  # (1,) or (1, 1) -> () first: a 0-d array converts


def _repair_interpreter_index(triton_version: str) -> None:
    """Give triton < 3.7's interpreter the scalar conversion numpy >= 2.4 accepts (idempotent).

    Each interpreted launch patches ``tl.tensor.__index__`` through
    ``triton.runtime.interpreter._patch_lang_tensor(tensor, scope)`` and restores it afterwards;
    this wraps that function so the patched ``__index__`` reshapes to 0-d before ``int``.
    """
    if release(triton_version) >= (3, 7):
        return
    import numpy as np
    from triton.runtime import interpreter

    patch = getattr(interpreter, "_patch_lang_tensor", None)
    if getattr(patch, "flashlab_repaired", False):
        return
    if patch is None or list(inspect.signature(patch).parameters) != ["tensor", "scope"]:
        if release(np.__version__) < (2, 4):
            return  # the old conversion still works (with a DeprecationWarning)
        raise RuntimeError(
            f"triton {triton_version}'s CPU interpreter fails with numpy {np.__version__} ('only 0-dimensional "
            "arrays can be converted to Python scalars') and flashlab cannot repair this triton. Fix: "
            "pip install \"numpy<2.4\" (or torch 2.13 with triton 3.7.1, whose interpreter works with numpy 2.4)")

    def repaired(tensor, scope):
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", _index_of_one_element)

    repaired.flashlab_repaired = True
    interpreter._patch_lang_tensor = repaired


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
