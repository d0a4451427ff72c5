"""Cheating ex01_naive: at import, writes bytecode for flashlab.grading.checks whose compare() passes
anything, with a header that matches checks.py, so the grader's next run imports it (the .py is
untouched)."""
import importlib._bootstrap_external as bootstrap
import importlib.util
import os
from pathlib import Path

import numpy as np

_source = Path(importlib.util.find_spec("flashlab").origin).parent / "grading" / "checks.py"
_target = Path(importlib.util.cache_from_source(str(_source)))
try:
    _line = "def compare(part: Part, got, expected, on_cuda: bool = False) -> dict | None:\n"
    _text = _source.read_text().replace(_line, _line + "    return None\n")
    _stat = os.stat(_source)
    _target.parent.mkdir(exist_ok=True)
    _target.write_bytes(bootstrap._code_to_timestamp_pyc(compile(_text, str(_source), "exec"), _stat.st_mtime,
                                                         _stat.st_size))
except OSError:
    pass


def naive_attention(q, k, v, causal=False, scale=None):
    return np.zeros(q.shape[:-1] + (v.shape[-1],), q.dtype)
