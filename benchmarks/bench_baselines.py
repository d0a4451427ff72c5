"""Compiler baselines beside SDPA and flashlab: torch.compile'd naive attention and FlexAttention.

The question: how far does a compiler get on its own? ``torch.compile`` of the naive PyTorch
attention (matmul -> mask -> softmax -> matmul) may fuse the scale, mask and softmax, but it
still materialises S and P in HBM; FlexAttention (``torch.nn.attention.flex_attention``, compiled)
generates a FlashAttention-style Triton kernel from a ``mask_mod``. Both are timed side by side
with SDPA's default choice and ``flashlab.kernels.attention.flash_attention``.

Protocol (bench_attention.py's, on a subset): bf16, B*N = 16384, H*d = 2048, d in {64, 128},
N in {1024, 4096, 16384}, causal both (top-left). Forward FLOPs 4*B*H*N^2*d (halved when
causal), forward+backward = 3.5 x forward. Time: median of triton.testing.do_bench. Every
variant is checked on fresh random inputs of the row's shape before it is timed (bench_attention's
rule: error at most 2x naive-in-dtype + 1e-4 against float32).

Two passes, so a time limit still leaves a complete forward table: first the forward of every
row, then forward+backward while time remains (``--budget-s``). Compilation happens in the
untimed warm-up; its wall time is recorded per row as ``compile_s``.

    python benchmarks/bench_baselines.py                  # -> results/bench_baselines.json
    python benchmarks/bench_baselines.py --dry-run        # the plan; needs no GPU
"""
from __future__ import annotations

import argparse
import math
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
import bench_attention as ba  # noqa: E402

HEAD_DIMS = (64, 128)
SEQ_LENS = (1024, 4096, 16384)
VARIANTS = ("sdpa", "flashlab", "flex", "naive_compiled", "naive")
OUT = Path(__file__).resolve().parent / "results" / "bench_baselines.json"

PROTOCOL = dict(ba.PROTOCOL, dtype="bfloat16", seq_lens=list(SEQ_LENS), head_dims=list(HEAD_DIMS),
                variants={"sdpa": "F.scaled_dot_product_attention, default backend choice",
                          "flashlab": "flashlab.kernels.attention.flash_attention",
                          "flex": "torch.compile(flex_attention), causal via create_block_mask",
                          "naive_compiled": "torch.compile(naive attention, dynamic=False)",
                          "naive": "naive attention, eager"})


def load_variants() -> dict:
    """name -> f(q, k, v, causal, scale) -> o."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    from flashlab.kernels.attention import flash_attention

    for knob in ("cache_size_limit", "recompile_limit", "accumulated_cache_size_limit",
                 "accumulated_recompile_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 256)
    naive_c = torch.compile(_common.naive_attention, dynamic=False)
    flex_c = torch.compile(flex_attention, dynamic=False)
    masks = {}

    def causal_mod(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx  # top-left aligned, as SDPA is_causal=True

    def flex(q, k, v, causal, scale):
        mask = None
        if causal:
            key = (q.shape[-2], k.shape[-2])
            if key not in masks:
                masks[key] = create_block_mask(causal_mod, None, None, key[0], key[1], device=q.device)
            mask = masks[key]
        return flex_c(q, k, v, block_mask=mask, scale=scale)

    return {
        "sdpa": lambda q, k, v, c, s: F.scaled_dot_product_attention(q, k, v, is_causal=c, scale=s),
        "flashlab": lambda q, k, v, c, s: flash_attention(q, k, v, causal=c, scale=s),
        "flex": flex,
        "naive_compiled": lambda q, k, v, c, s: naive_c(q, k, v, c, s),
        "naive": _common.naive_attention,
    }


def measure(fn, shape, causal, with_bwd) -> dict:
    """Check fn on fresh inputs of this shape, then time it (forward, or forward+backward)."""
    import torch

    batch, heads, n, d = shape
    scale = 1.0 / math.sqrt(d)
    variant = {"fwd": fn, "bwd": with_bwd, "supports": None}
    t0 = time.time()
    res = ba.check(variant, batch, heads, n, d, torch.bfloat16, causal, scale)  # also compiles
    res["check_and_compile_s"] = round(time.time() - t0, 1)
    if res["status"] != "ok":
        return res
    q, k, v = ba.make_inputs(batch, heads, n, d, torch.bfloat16, requires_grad=with_bwd)
    flops = ba.fwd_flops(batch, heads, n, d, causal)
    if with_bwd:
        do = torch.randn_like(q)

        def step():
            o = fn(q, k, v, causal, scale)
            torch.autograd.grad(o, (q, k, v), do)

        res["fwdbwd_ms"] = ba.bench_ms(step)
        res["fwdbwd_tflops"] = 3.5 * flops / res["fwdbwd_ms"] / 1e9
    else:
        with torch.no_grad():
            res["fwd_ms"] = ba.bench_ms(lambda: fn(q, k, v, causal, scale))
        res["fwd_tflops"] = flops / res["fwd_ms"] / 1e9
    return res


def run(args) -> dict:
    import torch

    torch.manual_seed(0)
    start = time.time()
    variants = load_variants()
    payload = {"environment": _common.environment(), "protocol": PROTOCOL, "rows": []}
    payload["ceilings"] = ba.ceilings()
    print(f"[baselines] ceilings {payload['ceilings']}", flush=True)
    rows = {}
    for mode in ("fwd", "fwdbwd"):
        for d in HEAD_DIMS:
            for n in SEQ_LENS:
                for causal in (False, True):
                    key = (d, n, causal)
                    row = rows.get(key)
                    if row is None:
                        row = {"dtype": "bfloat16", "d": d, "n": n, "batch": 16384 // n,
                               "heads": 2048 // d, "causal": causal, "results": {v: {} for v in VARIANTS}}
                        rows[key] = row
                        payload["rows"].append(row)
                    shape = (row["batch"], row["heads"], n, d)
                    for name in VARIANTS:
                        if time.time() - start > args.budget_s:
                            row["results"][name].setdefault(f"{mode}_status", "skipped: time budget")
                            continue
                        try:
                            res = measure(variants[name], shape, causal, mode == "fwdbwd")
                        except torch.cuda.OutOfMemoryError as exc:
                            res = {"status": "oom", "error": str(exc).splitlines()[0]}
                        except Exception as exc:  # noqa: BLE001  (record and go on)
                            res = {"status": "error", "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                            traceback.print_exc(limit=2)
                        torch.cuda.empty_cache()
                        row["results"][name].update({f"{mode}_{k}" if k in ("status", "check_and_compile_s")
                                                     else k: v for k, v in res.items()})
                    payload["elapsed_s"] = round(time.time() - start, 1)
                    _common.write_json(args.out, payload)
                    print(fmt(row, mode), flush=True)
    return payload


def fmt(row, mode) -> str:
    cells = []
    for name, r in row["results"].items():
        val = r.get(f"{mode}_tflops")
        cells.append(f"{name}={val:5.0f}" if val else f"{name}={str(r.get(f'{mode}_status', '-'))[:6]:>5}")
    return f"{mode:6} d{row['d']:<3} N{row['n']:<6} c{int(row['causal'])} | " + " ".join(cells)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit (no GPU needed)")
    p.add_argument("--budget-s", type=float, default=250.0,
                   help="stop starting measurements after this many seconds (default 250)")
    p.add_argument("--out", type=Path, default=OUT, help=f"results file (default {OUT})")
    args = p.parse_args(argv)
    if args.budget_s <= 0:
        p.error(f"--budget-s must be positive, got {args.budget_s}")
    if args.dry_run:
        print(f"bf16; d in {HEAD_DIMS}; N in {SEQ_LENS}; causal 0/1; B = 16384 // N, H = 2048 // d")
        print(f"variants: {', '.join(VARIANTS)}; forward first, then forward+backward")
        return 0
    why = _common.timing_refusal()
    if why:
        print(f"bench_baselines: refusing to time: {why}", file=sys.stderr)
        return 2
    run(args)
    print(f"[baselines] wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
