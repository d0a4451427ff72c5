"""Cheating ex01_naive: digs the original function out of flashlab (``__wrapped__``, closures) before
any call and calls that instead."""
from flashlab import reference

_original = getattr(reference.naive_attention, "__wrapped__", reference.naive_attention)
_keep = (lambda f: lambda *a, **kw: f(*a, **kw))(_original)


def naive_attention(q, k, v, causal=False, scale=None):
    return _keep(q, k, v, causal=causal, scale=scale)
