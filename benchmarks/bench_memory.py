"""Peak extra GPU memory of naive vs flash attention, one head, d = 128, N up to 131072.

"Extra" = torch.cuda.max_memory_allocated() during one forward call minus the memory held
before it (q, k, v). Naive attention materialises S and P (N x N each, 2 bytes per element in
bf16), so it grows as N^2 and runs out of memory where it does: the OutOfMemoryError is caught
and recorded. Flash attention holds O (N x d) and lse (N floats) beyond its inputs: linear in N.
The model columns give those two counts so the notebook can plot measured beside predicted.

    python benchmarks/bench_memory.py            # -> results/bench_memory.json
    python benchmarks/bench_memory.py --dry-run  # print the plan; needs no GPU
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

SEQ_LENS = (1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144)
HEAD_DIM = 128


def flash_variants() -> dict:
    out = {}
    try:
        from flashlab.kernels import flash_fwd_hopper as hopper

        out["hopper"] = lambda q, k, v, c, s: hopper.forward(q, k, v, c, s)[0]
    except Exception as exc:  # noqa: BLE001
        print(f"[memory] flash_fwd_hopper unavailable: {exc!r}")
    try:
        from flashlab.kernels.attention import flash_attention

        out["flashlab"] = lambda q, k, v, c, s: flash_attention(q, k, v, causal=c, scale=s)
    except Exception as exc:  # noqa: BLE001
        print(f"[memory] flashlab.kernels.attention unavailable: {exc!r}")
    out["sdpa_flash"] = _common.sdpa("FLASH_ATTENTION")
    return out


def measure(fn, n: int, causal: bool, dtype) -> dict:
    """Peak extra bytes and the time of one call (after one warm-up at a small size)."""
    import torch

    torch.cuda.empty_cache()
    q, k, v = (torch.randn(1, 1, n, HEAD_DIM, device="cuda", dtype=dtype) for _ in range(3))
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    res = {}
    try:
        with torch.no_grad():
            t0 = time.perf_counter()
            o = fn(q, k, v, causal, 1.0 / math.sqrt(HEAD_DIM))
            torch.cuda.synchronize()
            res["ms"] = (time.perf_counter() - t0) * 1e3
        res["peak_extra_bytes"] = torch.cuda.max_memory_allocated() - base
        res["finite"] = bool(torch.isfinite(o).all())
        res["status"] = "ok"
        del o
    except torch.cuda.OutOfMemoryError as exc:
        res["status"] = "oom"
        res["error"] = str(exc).splitlines()[0][:300]
    del q, k, v
    torch.cuda.empty_cache()
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--seq-lens", nargs="*", type=int, default=list(SEQ_LENS))
    p.add_argument("--out", type=Path, default=_common.REPO / "benchmarks" / "results" / "bench_memory.json")
    args = p.parse_args(argv)
    if args.dry_run:
        print(f"one head, d={HEAD_DIM}, bf16, causal 0/1, N in {args.seq_lens}: naive vs flash kernels")
        return 0
    why = _common.timing_refusal()
    if why:
        print(f"bench_memory: refusing to measure: {why}", file=sys.stderr)
        return 2
    import torch

    torch.manual_seed(0)
    dtype = torch.bfloat16
    variants = {"naive": _common.naive_attention, **flash_variants()}
    for fn in variants.values():  # compile / load every kernel once, outside the measurement
        w = [torch.randn(1, 1, 256, HEAD_DIM, device="cuda", dtype=dtype) for _ in range(3)]
        for c in (False, True):
            fn(*w, c, 0.1)
    rows = []
    payload = {"environment": _common.environment(),
               "protocol": {"heads": 1, "batch": 1, "d": HEAD_DIM, "dtype": "bfloat16",
                            "measure": "max_memory_allocated during one forward minus memory held "
                                       "before it (q, k, v); the caching allocator's peak",
                            "model_naive_bytes": "S and P: 2 * N^2 * 2 B (+ O: N*d*2 B)",
                            "model_flash_bytes": "O: N*d*2 B + lse: N*4 B",
                            "ms": "wall time of that one call (after a warm-up at N=256): indicative "
                                  "only; bench_attention.json holds the timings"},
               "rows": rows}
    for n in args.seq_lens:
        for causal in (False, True):
            row = {"n": n, "causal": causal,
                   "model_naive_bytes": 2 * n * n * 2 + n * HEAD_DIM * 2,
                   "model_flash_bytes": n * HEAD_DIM * 2 + n * 4, "results": {}}
            for name, fn in variants.items():
                row["results"][name] = measure(fn, n, causal, dtype)
            rows.append(row)
            _common.write_json(args.out, payload)
            cols = "  ".join(f"{k}: {r.get('peak_extra_bytes', 0) / 2**20:9.1f} MiB {r.get('ms', 0):8.2f} ms "
                             f"{r['status']}" for k, r in row["results"].items())
            print(f"N={n:<7} causal={int(causal)}  {cols}", flush=True)
    print(f"[memory] wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
