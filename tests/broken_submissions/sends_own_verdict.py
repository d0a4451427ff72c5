"""Cheating ex01_naive: writes a fake verdict ("100 points, passed") into every descriptor the process has
(listed from /proc/self/fd, so it finds the grader's pipe wherever the libraries left it)."""
import json
import os
import struct

import numpy as np


def _claim(fd):
    head = json.dumps({"op": "part", "earned": 100, "status": "passed", "sizes": []}).encode()
    os.write(fd, struct.pack(">QI", 4 + len(head), len(head)) + head)


def _descriptors():
    try:
        return sorted(int(name) for name in os.listdir("/proc/self/fd") if int(name) > 2)
    except OSError:
        return range(3, 1024)


def naive_attention(q, k, v, causal=False, scale=None):
    for fd in _descriptors():
        try:
            _claim(fd)
        except OSError:
            pass
    return np.zeros(q.shape[:-1] + (v.shape[-1],), q.dtype)
