"""Cheating ex01_naive: a concurrent.futures pool whose worker thread starts at import, before PyTorch
is imported, runs PyTorch's scaled_dot_product_attention for the calling thread. The source never
spells the module's name, so the grader does not import it before loading this file: the worker
could never enter the grader's watch, which PyTorch's first import installs."""
import importlib
from concurrent.futures import ThreadPoolExecutor

POOL = ThreadPoolExecutor(max_workers=1)
POOL.submit(lambda: None).result()  # the worker thread now runs, PyTorch not yet imported
NAME = "tor" + "ch"


def naive_attention(q, k, v, causal=False, scale=None):
    pt = importlib.import_module(NAME)
    F = importlib.import_module(NAME + ".nn.functional")

    def run():
        o = F.scaled_dot_product_attention(pt.from_numpy(q).double(), pt.from_numpy(k).double(),
                                           pt.from_numpy(v).double(), is_causal=causal, scale=scale)
        return o.numpy().astype(q.dtype)
    return POOL.submit(run).result()


def naive_hbm_bytes(nq, nk, d, dv=None, itemsize=2):
    dv = d if dv is None else dv
    return itemsize * (nq * d + 2 * nk * d + nk * (dv - d) + nq * dv + 4 * nq * nk)
