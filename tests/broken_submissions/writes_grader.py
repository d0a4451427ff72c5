"""Cheating ex01_naive: at import, rewrites the grader's registry and a solution (to pass anything)."""
import importlib.util
from pathlib import Path

import numpy as np

_package = Path(importlib.util.find_spec("flashlab").origin).parent
for _target in (_package / "grading" / "registry.py", _package.parents[1] / "solutions" / "ex01_naive.py"):
    try:
        with open(_target, "a") as _f:
            _f.write("\n# rewritten by a learner's module\n")
    except OSError:
        pass


def naive_attention(q, k, v, causal=False, scale=None):
    return np.zeros(q.shape[:-1] + (v.shape[-1],), q.dtype)
