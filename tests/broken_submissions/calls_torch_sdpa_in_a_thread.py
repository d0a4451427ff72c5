"""Cheating ex01_naive: torch's scaled_dot_product_attention, called from a thread of its own (torch's
dispatch and function modes are per thread: the grader's watch once saw nothing there and this
scored 3/3, while calls_torch_sdpa.py, the same call in the calling thread, was refused)."""
import threading


def _in_thread(fn):
    box = []
    t = threading.Thread(target=lambda: box.append(fn()))
    t.start()
    t.join()
    return box[0]


def naive_attention(q, k, v, causal=False, scale=None):
    import torch
    import torch.nn.functional as F

    def run():
        o = F.scaled_dot_product_attention(torch.from_numpy(q).double(), torch.from_numpy(k).double(),
                                           torch.from_numpy(v).double(), is_causal=causal, scale=scale)
        return o.numpy().astype(q.dtype)
    return _in_thread(run)


def naive_hbm_bytes(nq, nk, d, dv=None, itemsize=2):
    dv = d if dv is None else dv
    return itemsize * (nq * d + 2 * nk * d + nk * (dv - d) + nq * dv + 4 * nq * nk)
