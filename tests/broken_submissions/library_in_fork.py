"""Cheating ex03_tiled_forward: calls flashlab's tiled attention in a forked child (where a recorder
in the grading process would not see it) and returns what the fork sends back."""
import os
import pickle


def tiled_attention(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            from flashlab.tiled import tiled_attention as library

            os.write(write, pickle.dumps(library(q, k, v, causal=causal, scale=scale, block_q=block_q,
                                                 block_k=block_k)))
        finally:
            os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 1 << 20):
        data += chunk
    os.waitpid(pid, 0)
    return pickle.loads(data) if data else None
