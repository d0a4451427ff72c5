"""Decode: do pipelined TMA loads of K and V beat the cp.async split-KV kernel at the rows over SDPA?

The rows still over SDPA's default (cuDNN) after every lead of the split rule run 128 programs, one
per kv group, each streaming its group's K and V at the HBM read ceiling: (4, 32, 32, 32k),
(4, 32, 32, 128k) and (16, 32, 8, 4k). ``flash_decode`` loads K and V tiles with ``cp.async``
(Triton's software pipeline); cuDNN's kernel there is an sm80 kernel, ``cp.async`` too. The one TMA
read measured before (``decode_probe.py``) held one tile in flight. This probe is a decode kernel
whose K and V tiles come through host-side tensor descriptors inside a ``tl.range(...,
num_stages=S)`` loop, which Triton compiles to TMA copies into an S-slot ring: several tiles in
flight per program with almost no registers or instructions spent on addresses.

``_decode_tma``: one program per (sequence, kv group); the group's query heads are the rows of a
16-row tile (GQA packing, rows past the group masked); every length is N (the full cache), N a
multiple of BLOCK_N. Each variant's output is checked against SDPA's first; then flash_decode (the
split rule), SDPA default and the TMA variants are timed in ``ROUNDS`` rotated rounds (``do_bench``
median each, L2 cleared by its 256 MB write), median of the rounds.

    python benchmarks/decode_tma_probe.py            # -> $OUT/decode_tma_probe.json (or results/)
    python benchmarks/decode_tma_probe.py --unsplit  # -> $OUT/decode_tma_probe_unsplit.json

The library's kernel with a TMA path (commit 0dd6b8e; removed after calls 25-28, benchmarks/NOTES.md)
was timed by this script's ``--library`` and ``--variants`` modes in that commit.
"""
from __future__ import annotations

import json
import os

import _common
from bench_decode import D, make_variants, rotated_rounds, rounds_entry

ROWS = ((4, 32, 32, 32768), (4, 32, 32, 131072), (16, 32, 8, 4096))
CONFIGS = tuple((block_n, stages, warps) for block_n, stages, warps in
                ((128, 2, 4), (128, 3, 4), (128, 4, 4), (64, 4, 4), (64, 6, 4), (128, 3, 8)))
# --unsplit: every row of bench_decode's matrix that the split rule runs unsplit (one program per kv
# group, 128 or more) and that call 19 measured over SDPA's default, with the two best configs
UNSPLIT_ROWS = ((4, 32, 32, 4096), (16, 32, 32, 4096), (4, 32, 32, 32768), (4, 32, 32, 131072),
                (16, 32, 8, 4096), (64, 32, 8, 4096), (16, 32, 8, 32768), (16, 32, 8, 131072))
UNSPLIT_CONFIGS = ((128, 3, 4), (128, 4, 4))


def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _decode_tma(Q, K_desc, V_desc, Out, sm_scale, N, H: tl.constexpr, HKV: tl.constexpr,
                    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr,
                    STAGES: tl.constexpr):
        pid = tl.program_id(0)  # b * HKV + kv group
        b, g = pid // HKV, pid % HKV
        rows = tl.arange(0, BLOCK_M)
        dims = tl.arange(0, HEAD_DIM)
        head = g * GROUP + rows  # (BLOCK_M,) query heads of this group
        q_ptrs = Q + (b * H + head)[:, None] * HEAD_DIM + dims[None, :]  # q: (B, H, 1, d) contiguous
        q = tl.load(q_ptrs, mask=(rows < GROUP)[:, None], other=0.0)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
        qk_scale = sm_scale * 1.4426950408889634
        base = pid * N  # first row of this group's keys in the (B * HKV * N, d) view
        for start in tl.range(0, N, BLOCK_N, num_stages=STAGES):
            k = K_desc.load([base + start, 0])  # (BLOCK_N, d)
            s = tl.dot(q, tl.trans(k)) * qk_scale  # (BLOCK_M, BLOCK_N), log2 units
            row_max = tl.maximum(m_i, tl.max(s, 1))
            weights = tl.exp2(s - row_max[:, None])  # (BLOCK_M, BLOCK_N)
            rescale = tl.exp2(m_i - row_max)
            v = V_desc.load([base + start, 0])
            acc = rescale[:, None] * acc + tl.dot(weights.to(v.dtype), v)
            l_i = rescale * l_i + tl.sum(weights, axis=1)
            m_i = row_max
        o = acc / l_i[:, None]
        o_ptrs = Out + (b * H + head)[:, None] * HEAD_DIM + dims[None, :]
        tl.store(o_ptrs, o.to(Out.dtype.element_ty), mask=(rows < GROUP)[:, None])

    return _decode_tma


def tma_variant(kernel, H, Hkv, nk, block_n, stages, warps, scale):
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    made = {}

    def run(q, k, v):
        key = (k.data_ptr(), v.data_ptr())
        if key not in made:
            k2, v2 = k.reshape(-1, D), v.reshape(-1, D)  # (B * Hkv * N, d)
            made.clear()
            made[key] = (TensorDescriptor.from_tensor(k2, [block_n, D]), TensorDescriptor.from_tensor(v2, [block_n, D]),
                         torch.empty_like(q))
        kd, vd, out = made[key]
        B = q.shape[0]
        kernel[(B * Hkv,)](q, kd, vd, out, scale, nk, H=H, HKV=Hkv, GROUP=H // Hkv, BLOCK_M=16, BLOCK_N=block_n,
                           HEAD_DIM=D, STAGES=stages, num_warps=warps)
        return out

    return run


def probe(rows=ROWS, configs=CONFIGS, rounds=3) -> dict:
    import torch

    kernel = _kernel()
    out = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__, "rounds": rounds, "rows": []}
    for B, H, Hkv, nk in rows:
        g = torch.Generator(device="cuda").manual_seed(17)
        q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)
        k, v = (torch.randn(B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        scale = D ** -0.5
        base = make_variants(H, Hkv, scale)
        fns = {"flash_decode": base["flash_decode"], "sdpa_default": base["sdpa_default"]}
        for block_n, stages, warps in configs:
            fns[f"tma_n{block_n}_s{stages}_w{warps}"] = tma_variant(kernel, H, Hkv, nk, block_n, stages, warps, scale)
        calls = {name: (lambda fn=fn: fn(q, k, v)) for name, fn in fns.items()}
        with torch.no_grad():
            ref = calls["sdpa_default"]()
            errors = {name: _common.rel_err(fn(), ref) for name, fn in calls.items()}
            runs = rotated_rounds(calls, rounds=rounds)
        row = {"B": B, "H": H, "Hkv": Hkv, "Nk": nk, "kv_bytes": 2 * k.numel() * k.element_size(), "variants": {}}
        for name in calls:
            entry = rounds_entry(runs[name])
            entry["rel_err"] = errors[name]
            entry["vs_sdpa"] = entry["us"] / _median_of(runs["sdpa_default"])
            entry["vs_flash_decode"] = entry["us"] / _median_of(runs["flash_decode"])
            entry["tb_s"] = row["kv_bytes"] / entry["us"] / 1e6
            row["variants"][name] = entry
        out["rows"].append(row)
        print(B, H, Hkv, nk, {n: (round(e["us"], 1), round(e["vs_sdpa"], 4), f"{e['rel_err']:.1e}")
                              for n, e in row["variants"].items()}, flush=True)
    return out


def _median_of(runs):
    from bench_decode import _median

    return _median(runs)


if __name__ == "__main__":
    import sys

    unsplit = "--unsplit" in sys.argv
    result = probe(UNSPLIT_ROWS, UNSPLIT_CONFIGS, 5) if unsplit else probe()
    folder = os.environ.get("OUT") or os.path.join(os.path.dirname(__file__), "results")
    name = "decode_tma_probe_unsplit.json" if unsplit else "decode_tma_probe.json"
    with open(os.path.join(folder, name), "w") as f:
        json.dump(result, f, indent=1)
