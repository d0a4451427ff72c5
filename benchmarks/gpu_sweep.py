"""Correctness sweep of flashlab.flash_attention on a CUDA GPU, forward and backward.

dtype {fp16, bf16, fp32} x causal x heads {MHA, GQA, MQA} x d {16, 40, 64, 80, 96, 128, 256} x
(Nq, Nk) from {1, 17, 128, 1000, 4096}: every pair for d <= 64, the diagonal plus five lopsided
pairs for larger d (``--all-pairs``: every pair for every d, 3 x 2 x 3 x 7 x 25 = 3150 cases, the full
matrix; the committed results used the default, 2070 cases). Each case draws fresh random inputs, poisons every kernel output with NaN
(FLASHLAB_POISON=1, so an unwritten element fails), and applies the flash-attention rule to o,
dq, dk and dv: max error vs the float64 reference <= 2 x that of PyTorch in the same dtype + floor
(``flashlab.kernels.attention.allowed_error``). v3 runs its default config (FLASHLAB_AUTOTUNE=0):
autotuning every shape would cost more compile time than the sweep has; tests/test_flash_gpu.py
autotunes a few.

Usage (GPU machine): PYTHONPATH=src python3 benchmarks/gpu_sweep.py --json OUT.json --md OUT.md
``--backward-rung bwd_fused`` runs every backward through that rung where it applies (each case
records the backward rung that ran), so each rung of the backward ladder gets the same check.
Work is spread over --workers processes (by dtype and causal) sharing the GPU, since Triton's
compiles are CPU-bound. --deadline-s stops starting new cases after that many seconds.
"""
from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import os
import random
import time

LENGTHS = [1, 17, 128, 1000, 4096]
HEAD_DIMS = [16, 40, 64, 80, 96, 128, 256]
HEADS = {"MHA": (4, 4), "GQA": (4, 2), "MQA": (4, 1)}
DTYPES = ["fp16", "bf16", "fp32"]
LOPSIDED = [(1, 4096), (4096, 1), (17, 1000), (1000, 17), (128, 4096)]


def cases(dtype: str, causal: bool, head_dims=HEAD_DIMS, all_pairs: bool = False) -> list[dict]:
    """The sweep's cases for one (dtype, causal): dicts of dtype, causal, heads, d, Nq, Nk."""
    out = []
    for d in head_dims:
        if d <= 64 or all_pairs:
            pairs = list(itertools.product(LENGTHS, LENGTHS))
        else:
            pairs = [(n, n) for n in LENGTHS] + LOPSIDED
        for heads, (Nq, Nk) in itertools.product(HEADS, pairs):
            out.append(dict(dtype=dtype, causal=causal, heads=heads, d=d, Nq=Nq, Nk=Nk))
    return out


def run_case(case: dict) -> dict:
    import torch

    from flashlab.kernels import ladder
    from flashlab.kernels.attention import allowed_error, attention_reference, flash_attention, max_error

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[case["dtype"]]
    H, Hkv = HEADS[case["heads"]]
    Nq, Nk, d, causal = case["Nq"], case["Nk"], case["d"], case["causal"]
    B = 1 if Nq * Nk > 1000 * 1000 else 2
    seed = random.randrange(2**31)
    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, H, Nq, d, device="cuda", generator=g).to(dtype)  # (B, H, Nq, d)
    k = torch.randn(B, Hkv, Nk, d, device="cuda", generator=g).to(dtype)  # (B, Hkv, Nk, d)
    v = torch.randn(B, Hkv, Nk, d, device="cuda", generator=g).to(dtype)  # (B, Hkv, Nk, d)
    do = torch.randn(B, H, Nq, d, device="cuda", generator=g).to(dtype)  # (B, H, Nq, d)
    from flashlab.kernels.visible import as_spec

    record = dict(case, B=B, seed=seed, rung=ladder.best_rung(q, k, v, causal),  # the forward that runs
                  bwd_rung=ladder.choose_backward(q, k, as_spec(causal)))  # and the backward
    t0 = time.time()
    try:
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = flash_attention(*leaves, causal=causal)
        out.backward(do)
        torch.cuda.synchronize()
    except Exception as err:  # a compile error or an illegal access: record it, keep sweeping
        record.update(ok=False, error=f"{type(err).__name__}: {str(err)[:300]}")
        return record
    record["flash_s"] = round(time.time() - t0, 3)
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    ref = attention_reference(*ref_leaves, causal=causal)
    ref.backward(do.double())
    pt_leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    pt = attention_reference(*pt_leaves, causal=causal, upcast=False)
    pt.backward(do)
    ok = True
    for name, mine, r, p in [("o", out, ref, pt)] + list(zip(["dq", "dk", "dv"], [t.grad for t in leaves],
                                                             [t.grad for t in ref_leaves], [t.grad for t in pt_leaves])):
        magnitude = ref_leaves[2].grad if name == "dk" else None  # dK cancels to 0 when Nk = 1
        err, allowed = max_error(mine, r), allowed_error(r, p, magnitude)
        record[f"err_{name}"], record[f"allowed_{name}"] = float(f"{err:.4g}"), float(f"{allowed:.4g}")
        ok = ok and err <= allowed
    record["ok"] = ok
    return record


def worker(args) -> list[dict]:
    dtype, causal, head_dims, deadline, all_pairs, backward_rung = args
    os.environ["FLASHLAB_POISON"] = "1"
    os.environ["FLASHLAB_AUTOTUNE"] = "0"
    if backward_rung is not None:  # every case's backward through this rung, where it runs (else its fallback)
        from flashlab.kernels import ladder

        ladder.choose_backward = lambda q, k, spec: ladder.resolve_backward(backward_rung, q, k, spec)
    results = []
    todo = cases(dtype, causal, head_dims, all_pairs)
    random.Random(0).shuffle(todo)  # a sweep cut short by the deadline still samples every d and length
    for case in todo:
        if time.time() > deadline:
            results.append(dict(case, ok=None, error="not run: deadline"))
            continue
        results.append(run_case(case))
    return results


def worst_ratio(r: dict) -> float:
    """max over o, dq, dk, dv of error / allowed error (a case passes when it is <= 1)."""
    return max(r[f"err_{n}"] / r[f"allowed_{n}"] for n in ("o", "dq", "dk", "dv"))


def summarise(results: list[dict]) -> str:
    lines = ["| dtype | causal | cases | pass | fail | error | not run |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for dtype, causal in itertools.product(DTYPES, [False, True]):
        rs = [r for r in results if r["dtype"] == dtype and r["causal"] == causal]
        n_pass = sum(r["ok"] is True for r in rs)
        n_err = sum(r["ok"] is False and "error" in r for r in rs)
        n_fail = sum(r["ok"] is False and "error" not in r for r in rs)
        n_skip = sum(r["ok"] is None for r in rs)
        lines.append(f"| {dtype} | {causal} | {len(rs)} | {n_pass} | {n_fail} | {n_err} | {n_skip} |")
    lines += ["", "Largest error / allowed over dq, dk, dv by the backward rung that ran:", "",
              "| dtype | backward rung | cases | worst ratio |", "| --- | --- | --- | --- |"]
    for dtype in DTYPES:
        for rung in sorted({r.get("bwd_rung") for r in results if r["dtype"] == dtype and "err_dq" in r}, key=str):
            rs = [r for r in results if r["dtype"] == dtype and r.get("bwd_rung") == rung and "err_dq" in r]
            worst = max(max(r[f"err_{n}"] / r[f"allowed_{n}"] for n in ("dq", "dk", "dv")) for r in rs)
            lines.append(f"| {dtype} | {rung} | {len(rs)} | {worst:.2f} |")
    lines += ["", "Largest error / allowed over o, dq, dk, dv (1.0 would be the limit), by the forward rung that ran:",
              "", "| dtype | forward rung | cases | worst ratio | at |", "| --- | --- | --- | --- | --- |"]
    for dtype in DTYPES:
        for rung in sorted({r.get("rung") for r in results if r["dtype"] == dtype and r["ok"] is not None}, key=str):
            rs = [r for r in results if r["dtype"] == dtype and r.get("rung") == rung and "err_o" in r]
            if rs:
                worst = max(rs, key=worst_ratio)
                at = (f"{worst['heads']} d={worst['d']} Nq={worst['Nq']} Nk={worst['Nk']}"
                      + (" causal" if worst["causal"] else ""))
                lines.append(f"| {dtype} | {rung} | {len(rs)} | {worst_ratio(worst):.2f} | {at} |")
    bad = [r for r in results if r["ok"] is False]
    if bad:
        lines += ["", "Failures (first 40):", ""]
        for r in bad[:40]:
            what = r.get("error") or ", ".join(
                f"{n} {r[f'err_{n}']:.3g}>{r[f'allowed_{n}']:.3g}" for n in ("o", "dq", "dk", "dv")
                if r[f"err_{n}"] > r[f"allowed_{n}"])
            lines.append(f"- {r['dtype']} causal={r['causal']} {r['heads']} d={r['d']} Nq={r['Nq']} Nk={r['Nk']}: {what}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# --tune-bwd: time flash_bwd.backward under several BwdConfigs (the speed protocol's shapes)
# --------------------------------------------------------------------------------------------
BWD_CANDIDATES = {  # (block_m1, block_n1, block_m2, block_n2, num_warps, num_stages)
    64: [(32, 128, 128, 32, 4, 3), (32, 128, 128, 32, 4, 4), (32, 128, 128, 32, 4, 5), (32, 128, 128, 32, 8, 3),
         (64, 128, 128, 64, 8, 2), (64, 128, 128, 64, 8, 3), (32, 64, 64, 32, 4, 3), (64, 64, 64, 64, 4, 3)],
    128: [(32, 128, 128, 32, 8, 2), (32, 128, 128, 32, 4, 2), (32, 128, 128, 32, 4, 3), (32, 128, 128, 32, 4, 4),
          (32, 128, 128, 32, 8, 3), (64, 128, 128, 64, 8, 2), (32, 64, 64, 32, 4, 3), (64, 64, 64, 64, 4, 2)],
}


def _bwd_inputs(d: int, n: int, causal: bool, dtype):
    import torch

    from flashlab.kernels import flash_fwd

    B, H = 16384 // n, 2048 // d  # the speed protocol: B*N = 16384 tokens, H*d = 2048
    q, k, v, do = (torch.randn(B, H, n, d, device="cuda", dtype=dtype) for _ in range(4))  # (B, H, N, d)
    scale = d**-0.5
    o, lse = flash_fwd.forward_v2(q, k, v, causal, scale)
    return (q, k, v, o, lse, do, causal, scale)


def _compile_job(job) -> str:
    import torch

    from flashlab.kernels import flash_bwd

    d, causal, cfg = job
    args = _bwd_inputs(d, 256, causal, torch.bfloat16)
    try:
        flash_bwd.backward(*args, config=flash_bwd.BwdConfig(*cfg))
        torch.cuda.synchronize()
        return "ok"
    except Exception as err:
        return f"{type(err).__name__}: {str(err)[:200]}"


def tune_bwd(json_path: str) -> None:
    import torch
    import triton

    from flashlab.kernels import flash_bwd

    jobs = [(d, c, cfg) for d in BWD_CANDIDATES for c in (False, True) for cfg in BWD_CANDIDATES[d]]
    with mp.get_context("spawn").Pool(8) as pool:  # compile in parallel (cached on disk), time alone
        compiled = dict(zip(jobs, pool.map(_compile_job, jobs)))
    rows = []
    for d, causal in itertools.product(BWD_CANDIDATES, (False, True)):
        for n in (1024, 4096):
            args = _bwd_inputs(d, n, causal, torch.bfloat16)
            B, H = args[0].shape[:2]
            flops = 2.5 * 4 * B * H * n * n * d * (0.5 if causal else 1.0)  # backward = 2.5x forward
            base = flash_bwd.backward(*args, config=flash_bwd.BwdConfig(*BWD_CANDIDATES[d][0]))
            for cfg in BWD_CANDIDATES[d]:
                row = dict(d=d, N=n, causal=causal, config=cfg, compile=compiled[(d, causal, cfg)])
                if row["compile"] == "ok":
                    config = flash_bwd.BwdConfig(*cfg)
                    grads = flash_bwd.backward(*args, config=config)
                    row["max_diff_vs_first"] = max((a.float() - b.float()).abs().max().item() for a, b in zip(grads, base))
                    ms = triton.testing.do_bench(lambda: flash_bwd.backward(*args, config=config),
                                                 warmup=25, rep=100, return_mode="median")
                    row["ms"], row["tflops"] = round(ms, 4), round(flops / ms / 1e9, 1)
                rows.append(row)
                print(row, flush=True)
    with open(json_path, "w") as f:
        json.dump(dict(device=torch.cuda.get_device_name(), dtype="bf16", rows=rows), f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="gpu_sweep.json")
    parser.add_argument("--md", default=None)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--deadline-s", type=float, default=420.0)
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--split-d", action="store_true", help="one job per (dtype, causal, d), not per (dtype, causal)")
    parser.add_argument("--all-pairs", action="store_true", help="every (Nq, Nk) pair for every d, not only d <= 64")
    parser.add_argument("--merge", nargs="+", default=None, help="combine earlier JSON outputs instead of running")
    parser.add_argument("--tune-bwd", action="store_true", help="time backward configs instead (bf16, d 64/128)")
    parser.add_argument("--head-dims", default=",".join(map(str, HEAD_DIMS)), help="head dims to sweep")
    parser.add_argument("--backward-rung", default=None, choices=("bwd_two_pass", "bwd_fused", "bwd_gluon_ws"),
                        help="run every backward through this rung where it applies (default: flash_attention's choice)")
    args = parser.parse_args()
    if args.tune_bwd:
        tune_bwd(args.json)
        return
    if args.merge:
        merge(args.merge, args.json, args.md)
        return
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("gpu_sweep.py checks compiled kernels: unset TRITON_INTERPRET and run on a GPU")
    start = time.time()
    deadline = start + args.deadline_s
    head_dims = [int(d) for d in args.head_dims.split(",")]
    dims = [[d] for d in head_dims] if args.split_d else [head_dims]
    jobs = [(dt, c, ds, deadline, args.all_pairs, args.backward_rung)
            for dt in args.dtypes.split(",") for c in (False, True) for ds in dims]
    with mp.get_context("spawn").Pool(args.workers) as pool:
        results = [r for rs in pool.map(worker, jobs) for r in rs]
    import torch
    import triton

    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
                backward_rung=args.backward_rung or "flash_attention's choice",
                wall_s=round(time.time() - start, 1), rule="err <= 2 * err(PyTorch, same dtype) + floor",
                date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    write(dict(meta=meta, results=results), args.json, args.md)


def write(data: dict, json_path: str, md_path: str | None) -> None:
    with open(json_path, "w") as f:
        json.dump(data, f, separators=(",", ":"))
        f.write("\n")
    summary = summarise(data["results"])
    if md_path:
        with open(md_path, "w") as f:
            f.write(f"# GPU correctness sweep of flash_attention\n\n{json.dumps(data['meta'])}\n\n{summary}\n")
    print(json.dumps(data["meta"]))
    print(summary)


def merge(paths: list[str], json_path: str, md_path: str | None) -> None:
    """Later files win for the cases they ran (keyed by dtype, causal, heads, d, Nq, Nk)."""
    by_case, metas = {}, []
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        metas.extend(data["meta"].get("runs", [data["meta"]]))  # an earlier merge lists its runs
        for r in data["results"]:
            key = (r["dtype"], r["causal"], r["heads"], r["d"], r["Nq"], r["Nk"])
            for name in [n for n in r if n.startswith(("err_", "allowed_"))]:
                r[name] = float(f"{r[name]:.4g}")
            if r["ok"] is not None or key not in by_case:
                by_case[key] = r
    write(dict(meta=dict(runs=metas), results=list(by_case.values())), json_path, md_path)


if __name__ == "__main__":
    main()
