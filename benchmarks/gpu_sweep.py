"""Correctness sweep of flashlab.flash_attention on a CUDA GPU (issue 3), forward and backward.

dtype {fp16, bf16, fp32} x causal x heads {MHA, GQA, MQA} x d {16, 40, 64, 80, 96, 128, 256} x
(Nq, Nk) from {1, 17, 128, 1000, 4096}: every pair for d <= 64, the diagonal plus five lopsided
pairs for larger d. Each case draws fresh random inputs, poisons every kernel output with NaN
(FLASHLAB_POISON=1, so an unwritten element fails), and applies the flash-attention rule to o,
dq, dk and dv: max error vs the float64 reference <= 2 x that of PyTorch in the same dtype + floor
(``flashlab.kernels.attention.allowed_error``). v3 runs its default config (FLASHLAB_AUTOTUNE=0):
autotuning every shape would cost more compile time than the sweep has; tests/test_flash_gpu.py
autotunes a few.

Usage (GPU machine): PYTHONPATH=src python3 benchmarks/gpu_sweep.py --json OUT.json --md OUT.md
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


def cases(dtype: str, causal: bool, head_dims=HEAD_DIMS) -> list[dict]:
    out = []
    for d in head_dims:
        if d <= 64:
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
    record = dict(case, B=B, seed=seed, rung=ladder.best_rung(q, k, v, causal))  # the forward that runs
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
    dtype, causal, head_dims, deadline = args
    os.environ["FLASHLAB_POISON"] = "1"
    os.environ["FLASHLAB_AUTOTUNE"] = "0"
    results = []
    todo = cases(dtype, causal, head_dims)
    random.Random(0).shuffle(todo)  # a sweep cut short by the deadline still samples every d and length
    for case in todo:
        if time.time() > deadline:
            results.append(dict(case, ok=None, error="not run: deadline"))
            continue
        results.append(run_case(case))
    return results


def summarise(results: list[dict]) -> str:
    lines = ["| dtype | causal | cases | pass | fail | error | not run |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for dtype, causal in itertools.product(DTYPES, [False, True]):
        rs = [r for r in results if r["dtype"] == dtype and r["causal"] == causal]
        n_pass = sum(r["ok"] is True for r in rs)
        n_err = sum(r["ok"] is False and "error" in r for r in rs)
        n_fail = sum(r["ok"] is False and "error" not in r for r in rs)
        n_skip = sum(r["ok"] is None for r in rs)
        lines.append(f"| {dtype} | {causal} | {len(rs)} | {n_pass} | {n_fail} | {n_err} | {n_skip} |")
    bad = [r for r in results if r["ok"] is False]
    if bad:
        lines += ["", "Failures (first 40):", ""]
        for r in bad[:40]:
            what = r.get("error") or ", ".join(
                f"{n} {r[f'err_{n}']:.3g}>{r[f'allowed_{n}']:.3g}" for n in ("o", "dq", "dk", "dv")
                if r[f"err_{n}"] > r[f"allowed_{n}"])
            lines.append(f"- {r['dtype']} causal={r['causal']} {r['heads']} d={r['d']} Nq={r['Nq']} Nk={r['Nk']}: {what}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default="gpu_sweep.json")
    parser.add_argument("--md", default=None)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--deadline-s", type=float, default=420.0)
    parser.add_argument("--dtypes", default=",".join(DTYPES))
    parser.add_argument("--split-d", action="store_true", help="one job per (dtype, causal, d), not per (dtype, causal)")
    parser.add_argument("--merge", nargs="+", default=None, help="combine earlier JSON outputs instead of running")
    args = parser.parse_args()
    if args.merge:
        merge(args.merge, args.json, args.md)
        return
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("gpu_sweep.py checks compiled kernels: unset TRITON_INTERPRET and run on a GPU")
    start = time.time()
    deadline = start + args.deadline_s
    dims = [[d] for d in HEAD_DIMS] if args.split_d else [HEAD_DIMS]
    jobs = [(dt, c, ds, deadline) for dt in args.dtypes.split(",") for c in (False, True) for ds in dims]
    with mp.get_context("spawn").Pool(args.workers) as pool:
        results = [r for rs in pool.map(worker, jobs) for r in rs]
    import torch
    import triton

    meta = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, triton=triton.__version__,
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
        metas.append(data["meta"])
        for r in data["results"]:
            key = (r["dtype"], r["causal"], r["heads"], r["d"], r["Nq"], r["Nk"])
            for name in [n for n in r if n.startswith(("err_", "allowed_"))]:
                r[name] = float(f"{r[name]:.4g}")
            if r["ok"] is not None or key not in by_case:
                by_case[key] = r
    write(dict(meta=dict(runs=metas), results=list(by_case.values())), json_path, md_path)


if __name__ == "__main__":
    main()
