"""The course card's claims about FlashAttention, each checked against committed data or a model.

The card the course was written from states, among others: naive prefill at 8k is "3-7x slower";
FlashAttention makes "an order of magnitude fewer HBM accesses" because d is 64-128; "16k and
beyond" is infeasible with naive attention; FlashAttention is exact where linear or sparse
attention approximates; decode "is bound by reading the weights"; serving engines use
FlashAttention by default. Each function below returns the numbers behind a verdict; notebook 09
prints them. Measured numbers come from ``benchmarks/results/*.json`` and
``benchmarks/anchors/h200_sdpa.txt`` (one NVIDIA H200, torch 2.11, cuDNN 9.19).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from . import perf
from . import traffic as tr

GIB = 2**30


# -- 1. naive prefill at 8k: "3-7x slower" -------------------------------------------------------
def naive_slowdown_at(bench: dict, n: int = 8192, impls=("flashlab", "sdpa_cudnn", "sdpa_flash")) -> dict:
    """(impl, causal, mode) -> (min, max) of naive time / impl time at sequence length n, all dtypes and d."""
    out = {}
    for impl in impls:
        for causal in (False, True):
            for mode in perf.MODES:
                rng = perf.ratio_range(bench["rows"], impl, "naive", mode, n=n, causal=causal)
                if rng:
                    out[(impl, causal, mode)] = rng
    return out


# -- 2. "an order of magnitude fewer HBM accesses for d = 64-128" ---------------------------------
def hbm_access_ratios(n: int = 8192, head_dims=(64, 128), sram_bytes=(100 * 1024, 228 * 1024),
                      itemsize: int = 2) -> dict:
    """(d, SRAM bytes) -> standard / flash HBM accesses in the paper's model (FA1, paper blocks),
    and standard / FA2 with the kernels' 128 x 128 tiles (no L2 in either model)."""
    out = {}
    for d in head_dims:
        standard = tr.standard_hbm_accesses(n, d)
        fa2 = tr.fa2_forward_traffic(n, n, d, block_q=128, block_k=128, itemsize=1, stat_itemsize=1).total
        for sram in sram_bytes:
            m = sram // itemsize
            out[(d, sram)] = {"paper_blocks": tr.paper_block_sizes(m, d),
                              "standard_over_fa1_paper": standard / tr.flash_hbm_accesses(n, d, m),
                              "standard_over_fa2_128": standard / fa2}
    return out


# -- 3. "16k and beyond is infeasible with naive attention" ---------------------------------------
@dataclass(frozen=True)
class NaiveMemory:
    n: int
    measured: str  # what the anchors recorded: "32.9GiB" or "OOM (...)"
    p_bytes_per_layer: int  # P kept for the backward by a training step, one layer


def naive_memory(anchor_text: str, heads: int = 32, batch: int = 1, itemsize: int = 2) -> list[NaiveMemory]:
    """Parse the anchors' naive causal forward peak memory (B=1, H=32, d=128) and add the bytes of P
    (B*H*N^2*itemsize) that a training step keeps per layer for the backward."""
    line = next((x for x in anchor_text.splitlines() if x.startswith("Naive causal fwd peak memory")), None)
    if line is None:
        raise ValueError("anchor_text has no 'Naive causal fwd peak memory' line "
                         "(expected benchmarks/anchors/h200_sdpa.txt)")
    out = []
    for size, what in re.findall(r"(\d+)k (OOM|[\d.]+GiB)", line):
        n = int(size) * 1024
        out.append(NaiveMemory(n, what, batch * heads * n * n * itemsize))
    return out


# -- 4. exact against approximate attention ------------------------------------------------------
def approximation_errors(n: int = 512, d: int = 64, features: int = 256, window: int = 64, top_k: int = 32,
                         score_std: float = 2.0, seed: int = 0) -> dict:
    """Relative error ||o - exact|| / ||exact|| (float64) of attention approximations on one random head.

    - tiled (FlashAttention-2 in NumPy, float32): rounding only;
    - random-feature softmax kernel (Performer's positive features, ``features`` of them);
    - sliding window (each query sees the ``window`` keys nearest it);
    - top-k sparse (each query keeps its ``top_k`` largest scores; needs all scores to pick them).
    Random inputs give scores of standard deviation about 1 and nearly uniform attention, which
    no trained model has; q is scaled so that the scores' standard deviation is ``score_std``.
    """
    from .reference import naive_attention
    from .tiled import tiled_attention

    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((n, d)) for _ in range(3))  # (n, d)
    q = q * float(score_std)  # scores q.k / sqrt(d) now have standard deviation score_std
    exact = naive_attention(q, k, v)  # (n, d)
    scale = 1 / np.sqrt(d)

    def rel(o):
        return float(np.linalg.norm(o - exact) / np.linalg.norm(exact))

    out = {"tiled, float32 (exact algorithm)": rel(tiled_attention(*(x.astype(np.float32) for x in (q, k, v)),
                                                                   block_q=64, block_k=64).astype(np.float64))}
    # Performer: exp(q.k) = E_w[phi(q) phi(k)], phi(x) = exp(w.x - |x|^2 / 2) / sqrt(m), w ~ N(0, I)
    qs, ks = q * scale**0.5, k * scale**0.5  # so that qs.ks = scale * q.k
    w = rng.standard_normal((features, d))  # (m, d)

    def phi(x):
        return np.exp(x @ w.T - (x**2).sum(axis=1, keepdims=True) / 2) / np.sqrt(features)  # (n, m)

    fq, fk = phi(qs), phi(ks)
    out[f"random features (Performer, m = {features})"] = rel((fq @ (fk.T @ v)) / (fq @ fk.sum(axis=0))[:, None])
    s = q @ k.T * scale  # (n, n)
    i, j = np.indices(s.shape)
    local = np.where(np.abs(i - j) <= window // 2, s, -np.inf)
    out[f"sliding window ({window} keys)"] = rel(_softmax_rows(local) @ v)
    kth = np.sort(s, axis=1)[:, -top_k][:, None]
    out[f"top-{top_k} sparse"] = rel(_softmax_rows(np.where(s >= kth, s, -np.inf)) @ v)
    return out


def _softmax_rows(s):
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


# -- 5. "decode is bound by reading the weights" -------------------------------------------------
@dataclass(frozen=True)
class DecodeModel:
    """A decoder-only transformer's sizes (defaults: an 8B-parameter model with GQA, Llama-3-8B-like)."""

    params: float = 8.0e9
    layers: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    weight_itemsize: int = 2  # bf16 weights
    kv_itemsize: int = 2  # bf16 KV cache

    def kv_bytes_per_token(self) -> int:
        """K and V of one token, all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.kv_itemsize


def decode_step_bytes(model: DecodeModel, batch: int, context: int) -> dict:
    """Bytes one decode step must read: every weight once (shared by the batch) and every
    sequence's KV cache once; the step's time floor at a given bandwidth follows."""
    weights = model.params * model.weight_itemsize
    kv = batch * context * model.kv_bytes_per_token()
    return {"weights": weights, "kv_cache": kv, "kv_share": kv / (weights + kv),
            "crossover_tokens": weights / model.kv_bytes_per_token()}


# -- 6. FlashAttention as the serving engines' default -------------------------------------------
SERVING_LOOKED_UP = "2026-11-30"  # when the documentation below was read (search of stored public docs)
SERVING_SOURCES = (
    ("vLLM", "https://docs.vllm.ai/en/latest/design/attention_backends/ (the page for v0.20-v0.32 too); "
             "the priority lists in vllm/platforms/cuda.py",
     "automatic selection walks a priority list per GPU generation: before Blackwell (Ampere, Hopper) "
     "FLASH_ATTN (vLLM's fork of FlashAttention-2/3) comes first; on Blackwell (SM 10.x) FlashInfer "
     "comes first. --attention-backend overrides it."),
    ("SGLang", "https://docs.sglang.io/advanced_features/attention_backend.html",
     "without --attention-backend, MHA models get fa3 (FlashAttention-3) on Hopper with CUDA 12.3+, "
     "trtllm_mha on Blackwell, and flashinfer (else triton) on Ampere and Ada."),
    ("TensorRT-LLM", "https://nvidia.github.io/TensorRT-LLM/ (attention plugin documentation)",
     "runs NVIDIA's own fused attention kernels (tiled, online softmax), not the flash-attn library; "
     "not checked further here."),
)


# -- the verdict tables, as notebook 09 prints them -----------------------------------------------
def slowdown_table(bench: dict, n: int = 8192) -> str:
    """:func:`naive_slowdown_at` as text."""
    return "\n".join(f"naive / {impl:<10} {'causal' if causal else 'not causal':<10} {mode:<6}: {lo:5.1f}x to {hi:5.1f}x"
                     for (impl, causal, mode), (lo, hi) in naive_slowdown_at(bench, n=n).items())


def hbm_table(n: int = 8192, ncu: dict | None = None) -> str:
    """:func:`hbm_access_ratios` as text, with the ncu-measured ratio when ``ncu`` is given."""
    lines = [f"d = {d:>3}, SRAM {sram // 1024:>3} KiB, paper blocks {r['paper_blocks']}: standard / FA1 "
             f"{r['standard_over_fa1_paper']:4.1f}x; standard / FA2 with 128 x 128 tiles {r['standard_over_fa2_128']:4.1f}x"
             for (d, sram), r in hbm_access_ratios(n=n).items()]
    if ncu:
        r = perf.ncu_dram_ratio(ncu, n=4096)
        lines.append(f"measured (ncu, d = 64, N = 4096): {r['ratio_with_o']:.0f}x counting O's write "
                     f"({r['measured_ratio']:.0f}x as ncu reports)")
    return "\n".join(lines)


def memory_table(anchor_text: str, heads: int = 32, layers: int = 32, capacity_gib: float | None = None) -> str:
    """:func:`naive_memory` as text, with P for a ``layers``-layer model. ``capacity_gib``: the GPU's
    memory in GiB (``bench_memory.json``'s ``environment.memory_gib``); each measured peak then
    shows the room it leaves."""
    from .viz.style import format_bytes

    if capacity_gib is not None and (isinstance(capacity_gib, bool) or not isinstance(capacity_gib, (int, float))
                                     or capacity_gib <= 0):
        raise ValueError(f"capacity_gib={capacity_gib!r} must be a positive number of GiB, or None")

    def spaced(measured: str) -> str:  # the anchors write "8.6GiB"; the table, like format_bytes, "8.6 GiB"
        return re.sub(r"(\d)([KMGT]?i?B)\b", r"\1 \2", measured)

    def room(measured: str) -> str:
        peak = re.fullmatch(r"([\d.]+)GiB", measured)
        if capacity_gib is None or peak is None:
            return ""
        return f" ({capacity_gib - float(peak.group(1)):.1f} GiB of {capacity_gib} GiB left)"

    lines = [f"N = {m.n:>6}: one naive forward, peak memory {spaced(m.measured):>10}{room(m.measured)}; P kept per "
             f"layer for training {format_bytes(m.p_bytes_per_layer):>10} (x {layers} layers: "
             f"{format_bytes(layers * m.p_bytes_per_layer)})"
             for m in naive_memory(anchor_text, heads=heads)]
    return "\n".join(lines)


def approximation_table(**kwargs) -> str:
    """:func:`approximation_errors` as text."""
    return "\n".join(f"{name:<42} relative error {err:.1e}" for name, err in approximation_errors(**kwargs).items())


def decode_table(model: DecodeModel, bandwidth: float, cases=((1, 8192), (1, 131072), (32, 8192), (16, 32768))) -> str:
    """:func:`decode_step_bytes` for (batch, context) cases, with the time floor at ``bandwidth`` B/s."""
    from .viz.style import format_bytes

    lines = []
    for batch, context in cases:
        b = decode_step_bytes(model, batch, context)
        lines.append(f"batch {batch:>2}, context {context:>6}: weights {format_bytes(b['weights']):>9}, KV cache "
                     f"{format_bytes(b['kv_cache']):>9} ({b['kv_share']:4.0%} of the bytes); "
                     f">= {(b['weights'] + b['kv_cache']) / bandwidth * 1e3:5.1f} ms per step")
    lines.append(f"the KV cache outweighs the weights beyond {b['crossover_tokens']:,.0f} cached tokens in the batch")
    return "\n".join(lines)


def serving_table() -> str:
    """The serving engines' documented defaults, with sources and the date they were read."""
    lines = [f"looked up {SERVING_LOOKED_UP}"]
    for engine, source, what in SERVING_SOURCES:
        lines.append(f"{engine}: {what}\n    source: {source}")
    from .course import wrap_prose

    return wrap_prose("\n".join(lines))
