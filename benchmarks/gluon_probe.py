"""Check and time the warp-specialised Gluon rung (``flash_fwd_gluon``) against the Hopper rung and cuDNN.

    python benchmarks/gluon_probe.py check [--configs 128,2 64,3]   # correctness, poisoned outputs
    python benchmarks/gluon_probe.py time --rounds 3 [--configs ...] [--seq-lens 4096 8192]

``check``: forward outputs (o and lse) on fresh random inputs against float64 attention, every
(dtype, causal, d, Nq, Nk) of a small matrix with ragged lengths, the outputs NaN-poisoned first;
pass when the error is at most twice PyTorch's own in the same dtype plus a floor (the rule of
``benchmarks/gpu_sweep.py``). ``time``: the speed protocol's rows (B*N = 16384, H*d = 2048) at the
given N, d = 128 by default; cuDNN, the Hopper rung and every Gluon config timed in ``rounds``
interleaved rounds, each round the median of ``triton.testing.do_bench`` (``bench_attention.bench_ms``),
then the median over rounds. Writes JSON with ``--out``.

(The results of calls 12, 13 and 16 in benchmarks/NOTES.md were timed before this script used
``bench_ms``: each round there is do_bench's default, the *mean* of its repeats.)
"""
from __future__ import annotations

import argparse
import itertools
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402
from bench_attention import bench_ms  # noqa: E402  (the protocol's timer: median of do_bench)

LENGTHS = (1, 17, 128, 1000, 4096)


def parse_configs(items):
    from flashlab.kernels.flash_fwd_gluon import GluonConfig

    if not items:
        return [GluonConfig()]
    out = []
    for item in items:
        parts = [int(x) for x in item.split(",")]
        out.append(GluonConfig(*parts))
    return out


def label(cfg) -> str:
    return f"n{cfg.block_n}b{cfg.num_buffers}r{cfg.consumer_regs}"


def check(args) -> dict:
    import torch

    from flashlab.kernels import flash_fwd_gluon as fg
    from flashlab.kernels.attention import allowed_error, attention_reference, max_error

    os.environ["FLASHLAB_POISON"] = "1"
    results = []
    for cfg in parse_configs(args.configs):
        for dtype, causal, d, (nq, nk) in itertools.product(
                (torch.bfloat16, torch.float16), (False, True), args.head_dims,
                itertools.product(LENGTHS, LENGTHS)):
            seed = random.randrange(2**31)
            g = torch.Generator(device="cuda").manual_seed(seed)
            B, H = (1, 2) if nq * nk > 1000 * 1000 else (2, 3)
            q = torch.randn(B, H, nq, d, device="cuda", generator=g).to(dtype)  # (B, H, Nq, d)
            k = torch.randn(B, H, nk, d, device="cuda", generator=g).to(dtype)  # (B, H, Nk, d)
            v = torch.randn(B, H, nk, d, device="cuda", generator=g).to(dtype)  # (B, H, Nk, d)
            rec = dict(config=label(cfg), dtype=str(dtype)[6:], causal=causal, d=d, Nq=nq, Nk=nk, seed=seed)
            try:
                o, lse = fg.forward(q, k, v, causal, config=cfg)
                torch.cuda.synchronize()
            except Exception as exc:  # noqa: BLE001  (record, keep checking)
                rec.update(ok=False, error=f"{type(exc).__name__}: {str(exc)[:300]}")
                results.append(rec)
                print(rec, flush=True)
                continue
            ref = attention_reference(q.double(), k.double(), v.double(), causal=causal)
            same = attention_reference(q, k, v, causal=causal, upcast=False)
            err, allowed = max_error(o, ref), allowed_error(ref, same)
            scores = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(d)  # (B, H, Nq, Nk)
            if causal:
                scores = scores.masked_fill(torch.ones(nq, nk, device="cuda", dtype=torch.bool).triu(1), -math.inf)
            lse_err = max_error(lse, torch.logsumexp(scores, -1))
            rec.update(err=float(f"{err:.3g}"), allowed=float(f"{allowed:.3g}"), lse_err=float(f"{lse_err:.3g}"),
                       ok=bool(err <= allowed and lse_err <= 1e-3))
            results.append(rec)
            if not rec["ok"]:
                print("FAIL", rec, flush=True)
    n_ok = sum(r["ok"] for r in results)
    worst = max((r["err"] / r["allowed"] for r in results if "err" in r), default=float("nan"))
    print(f"[check] {n_ok}/{len(results)} pass; worst err/allowed {worst:.2f}; "
          f"worst lse err {max((r.get('lse_err', 0) for r in results), default=0):.2e}", flush=True)
    return {"check": results, "passed": n_ok, "cases": len(results)}


def timing(args) -> dict:
    import torch

    from flashlab.kernels import flash_fwd_gluon as fg
    from flashlab.kernels import flash_fwd_hopper as hopper

    configs = parse_configs(args.configs)
    rows = []
    cudnn = _common.sdpa("CUDNN_ATTENTION")
    for dtype_name, d, n, causal in itertools.product(args.dtypes, args.head_dims, args.seq_lens, args.causal):
        dtype = getattr(torch, dtype_name)
        B, H = 16384 // n, 2048 // d
        scale = 1.0 / math.sqrt(d)
        flops = 4.0 * B * H * n * n * d / (2 if causal else 1)
        q, k, v = (torch.randn(B, H, n, d, device="cuda", dtype=dtype) for _ in range(3))  # (B, H, N, d)
        variants = {"sdpa_cudnn": lambda: cudnn(q, k, v, causal, scale),
                    "hopper": lambda: hopper.forward(q, k, v, causal, scale)}
        for cfg in configs:
            variants[f"gluon_{label(cfg)}"] = (lambda c: lambda: fg.forward(q, k, v, causal, scale, c))(cfg)
        errors = {}
        ref = cudnn(q[:1, :2], k[:1, :2], v[:1, :2], causal, scale).float()
        for name, f in list(variants.items()):
            try:
                out = f()
                out = out[0] if isinstance(out, tuple) else out
                errors[name] = (out[:1, :2].float() - ref).abs().max().item()
            except Exception as exc:  # noqa: BLE001
                print(f"[time] {name} failed: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                variants.pop(name)
        ms = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, f in variants.items():
                ms[name].append(bench_ms(f))
        row = {"dtype": dtype_name, "d": d, "n": n, "causal": causal, "B": B, "H": H, "rounds": args.rounds,
               "per_round": "median of triton.testing.do_bench(warmup=20, rep=60)",
               "ms_rounds": ms, "max_abs_diff_vs_cudnn": errors}
        med = {name: statistics.median(v) for name, v in ms.items()}
        row["tflops"] = {name: round(flops / t / 1e9, 1) for name, t in med.items()}
        row["ratio_vs_cudnn"] = {name: round(med["sdpa_cudnn"] / t, 3) for name, t in med.items()}
        rows.append(row)
        print(f"[time] {dtype_name} d{d} N{n} c{int(causal)}: " +
              ", ".join(f"{name} {row['tflops'][name]:.0f} ({row['ratio_vs_cudnn'][name]:.3f})" for name in med),
              flush=True)
    return {"timing": rows}


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("check", "time"), nargs="?", default="time")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit (no GPU needed)")
    p.add_argument("--configs", nargs="*", help="BLOCK_N,NBUF[,CONSUMER_REGS[,PRODUCER_REGS]] per config")
    p.add_argument("--head-dims", nargs="*", type=int, default=[128])
    p.add_argument("--seq-lens", nargs="*", type=int, default=[4096, 8192, 16384])
    p.add_argument("--dtypes", nargs="*", default=["bfloat16", "float16"])
    p.add_argument("--causal", nargs="*", type=int, default=[0, 1])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    args.causal = [bool(c) for c in args.causal]
    if args.dry_run:
        configs = args.configs or ["default"]
        if args.what == "check":
            print(f"check: configs {configs}, d {args.head_dims}, bf16 and fp16, causal 0/1, "
                  f"(Nq, Nk) in {LENGTHS} x {LENGTHS}: {2 * 2 * len(args.head_dims) * len(LENGTHS) ** 2} cases per config")
        else:
            for dtype, d, n, causal in itertools.product(args.dtypes, args.head_dims, args.seq_lens, args.causal):
                print(f"time: {dtype} d={d} N={n} causal={int(causal)} B={16384 // n} H={2048 // d}: cuDNN, the Hopper "
                      f"rung, Gluon configs {configs}, {args.rounds} interleaved rounds")
        return 0
    refusal = _common.timing_refusal() if args.what == "time" else None
    if refusal or (args.what == "check" and not _cuda()):
        print(f"gluon_probe: refusing to run: {refusal or 'the Gluon rung needs a CUDA GPU'}", file=sys.stderr)
        return 2
    t0 = time.time()
    payload = {"environment": _common.environment()}
    payload.update(check(args) if args.what == "check" else timing(args))
    payload["wall_s"] = round(time.time() - t0, 1)
    if args.out:
        _common.write_json(args.out, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
