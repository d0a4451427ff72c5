"""Cheating ex01_naive: writes into the grading parent's stdout through /proc (to break --json)."""
import os

import numpy as np

for _fd in ("1", "2"):
    try:
        with open(f"/proc/{os.getppid()}/fd/{_fd}", "w") as _out:
            _out.write('{"score": 999, "passed": true}\n')
    except OSError:
        pass


def naive_attention(q, k, v, causal=False, scale=None):
    return np.zeros(q.shape[:-1] + (v.shape[-1],), q.dtype)
