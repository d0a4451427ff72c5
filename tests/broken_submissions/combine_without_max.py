"""Broken ex14_split_kv_decode: combine_splits weighs each split by exp(lse_s) / sum_s exp(lse_s),
without subtracting the largest lse first. Right whenever every lse is small (it scored 2/2 while every
combine case had lse near 0); a split whose keys score about +1000 overflows exp() to inf, and
inf / inf is NaN. split_kv_partials is left as in the stub."""
import torch


def split_kv_partials(q, k, v, num_splits, scale=None):
    raise NotImplementedError("Exercise 14: partial states per split")


def combine_splits(o_part, lse_part):
    e = torch.exp(lse_part)  # (Z, S): inf once an lse passes 88 (float32)
    weights = e / e.sum(dim=-1, keepdim=True)
    return (weights[..., None] * o_part).sum(dim=1)
