"""Backward rungs, grouped-query attention and Hopper forward configs beside SDPA's cuDNN backend.

Protocol (as ``bench_attention.py``; FlashAttention-2 paper section 4.1): B*N = 16384, H*d = 2048,
TFLOP/s with forward FLOPs = 4*B*H*N^2*d (halved when causal), forward+backward = 3.5 x forward.
GQA rows: B = 1, H = 32, Hkv = 8, d = 128 (cuDNN through ``scaled_dot_product_attention(...,
enable_gqa=True)``). Every contender of a row is first checked on fresh random inputs of the row's
shape (output and gradients of batch 0, the query heads of kv head 0, against float32 attention;
pass when the relative error is at most 2x naive attention's in the same dtype + 1e-4), then all
contenders of the row are timed in ``--rounds`` interleaved rounds (``triton.testing.do_bench``,
median of each, then the median over rounds).

Contenders (``--fwd`` / ``--bwd``, ';'-separated):
  forward:  ``cudnn``, ``flashlab`` (what ``flash_attention`` runs), ``hf:BQ,BK,WARPS,STAGES`` (the
            Hopper rung with that config), ``gl`` / ``gl:BN,NBUF[,CREGS,PREGS,PERSISTENT,GROUP_HEADS]`` (the
            Gluon rung, GQA in the kernel, default or that ``GluonConfig``; PERSISTENT 1: one program
            per SM looping over tiles, GROUP_HEADS: tile order by groups of heads, heaviest first), ``gx`` (the Gluon rung on k, v expanded to H heads)
  fwd+bwd:  ``cudnn``, ``flashlab`` (through autograd; ``flashlab:1s`` with its dQ kernel on
            the one stream), ``tp`` / ``tp:BM1,BN1,BM2,BN2,W,S[,DQW,DQS]``
            (forward rung + the two-pass backward; ``,cc`` or ``tp:cc``: its dQ kernel on a second
            stream), ``fu`` / ``fu:BM,BN,W,S[,tma]`` (forward rung + the one-pass backward with
            atomic dQ; ``tma``: the copy engine's tile reduction), ``gw`` / ``gw:NBUF[,d|keys][,tma|atomic][,late][,lag][,hf][,gG][,rows][,one]``
            (forward rung + the warp-specialised Gluon backward, default or that config; ``late``: dQ's
            product after dK's and dV's are waited for; ``lag``: dQ a step behind; ``hf``: heavy key
            blocks first; ``gG``: heavy key blocks first within groups of G heads, ``g0`` as many heads
            as fill the SMs; ``rows``: lse_i and D_i staged in shared memory by the producer; ``one``:
            masked and unmasked steps in one loop)

    python benchmarks/bench_backward.py --rows protocol --head-dims 128 --seq-lens 4096 16384
    python benchmarks/bench_backward.py --rows gqa --seq-lens 2048 8192
    python benchmarks/bench_backward.py --cancellation        # dK, dQ where a query sees one key
    python benchmarks/bench_backward.py --dry-run
"""
from __future__ import annotations

import argparse
import contextlib
import math
from dataclasses import replace
import os
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

TOKENS, MODEL_DIM = 16384, 2048
AUTOGRAD = ("cudnn", "flashlab", "flashlab:1s")  # fwd+bwd contenders that run through autograd (inputs need grad)
PROFILE_HOST = False  # --profile-host: cProfile each contender's host path (results: host_profile)
PROTOCOL = {
    "rows": "protocol: B = 16384 // N, H = 2048 // d, Hkv = H; gqa: B = 1, H = 32, Hkv = 8, d = 128",
    "flops_forward": "4*B*H*N^2*d, halved when causal", "flops_forward_backward": "3.5 x forward",
    "time": "median over --rounds interleaved rounds of the median of triton.testing.do_bench(warmup=20, rep=60)",
    "correctness": "fresh random inputs; batch 0, the query heads of kv head 0 vs float32 attention; "
                   "rel. error <= 2 x naive-in-dtype + 1e-4, output and dq, dk, dv",
    "baseline": "torch SDPA with SDPBackend.CUDNN_ATTENTION only (enable_gqa=True when Hkv < H)",
}


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", choices=("protocol", "gqa", "short"), default="protocol")
    p.add_argument("--dtypes", nargs="*", default=["bfloat16"])
    p.add_argument("--head-dims", nargs="*", type=int, default=[64, 128])
    p.add_argument("--seq-lens", nargs="*", type=int, default=[2048, 4096, 8192, 16384])
    p.add_argument("--causal", nargs="*", type=int, choices=(0, 1), default=[0, 1])
    p.add_argument("--fwd", default="cudnn;flashlab", help="forward contenders, ';'-separated")
    p.add_argument("--bwd", default="cudnn;tp;fu", help="fwd+bwd contenders, ';'-separated ('' for none)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cancellation", action="store_true", help="only the one-visible-key gradient check")
    p.add_argument("--precompile", type=int, default=0, help="compile every contender first in N processes")
    p.add_argument("--precompile-only", action="store_true", help="with --precompile: compile, time nothing")
    p.add_argument("--profile-host", action="store_true", help="record each contender's top host functions")
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--out", type=Path, default=_common.REPO / "benchmarks" / "results" / "bench_backward.json")
    return p.parse_args(argv)


def rows_for(args) -> list[dict]:
    rows = []
    for dt in args.dtypes:
        for n in args.seq_lens:
            for c in args.causal:
                if args.rows == "gqa":
                    rows.append(dict(dtype=dt, d=128, n=n, causal=bool(c), b=1, h=32, hkv=8))
                    continue
                for d in args.head_dims:
                    rows.append(dict(dtype=dt, d=d, n=n, causal=bool(c), b=TOKENS // n, h=MODEL_DIM // d,
                                     hkv=MODEL_DIM // d))
    return rows


def fwd_flops(row) -> float:
    flops = 4.0 * row["b"] * row["h"] * row["n"] ** 2 * row["d"]
    return flops / 2 if row["causal"] else flops


# ---------------------------------------------------------------- contenders

def _ints(text):
    return [int(x) for x in text.split(",") if x.strip() and x.strip() != "tma"]


def forward_fn(name: str):
    """(q, k, v, spec) -> o for a forward contender name."""
    from flashlab.kernels import attention, flash_fwd_hopper as hopper

    if name == "cudnn":
        return _cudnn
    if name == "flashlab":
        return lambda q, k, v, spec: attention.best_forward(q, k, v, spec)[0]
    if name == "gx":  # the Gluon rung on k, v expanded to H heads (what an expanding GQA would run)
        from flashlab.kernels import flash_fwd_gluon as gluon

        def expanded(q, k, v, spec):
            group = q.shape[1] // k.shape[1]
            k, v = (t.repeat_interleave(group, dim=1) for t in (k, v))  # (B, H, Nk, d)
            return gluon.forward(q, k, v, spec.replace(group=1), spec.scale, checked=True)[0]

        return expanded
    if name == "gl" or name.startswith("gl:"):  # the Gluon rung, kv head indexed in the kernel
        from flashlab.kernels import flash_fwd_gluon as gluon

        gcfg = gluon.GluonConfig(*_ints(name[3:])) if name.startswith("gl:") else None
        return lambda q, k, v, spec: gluon.forward(q, k, v, spec, spec.scale, gcfg, checked=True)[0]
    if name.startswith("hf:"):
        cfg = hopper.HopperConfig(*_ints(name[3:]))
        return lambda q, k, v, spec: hopper.forward(q, k, v, spec, None, cfg, checked=True)[0]
    raise SystemExit(f"--fwd: unknown contender {name!r}; expected cudnn, flashlab, gl[:BN,NBUF[,CREGS,PREGS,PERSISTENT,GROUP_HEADS]], gx or hf:BQ,BK,W,S")


def backward_fn(name: str):
    """(q, k, v, o, lse, do, spec) -> (dq, dk, dv) for a backward contender name (tp..., fu...)."""
    from flashlab.kernels import flash_bwd, flash_bwd_hopper

    if name == "tp" or name.startswith("tp:"):
        text = name[3:]
        concurrent = text.endswith("cc")  # the dQ kernel on a second stream
        ints = _ints(text.replace("cc", ""))

        def two_pass(q, k, v, o, lse, do, spec):
            cfg = (flash_bwd.BwdConfig(*ints[:4], *ints[4:6], 128, *ints[6:]) if ints
                   else flash_bwd.default_bwd_config(flash_bwd.head_dim_padded(q.shape[3]), q.dtype))
            return flash_bwd.backward(q, k, v, o, lse, do, spec, config=replace(cfg, concurrent=concurrent))

        return two_pass
    if name == "fu" or name.startswith("fu:"):
        cfg = None if name == "fu" else flash_bwd_hopper.FusedBwdConfig(*_ints(name[3:]), tma_reduce="tma" in name)
        return lambda q, k, v, o, lse, do, spec: flash_bwd_hopper.backward(q, k, v, o, lse, do, spec, config=cfg)
    if name == "gw" or name.startswith("gw:"):
        from flashlab.kernels import flash_bwd_gluon

        cfg = None
        if name.startswith("gw:"):
            parts = name[3:].split(",")
            cfg = flash_bwd_gluon.GluonBwdConfig(
                int(parts[0]), next((p for p in parts[1:] if p in ("d", "keys")), ""),
                next((p for p in parts[1:] if p in ("tma", "atomic")), flash_bwd_gluon.default_config(128).dq_reduce),
                early_dq="late" not in parts, lag_dq="lag" in parts, heavy_first="hf" in parts,
                head_group=next((int(p[1:]) for p in parts[1:] if p[:1] == "g" and p[1:].isdigit()), 1),
                rows_in_smem="rows" in parts, one_loop="one" in parts)
        return lambda q, k, v, o, lse, do, spec: flash_bwd_gluon.backward(q, k, v, o, lse, do, spec, config=cfg)
    raise SystemExit(f"--bwd: unknown contender {name!r}")


def _cudnn(q, k, v, spec):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        return F.scaled_dot_product_attention(q, k, v, is_causal=spec.causal, scale=spec.scale,
                                              enable_gqa=k.shape[1] != q.shape[1])


def step_fn(name: str):
    """(q, k, v, do, spec) -> grads: one forward+backward of contender ``name``."""
    import torch

    if name in AUTOGRAD:
        from flashlab.kernels import flash_bwd
        from flashlab.kernels.attention import flash_attention

        fwd = _cudnn if name == "cudnn" else (lambda q, k, v, spec: flash_attention(q, k, v, spec.causal, spec.scale))
        rule = flash_bwd.concurrent_dq

        def step(q, k, v, do, spec):
            if name == "flashlab:1s":  # the library path with its dQ kernel on the one stream
                flash_bwd.concurrent_dq = lambda *args: False
            try:
                return torch.autograd.grad(fwd(q, k, v, spec), (q, k, v), do)
            finally:
                flash_bwd.concurrent_dq = rule

        return step
    from flashlab.kernels.attention import best_forward

    bwd = backward_fn(name)

    def step(q, k, v, do, spec):
        o, lse = best_forward(q, k, v, spec)
        return bwd(q, k, v, o, lse, do, spec)

    return step


# ---------------------------------------------------------------- check and time

def make_inputs(row, seed, grad=False):
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    dt = getattr(torch, row["dtype"])
    q = torch.randn(row["b"], row["h"], row["n"], row["d"], device="cuda", generator=g, dtype=dt)  # (B, H, N, d)
    k, v = (torch.randn(row["b"], row["hkv"], row["n"], row["d"], device="cuda", generator=g, dtype=dt)
            for _ in range(2))  # (B, Hkv, N, d)
    do = torch.randn(q.shape, device="cuda", generator=g, dtype=dt)  # (B, H, N, d)
    return [t.requires_grad_(grad) for t in (q, k, v)] + [do]


def spec_of(row):
    from flashlab.attnspec import AttnSpec

    return AttnSpec(causal=row["causal"], scale=1.0 / math.sqrt(row["d"]), group=row["h"] // row["hkv"])


def check(row, kind, name, seed) -> dict:
    """Fresh inputs; output (and gradients) of batch 0, kv head 0's query heads vs float32."""
    import torch

    q, k, v, do = make_inputs(row, seed, grad=(kind == "bwd" and name in AUTOGRAD))
    spec, group = spec_of(row), row["h"] // row["hkv"]
    sl_q, sl_kv = (slice(0, 1), slice(0, group)), (slice(0, 1), slice(0, 1))
    leaves = [q.detach()[sl_q].float(), k.detach()[sl_kv].float(), v.detach()[sl_kv].float()]
    ref_leaves = [t.clone().requires_grad_() for t in leaves]
    naive_leaves = [t.to(q.dtype).requires_grad_() for t in leaves]
    ref = _common.naive_attention(ref_leaves[0], *(t.repeat_interleave(group, 1) for t in ref_leaves[1:]),
                                  row["causal"], spec.scale)
    naive = _common.naive_attention(naive_leaves[0], *(t.repeat_interleave(group, 1) for t in naive_leaves[1:]),
                                    row["causal"], spec.scale)
    res = {"naive_fwd_err": _common.rel_err(naive, ref)}
    if kind == "fwd":
        with torch.no_grad():
            o = forward_fn(name)(q, k, v, spec)
        res["fwd_err"] = _common.rel_err(o[sl_q], ref)
        res["status"] = "ok" if res["fwd_err"] <= 2 * res["naive_fwd_err"] + 1e-4 else "wrong"
        return res
    grads = step_fn(name)(q, k, v, do, spec)
    ref_grads = torch.autograd.grad(ref, ref_leaves, do[sl_q].float())
    naive_grads = torch.autograd.grad(naive, naive_leaves, do[sl_q])
    sls = (sl_q, sl_kv, sl_kv)
    res["grad_err"] = {n: _common.rel_err(g[s], r) for n, g, s, r in zip(("dq", "dk", "dv"), grads, sls, ref_grads)}
    res["naive_grad_err"] = {n: _common.rel_err(g, r) for n, g, r in zip(("dq", "dk", "dv"), naive_grads, ref_grads)}
    ok = all(res["grad_err"][n] <= 2 * res["naive_grad_err"][n] + 1e-4 for n in ("dq", "dk", "dv"))
    res["status"] = "ok" if ok else "wrong"
    return res


def bench_ms(fn) -> float:
    import triton

    return float(triton.testing.do_bench(fn, warmup=20, rep=60, return_mode="median"))


def host_time(f, key, tensors, spec, calls: int = 30) -> tuple[float, float]:
    """(host, wall) microseconds per call over ``calls`` back-to-back calls: host until the last
    call returns (nothing waits for the GPU), wall until the GPU is done. host >= the GPU's time:
    the row measures the launch path, not the kernels."""
    import torch

    q, k, v, do = tensors
    run = (lambda: f(q, k, v, spec)) if key == "fwd" else (lambda: f(q, k, v, do, spec))
    with torch.no_grad() if key == "fwd" else contextlib.nullcontext():
        issue, wall = _common.issue_and_wall_us(run, calls, warmup=3)
    return round(issue, 1), round(wall, 1)


def host_profile(f, key, tensors, spec, calls: int = 30, top: int = 25) -> list[str]:
    """The ``top`` functions by own host time over ``calls`` calls (cProfile), one line each."""
    import cProfile
    import io
    import pstats

    import torch

    q, k, v, do = tensors
    run = (lambda: f(q, k, v, spec)) if key == "fwd" else (lambda: f(q, k, v, do, spec))
    prof = cProfile.Profile()
    with torch.no_grad() if key == "fwd" else contextlib.nullcontext():
        prof.enable()
        for _ in range(calls):
            run()
        prof.disable()
        torch.cuda.synchronize()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(top)
    return [line for line in text.getvalue().splitlines() if line.strip()][-top - 1:]


def run_row(row, fwd_names, bwd_names, rounds) -> dict:
    import torch

    spec, flops = spec_of(row), fwd_flops(row)
    out = {**row, "flops_fwd": flops, "fwd": {}, "fwdbwd": {}}
    try:
        from flashlab.kernels import ladder

        # the row's own shape: which rung runs depends on the work (B * H heads), not only on N and d
        probe = torch.empty(row["b"], row["h"], row["n"], row["d"], device="cuda", dtype=getattr(torch, row["dtype"]))
        kprobe = probe[:, : row["hkv"]]
        out["flashlab_forward_rung"] = ladder.choose(probe, kprobe, kprobe, spec)
        out["flashlab_backward_rung"] = ladder.choose_backward(probe, kprobe, spec)
    except Exception as exc:  # noqa: BLE001
        out["flashlab_forward_rung"] = f"unknown: {exc!r}"[:200]
    timers = []
    for kind, names in (("fwd", fwd_names), ("bwd", bwd_names)):
        for i, name in enumerate(names):
            key = "fwd" if kind == "fwd" else "fwdbwd"
            try:
                res = check(row, kind, name, seed=1000 + 17 * i + len(kind))
            except Exception as exc:  # noqa: BLE001
                res = {"status": "error", "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
                traceback.print_exc(limit=2)
            res["ms_rounds"] = []
            out[key][name] = res
            torch.cuda.empty_cache()
            if res["status"] == "ok":
                timers.append((key, name, res))
    q, k, v, do = make_inputs(row, seed=7, grad=True)
    for _ in range(rounds):
        for key, name, res in timers:
            try:
                if key == "fwd":
                    f = forward_fn(name)
                    with torch.no_grad():
                        res["ms_rounds"].append(bench_ms(lambda: f(q, k, v, spec)))
                else:
                    f = step_fn(name)
                    res["ms_rounds"].append(bench_ms(lambda: f(q, k, v, do, spec)))
            except Exception as exc:  # noqa: BLE001
                res["status"], res["error"] = "error", f"{type(exc).__name__}: {str(exc)[:300]}"
    for key, name, res in timers:  # the host's time per call, to tell launch-bound rows apart
        if res["status"] == "ok":
            try:
                res["host_us"], res["wall_us"] = host_time(forward_fn(name) if key == "fwd" else step_fn(name),
                                                           key, (q, k, v, do), spec)
                if PROFILE_HOST and name != "cudnn":
                    res["host_profile"] = host_profile(forward_fn(name) if key == "fwd" else step_fn(name),
                                                       key, (q, k, v, do), spec)
            except Exception as exc:  # noqa: BLE001
                res["host_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    for key, name, res in timers:
        if res["ms_rounds"]:
            res["ms"] = statistics.median(res["ms_rounds"])
            res["tflops"] = (flops if key == "fwd" else 3.5 * flops) / res["ms"] / 1e9
    for key in ("fwd", "fwdbwd"):
        base = out[key].get("cudnn", {}).get("tflops")
        for name, res in out[key].items():
            if base and res.get("tflops"):
                res["ratio_cudnn"] = round(res["tflops"] / base, 3)
    return out


def fmt(row) -> str:
    head = (f"{row['dtype'][:4]} d{row['d']} N{row['n']} c{int(row['causal'])} B{row['b']} H{row['h']}/{row['hkv']}"
            f" [{row.get('flashlab_forward_rung')}, {row.get('flashlab_backward_rung')}]")
    parts = []
    for key in ("fwd", "fwdbwd"):
        for name, res in row[key].items():
            val = f"{res['tflops']:.0f} ({res.get('ratio_cudnn', 0):.2f})" if res.get("tflops") else res["status"]
            if "host_us" in res:
                val += f" [{res.get('ms', 0) * 1e3:.0f} us GPU, host {res['host_us']:.0f} us/call]"
            parts.append(f"{key}:{name}={val}")
    return head + "\n    " + "\n    ".join(parts)


# ---------------------------------------------------------------- the one-visible-key case

def cancellation() -> list[dict]:
    """max |dK|, |dQ| where the only query sees one key (exactly 0), per rung, dtype and d."""
    import torch

    from flashlab.attnspec import AttnSpec
    from flashlab.kernels import ladder
    from flashlab.kernels.attention import attention_reference, best_forward

    out = []
    spec = AttnSpec(causal=True)
    for dt in (torch.float16, torch.bfloat16):
        for d in (64, 80, 128):
            for seed in range(2):
                g = torch.Generator(device="cuda").manual_seed(100 * d + seed)
                q, do = (torch.randn(1, 2, 1, d, device="cuda", generator=g, dtype=dt) for _ in range(2))
                k, v = (torch.randn(1, 2, 239, d, device="cuda", generator=g, dtype=dt) for _ in range(2))
                o, lse = best_forward(q, k, v, spec)
                leaves = [t.clone().requires_grad_() for t in (q, k, v)]
                attention_reference(*leaves, causal=True, upcast=False).backward(do)
                entry = {"dtype": str(dt), "d": d, "seed": seed,
                         "torch_same_dtype": {"dk": leaves[1].grad.abs().max().item(),
                                              "dq": leaves[0].grad.abs().max().item()}}
                for rung in ladder.BWD_RUNGS:
                    if ladder.resolve_backward(rung, q, k, spec) != rung:
                        continue
                    dq, dk, _ = ladder.run_backward(rung, q, k, v, o, lse, do, spec)
                    entry[rung] = {"dk": dk.double().abs().max().item(), "dq": dq.double().abs().max().item()}
                out.append(entry)
                print("[cancel]", entry, flush=True)
    return out


# ---------------------------------------------------------------- precompiling in parallel

def _precompile_one(job):
    """Run one contender once on its row's shape (compiling its kernels into Triton's disk cache)."""
    import torch

    row, kind, name = job
    t0 = time.time()
    try:
        q, k, v, do = make_inputs(row, seed=3, grad=(kind == "bwd" and name in AUTOGRAD))
        if kind == "fwd":
            with torch.no_grad():
                forward_fn(name)(q, k, v, spec_of(row))
        else:
            step_fn(name)(q, k, v, do, spec_of(row))
        torch.cuda.synchronize()
        return f"{kind}:{name} {time.time() - t0:.1f} s"
    except Exception as exc:  # noqa: BLE001  (the check in the main process records it)
        return f"{kind}:{name} failed: {type(exc).__name__}: {str(exc)[:200]}"


def precompile(rows, fwd_names, bwd_names, workers) -> list[str]:
    """Run every contender once in ``workers`` processes, so its Triton kernels are compiled in
    parallel into the disk cache and the timing process only loads them."""
    import multiprocessing as mp

    # one job per kernel set: a backward rung's rows that differ only in N (each a multiple of 16) share
    # its compiled kernels (their forward is the 'flashlab' forward's, compiled per row); the library
    # path and the forwards choose kernels by N, so they keep a job per row
    jobs = {}
    for row in sorted(rows, key=lambda r: r["n"]):
        for kind, names in (("fwd", fwd_names), ("bwd", bwd_names)):
            for name in names:
                per_n = row["n"] if kind == "fwd" or name in AUTOGRAD or row["n"] % 16 else 0
                key = (kind, name, row["dtype"], row["d"], row["causal"], row["h"] // row["hkv"], per_n)
                if name != "cudnn" and key not in jobs:
                    jobs[key] = (row, kind, name)
    jobs = list(jobs.values())
    with mp.get_context("spawn").Pool(workers) as pool:
        return pool.map(_precompile_one, jobs, chunksize=1)


def main(argv=None) -> int:
    global PROFILE_HOST
    args = parse(argv)
    PROFILE_HOST = args.profile_host
    rows = rows_for(args)
    fwd_names = [x.strip() for x in args.fwd.split(";") if x.strip()]
    bwd_names = [x.strip() for x in args.bwd.split(";") if x.strip()]
    if args.dry_run:
        print(f"{len(rows)} rows; forward {fwd_names}; forward+backward {bwd_names}; {args.rounds} rounds")
        for row in rows:
            print("  ", row)
        return 0
    why = _common.timing_refusal()
    if why:
        print(f"bench_backward: refusing to time: {why}", file=sys.stderr)
        return 2
    payload = {"environment": _common.environment(), "protocol": PROTOCOL, "argv": sys.argv[1:]}
    if args.cancellation:
        payload["cancellation"] = cancellation()
        _common.write_json(args.out, payload)
        return 0
    t0 = time.time()
    if args.precompile:
        payload["precompile"] = precompile(rows, fwd_names, bwd_names, args.precompile)
        payload["precompile_s"] = round(time.time() - t0, 1)
        print(f"[bench] precompiled in {payload['precompile_s']} s: {payload['precompile']}", flush=True)
        if args.precompile_only:
            return 0
    payload["rows"] = []
    for row in rows:
        res = run_row(row, fwd_names, bwd_names, args.rounds)
        payload["rows"].append(res)
        payload["elapsed_s"] = round(time.time() - t0, 1)
        _common.write_json(args.out, payload)
        print(fmt(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
