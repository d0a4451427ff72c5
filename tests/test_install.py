"""Installing the course, and what depends on the installed versions.

* ``-m install`` tests ask pip what ``pip install ".[test]"`` chooses on a machine that knows only
  the public package index (pip's configuration and local wheel folders switched off): on Linux,
  the triton torch itself requires; on macOS (no triton wheels), the NumPy course without triton.
  They read metadata only (``--dry-run --report``; PEP 658 metadata files, or HTTP range requests
  into the wheel) and stop pip if it starts to download a whole large wheel. Deselect them with
  ``-m "not install"``; without network they skip, except in CI (``CI=true``), where they fail.
* The other tests need no network: the repair of triton 3.6's interpreter for numpy >= 2.4
  (``flashlab.kernels._mode``) and the doctor's version checks.
"""
import os

import numpy as np
import pytest

from flashlab import doctor


# -- triton < 3.7's interpreter with numpy >= 2.4 ------------------------------------------------

def _simulate_triton36_index(monkeypatch):
    """Make the installed interpreter convert blocks to int the way triton 3.6.0's does: int(array)."""
    from flashlab.kernels import _mode

    _mode.triton()
    from triton.runtime import interpreter

    current = interpreter._patch_lang_tensor

    def triton36(tensor, scope):
        current(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", triton36)
    return interpreter


def _run_loop_with_tensor_bound():
    """A kernel whose loop bound is a tensor (as the course's causal loops are): sum of x[:n]."""
    import torch
    import triton.language as tl

    from flashlab.kernels import _mode

    triton = _mode.triton()

    @triton.jit
    def prefix_sum(X, N, Out, BLOCK: tl.constexpr):
        hi = tl.minimum(tl.load(N), 64)  # a 1-element block, not a Python int
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, hi, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            acc += tl.load(X + offs, mask=offs < hi, other=0.0)
        tl.store(Out, tl.sum(acc, axis=0))

    x = torch.randn(64, generator=torch.Generator().manual_seed(0))
    n, out = torch.tensor([37], dtype=torch.int32), torch.empty(1)
    prefix_sum[(1,)](x, n, out, BLOCK=8)
    return out.item(), x[:37].sum().item()


@pytest.mark.interpreter
def test_triton36_interpreter_is_repaired_for_numpy_24(monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from flashlab.kernels import _mode

    if not _mode.is_interpreter():
        pytest.skip("Triton is compiled for a GPU here; the repair concerns its CPU interpreter")
    interpreter = _simulate_triton36_index(monkeypatch)
    if _mode.release(np.__version__) >= (2, 4):  # the failure being repaired, shown first
        with pytest.raises(Exception, match="only 0-dimensional arrays"):
            _run_loop_with_tensor_bound()
    _mode._repair_interpreter_index("3.6.0")
    got, want = _run_loop_with_tensor_bound()
    assert abs(got - want) <= 1e-5 * max(1.0, abs(want)), f"repaired loop summed {got}, expected {want}"
    repaired = interpreter._patch_lang_tensor
    _mode._repair_interpreter_index("3.6.0")  # idempotent: no second wrapper
    assert interpreter._patch_lang_tensor is repaired


def test_an_interpreter_flashlab_cannot_repair_is_refused_with_the_fix(monkeypatch):
    pytest.importorskip("triton")
    from triton.runtime import interpreter

    from flashlab.kernels import _mode

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", lambda tensor: None, raising=False)  # another layout
    monkeypatch.setattr(np, "__version__", "2.4.6")
    with pytest.raises(RuntimeError, match=r'triton 3\.5\.1.*numpy 2\.4\.6.*pip install "numpy<2\.4"'):
        _mode._repair_interpreter_index("3.5.1")
    _mode._repair_interpreter_index("3.7.1")  # triton 3.7 converts correctly: left alone
