"""Cheating ex01_naive: a thread started at import writes a forged 'result' frame into every descriptor
it can, while the real call is still running (once reported as inputs changed in place, since the
forged record carried no digests)."""
import json
import os
import struct
import threading
import time

import numpy as np


def _forge():
    time.sleep(0.2)
    head = json.dumps({"op": "result", "value": {"t": "none"}, "sizes": []}).encode()
    try:
        fds = sorted(int(name) for name in os.listdir("/proc/self/fd") if int(name) > 2)
    except OSError:
        fds = range(3, 1024)
    for fd in fds:
        try:
            os.write(fd, struct.pack(">QI", 4 + len(head), len(head)) + head)
        except OSError:
            pass


threading.Thread(target=_forge, daemon=True).start()


def naive_attention(q, k, v, causal=False, scale=None):
    time.sleep(0.5)
    return np.zeros(q.shape[:-1] + (v.shape[-1],), q.dtype)
