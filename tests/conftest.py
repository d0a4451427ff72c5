"""Shared test set-up.

Triton's mode is fixed when ``@triton.jit`` runs, so the interpreter is switched on here,
before any test module imports triton, whenever no CUDA GPU is present.
"""
import os
import sys

import pytest


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


try:  # the same examples on every run: a property test must not pass or fail by the draw
    from hypothesis import settings as _hypothesis_settings
except ImportError:
    pass
else:
    _hypothesis_settings.register_profile("flashlab", derandomize=True, database=None)
    _hypothesis_settings.load_profile("flashlab")

# The inputs a kernel is launched again on take a secret drawn per graded part (grading.checks.replay_salt);
# the tests fix it, so that every run grades on the same inputs
os.environ.setdefault("FLASHLAB_GRADER_REPLAY_SALT", "1")

HAS_CUDA = _cuda_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _close_figures():
    """A test that draws a figure and forgets it must not leave it to the next test."""
    yield
    import sys

    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def pytest_sessionfinish(session, exitstatus):
    """Close the widgets the tests made while Python can still do it (their __del__ at shutdown
    prints a traceback per widget)."""
    module = sys.modules.get("ipywidgets.widgets.widget")
    if module is None:
        return
    for widget in list(getattr(module, "_instances", {}).values()):
        try:
            widget.close()
        except Exception:  # a comm already gone: nothing left to close
            pass
