"""Broken ex01_naive: writes files into its folder (the one place it may write) until the disk is full;
here 64 files of 4 MiB (the test lowers the grader's limit), each one under RLIMIT_FSIZE."""
import os
import time

import numpy as np


def naive_attention(q, k, v, causal=False, scale=None):
    block = os.urandom(4 << 20)
    for i in range(64):
        with open(f"fill_{i}.bin", "wb") as f:  # the working directory is the child's home
            f.write(block)
        time.sleep(0.05)
    return np.zeros(q.shape[:-1] + (v.shape[-1],), q.dtype)
