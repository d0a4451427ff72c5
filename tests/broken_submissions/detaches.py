"""Cheating ex01_naive: leaves a detached process behind (double fork + setsid) that outlives grading.

It writes its pid to /tmp/flashlab_detached.pid so that the test can look for it.
"""
import os
import time

import numpy as np


def naive_attention(q, k, v, causal=False, scale=None):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open("/tmp/flashlab_detached.pid", "w") as f:
                f.write(str(os.getpid()))
            time.sleep(120)
        os._exit(0)
    time.sleep(0.5)
    return np.zeros(q.shape[:-1] + (v.shape[-1],), q.dtype)
