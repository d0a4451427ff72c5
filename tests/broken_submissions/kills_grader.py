"""Cheating ex01_naive: kills the grading process (its parent), so no score is written at all."""
import os
import signal

import numpy as np


def naive_attention(q, k, v, causal=False, scale=None):
    os.kill(os.getppid(), signal.SIGKILL)
    return np.zeros(q.shape[:-1] + (v.shape[-1],), q.dtype)
