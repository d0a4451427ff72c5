"""Cheating ex01_naive: writes a fake verdict ("100 points, passed") into every pipe it can find."""
import json
import os
import struct

import numpy as np


def _claim(fd):
    head = json.dumps({"op": "part", "earned": 100, "status": "passed", "sizes": []}).encode()
    os.write(fd, struct.pack(">QI", 4 + len(head), len(head)) + head)


def naive_attention(q, k, v, causal=False, scale=None):
    for fd in range(3, 30):
        try:
            _claim(fd)
        except OSError:
            pass
    return np.zeros(q.shape[:-1] + (v.shape[-1],), q.dtype)
