"""Broken ex01_naive: hands the work to torch's scaled_dot_product_attention."""


def naive_attention(q, k, v, causal=False, scale=None):
    import torch
    import torch.nn.functional as F

    o = F.scaled_dot_product_attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v),
                                       is_causal=causal, scale=scale)
    return o.numpy()
