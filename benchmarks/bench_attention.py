"""Time flashlab's attention kernels beside PyTorch's on one GPU (the FlashAttention-2 paper's protocol).

Protocol (FlashAttention-2 paper section 4.1, also benchmarks/anchors/README.md):
bf16 and fp16; B*N = 16384 tokens; H*d = 2048; d in {64, 128}; N in {512, ..., 16384};
causal and not; forward and forward+backward. TFLOP/s with forward FLOPs = 4*B*H*N^2*d (halved
when causal) and forward+backward = 3.5 x forward. Time = median of triton.testing.do_bench after
its warm-up (do_bench clears the L2 cache before every run, and one set of q, k, v here is
3 * 16384 * 2048 * 2 B = 201 MB, over 3x the H200's 60 MiB L2, so no input rotation is needed).

Every variant is checked on fresh random inputs of the row's shape before it is timed: its
output on (batch 0, heads 0-1) against float32 attention, passing when its error is at most
2x the error of naive PyTorch attention in the same dtype (+1e-4) -- the flash-attention tests'
rule. A variant that fails is recorded with its error and not timed.

Variants: SDPA with exactly one backend (FLASH_ATTENTION = FlashAttention-2, CUDNN_ATTENTION,
EFFICIENT_ATTENTION), naive PyTorch attention, ``flashlab.kernels.attention.flash_attention``
(forward and forward+backward), the Hopper rung ``flash_fwd_hopper`` (forward), the warp-specialised
Gluon rung ``flash_fwd_gluon`` (forward), and every rung of ``flashlab.kernels.ladder`` (forward).

    python benchmarks/bench_attention.py                 # the full protocol -> results/bench_attention.json
    python benchmarks/bench_attention.py --quick         # d=128, N in {1024, 8192}, bf16
    python benchmarks/bench_attention.py --sweep         # Hopper rung config sweep -> results/hopper_sweep.json
    python benchmarks/bench_attention.py --dry-run       # print the plan; needs no GPU
    ncu --clock-control none --profile-from-start off python benchmarks/bench_attention.py \
        --short-profile "flashlab;cudnn;hf:64,64,4,3"   # one call each at N = 1024 causal, for Nsight Compute
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

TOKENS = 16384  # B * N
MODEL_DIM = 2048  # H * d
HEAD_DIMS = (64, 128)
SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
DTYPES = ("bfloat16", "float16")
SDPA_BACKENDS = {"sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION",
                 "sdpa_efficient": "EFFICIENT_ATTENTION"}
SLOW_MS = 2000.0  # one call slower than this is timed once, not through do_bench

PROTOCOL = {
    "tokens_B_times_N": TOKENS,
    "model_dim_H_times_d": MODEL_DIM,
    "flops_forward": "4*B*H*N^2*d, halved when causal",
    "flops_forward_backward": "3.5 x forward",
    "time": "median of triton.testing.do_bench(warmup=20 ms, rep=60 ms), L2 cleared between runs",
    "correctness": "each variant on fresh random inputs of the row's shape; (batch 0, heads 0-1) vs "
                   "float32 attention; pass when rel. error <= 2 x naive-in-dtype error + 1e-4",
    "causal": "top-left aligned, as SDPA is_causal=True",
    "source": "FlashAttention-2 paper section 4.1; benchmarks/anchors/README.md",
}


def rows_for(args):
    """(dtype, d, N, causal) for every row the run will time."""
    dtypes = args.dtypes or (("bfloat16",) if args.quick else DTYPES)
    head_dims = args.head_dims or ((128,) if args.quick else HEAD_DIMS)
    seq_lens = args.seq_lens or ((1024, 8192) if args.quick else SEQ_LENS)
    return [(dt, d, n, c) for dt in dtypes for d in head_dims for n in seq_lens for c in (False, True)]


def fwd_flops(batch: int, heads: int, n: int, d: int, causal: bool) -> float:
    flops = 4.0 * batch * heads * n * n * d
    return flops / 2 if causal else flops


# ---------------------------------------------------------------- the variants

def load_variants(args) -> dict:
    """name -> {"fwd": f(q, k, v, causal, scale) -> o, "bwd": bool, "supports": f or None}."""
    out = {}
    out["naive"] = {"fwd": _common.naive_attention, "bwd": True, "supports": None}
    for name, backend in SDPA_BACKENDS.items():
        out[name] = {"fwd": _common.sdpa(backend), "bwd": True, "supports": None}
    try:
        from flashlab.kernels.attention import flash_attention

        out["flashlab"] = {"fwd": lambda q, k, v, c, s: flash_attention(q, k, v, causal=c, scale=s),
                           "bwd": True, "supports": None}
    except Exception as exc:  # noqa: BLE001  (another helper's module may not exist yet)
        print(f"[bench] flashlab.kernels.attention unavailable: {exc!r}")
    try:
        from flashlab.kernels import flash_fwd_hopper as hopper

        out["hopper"] = {"fwd": lambda q, k, v, c, s: hopper.forward(q, k, v, c, s)[0],
                         "bwd": False, "supports": hopper.supports}
    except Exception as exc:  # noqa: BLE001
        print(f"[bench] flash_fwd_hopper unavailable: {exc!r}")
    try:
        from flashlab.kernels import flash_fwd_gluon as gluon

        out["gluon"] = {"fwd": lambda q, k, v, c, s: gluon.forward(q, k, v, c, s)[0],
                        "bwd": False, "supports": gluon.supports}
    except Exception as exc:  # noqa: BLE001
        print(f"[bench] flash_fwd_gluon unavailable: {exc!r}")
    if not args.no_ladder:
        for name, fn in ladder_rungs().items():
            out[f"rung:{name}"] = {"fwd": (lambda f: lambda q, k, v, c, s: f(q, k, v, c, s)[0])(fn),
                                   "bwd": False, "supports": None}
    if args.variants:
        out = {k: v for k, v in out.items() if k in args.variants or k.split(":")[0] in args.variants}
    return out


def ladder_rungs() -> dict:
    """The rung registry of flashlab.kernels.ladder (name -> forward), whatever it is called."""
    try:
        from flashlab.kernels import ladder
    except Exception as exc:  # noqa: BLE001
        print(f"[bench] flashlab.kernels.ladder unavailable: {exc!r}")
        return {}
    for attr in ("RUNGS", "LADDER", "rungs", "ladder", "REGISTRY"):
        reg = getattr(ladder, attr, None)
        if isinstance(reg, dict) and reg:
            break
    else:
        reg = {k: v for k, v in vars(ladder).items() if k.startswith("v") and callable(v)}
    rungs = {}
    for name, entry in reg.items():
        fn = entry if callable(entry) else getattr(entry, "forward", None)
        if callable(fn):
            rungs[str(name)] = fn
    return rungs


# ---------------------------------------------------------------- check and time

def make_inputs(batch, heads, n, d, dtype, requires_grad=False):
    import torch

    shape = (batch, heads, n, d)  # (B, H, N, d)
    return [torch.randn(shape, device="cuda", dtype=dtype).requires_grad_(requires_grad) for _ in range(3)]


def check(variant: dict, batch, heads, n, d, dtype, causal, scale) -> dict:
    """Fresh random inputs; the variant's output (and grads) on a slice vs float32."""
    import torch

    q, k, v = make_inputs(batch, heads, n, d, dtype, requires_grad=variant["bwd"])
    sl = (slice(0, 1), slice(0, min(2, heads)))
    qs, ks, vs = (x.detach()[sl].clone().requires_grad_(variant["bwd"]) for x in (q, k, v))
    ref = _common.reference(qs, ks, vs, causal, scale)  # (1, 2, N, d) float32
    with torch.no_grad():
        base = _common.rel_err(_common.naive_attention(qs, ks, vs, causal, scale), ref)
    res = {"naive_fwd_err": base}
    if variant["supports"] is not None and not variant["supports"](q, k, v, causal):
        res["status"] = "unsupported"
        return res
    if variant["bwd"]:
        o = variant["fwd"](q, k, v, causal, scale)
    else:
        with torch.no_grad():
            o = variant["fwd"](q, k, v, causal, scale)
    res["fwd_err"] = _common.rel_err(o[sl], ref)
    ok = res["fwd_err"] <= 2 * base + 1e-4
    if variant["bwd"]:
        do = torch.randn_like(o)
        grads = torch.autograd.grad(o, (q, k, v), do)
        ref_grads = torch.autograd.grad(ref, (qs, ks, vs), do[sl].float())
        naive_o = _common.naive_attention(qs, ks, vs, causal, scale)
        naive_grads = torch.autograd.grad(naive_o, (qs, ks, vs), do[sl])
        res["grad_err"] = max(_common.rel_err(g[sl], r) for g, r in zip(grads, ref_grads))
        res["naive_grad_err"] = max(_common.rel_err(g, r) for g, r in zip(naive_grads, ref_grads))
        ok = ok and res["grad_err"] <= 2 * res["naive_grad_err"] + 1e-4
    res["status"] = "ok" if ok else "wrong"
    return res


def bench_ms(fn) -> float:
    """Median ms of fn; a very slow fn is timed once (after one warm-up call)."""
    import torch
    import triton

    fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    once = (time.perf_counter() - t0) * 1e3
    if once > SLOW_MS:
        return once
    return float(triton.testing.do_bench(fn, warmup=20, rep=60, return_mode="median"))


def time_variant(variant, batch, heads, n, d, dtype, causal, scale, do_bwd) -> dict:
    import torch

    res = {}
    q, k, v = make_inputs(batch, heads, n, d, dtype)
    with torch.no_grad():
        res["fwd_ms"] = bench_ms(lambda: variant["fwd"](q, k, v, causal, scale))
    if do_bwd and variant["bwd"]:
        for x in (q, k, v):
            x.requires_grad_(True)
        do = torch.randn_like(q)

        def step():
            o = variant["fwd"](q, k, v, causal, scale)
            torch.autograd.grad(o, (q, k, v), do)

        res["fwdbwd_ms"] = bench_ms(step)
    return res


def run_row(variants, dtype_name, d, n, causal, do_bwd, ladder_dtypes=DTYPES) -> dict:
    import torch

    dtype = getattr(torch, dtype_name)
    batch, heads = TOKENS // n, MODEL_DIM // d
    scale = 1.0 / math.sqrt(d)
    flops = fwd_flops(batch, heads, n, d, causal)
    row = {"dtype": dtype_name, "d": d, "n": n, "batch": batch, "heads": heads, "causal": causal,
           "flops_fwd": flops, "flops_fwdbwd": 3.5 * flops, "results": {}}
    try:  # which forward rung flash_attention runs for this row's inputs
        from flashlab.kernels import ladder

        probe = torch.empty(1, heads, n, d, device="cuda", dtype=dtype)  # (1, H, N, d): only its shape and dtype matter
        row["flashlab_forward_rung"] = ladder.best_rung(probe, probe, probe, causal)
    except Exception as exc:  # noqa: BLE001
        row["flashlab_forward_rung"] = f"unknown: {type(exc).__name__}"
    for name, variant in variants.items():
        res = {}
        if name.startswith("rung:") and dtype_name not in ladder_dtypes:
            row["results"][name] = {"status": "skipped"}
            continue
        try:
            res.update(check(variant, batch, heads, n, d, dtype, causal, scale))
            if res["status"] == "ok":
                res.update(time_variant(variant, batch, heads, n, d, dtype, causal, scale, do_bwd))
                res["fwd_tflops"] = flops / res["fwd_ms"] / 1e9
                if "fwdbwd_ms" in res:
                    res["fwdbwd_tflops"] = 3.5 * flops / res["fwdbwd_ms"] / 1e9
        except torch.cuda.OutOfMemoryError as exc:
            res["status"] = "oom"
            res["error"] = str(exc).splitlines()[0]
        except Exception as exc:  # noqa: BLE001  (record and go on: one broken variant must not stop the run)
            res["status"] = "error"
            res["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
            traceback.print_exc(limit=2)
        torch.cuda.empty_cache()
        row["results"][name] = res
    row["ratios"] = ratios(row["results"])
    return row


def ratios(results: dict) -> dict:
    """TFLOP/s of flashlab, the Hopper rung and the Gluon rung over SDPA's FLASH and CUDNN backends."""
    out = {}
    for mine in ("flashlab", "hopper", "gluon"):
        for ref in ("sdpa_flash", "sdpa_cudnn"):
            for mode in ("fwd", "fwdbwd"):
                a = results.get(mine, {}).get(f"{mode}_tflops")
                b = results.get(ref, {}).get(f"{mode}_tflops")
                if a and b:
                    out[f"{mine}/{ref}:{mode}"] = round(a / b, 3)
    for mode in ("fwd", "fwdbwd"):
        a = results.get("naive", {}).get(f"{mode}_ms")
        for ref in ("flashlab", "hopper", "sdpa_flash"):
            b = results.get(ref, {}).get(f"{mode}_ms")
            if a and b:
                out[f"naive_time/{ref}_time:{mode}"] = round(a / b, 2)
    return out


def fmt_row(row) -> str:
    r = row["results"]

    def tf(name, mode):
        x = r.get(name, {})
        val = x.get(f"{mode}_tflops")
        if val:
            return f"{val:6.0f}"
        status = x.get("status", "-")
        return f"{'-' if status == 'ok' else status[:6]:>6}"

    head = f"{row['dtype'][:4]} d{row['d']:<3} N{row['n']:<6} c{int(row['causal'])}"
    cols = " ".join(f"{n.split(':')[-1][:10]}={tf(n, 'fwd')}/{tf(n, 'fwdbwd')}" for n in r)
    return f"{head} | {cols}"


# ---------------------------------------------------------------- Hopper rung: resources, sweep

def hopper_resources(compiled) -> dict:
    """The compiler's report and what the code holds: registers, spills, shared memory, HGMMA, TMA."""
    rep = {"n_regs": getattr(compiled, "n_regs", None), "n_spills": getattr(compiled, "n_spills", None),
           "shared_bytes": getattr(getattr(compiled, "metadata", None), "shared", None)}
    ptx = compiled.asm.get("ptx", "")
    rep["ptx_wgmma"] = ptx.count("wgmma.mma_async")
    rep["ptx_tma_loads"] = ptx.count("cp.async.bulk.tensor")
    try:
        from triton.tools.disasm import get_sass

        sass = get_sass(compiled.asm["cubin"])
        rep["sass_HGMMA"] = sass.count("HGMMA")
        rep["sass_HMMA"] = sass.count("HMMA")
        rep["sass_UTMALDG"] = sass.count("UTMALDG")
        rep["sass_LDL_STL"] = sass.count("LDL") + sass.count("STL")
        rep["sass_MUFU_EX2"] = sass.count("MUFU.EX2")
        rep["sass_FFMA"] = sass.count("FFMA")
    except Exception as exc:  # noqa: BLE001
        rep["sass_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return rep


def parse_configs(text: str | None):
    """'BQ,BK,WARPS,STAGES[,ws][,pN];...' -> HopperConfigs (None: the module's SWEEP_CONFIGS).

    ws = warp_specialize; pN = persistent grid of N programs per SM.

    The lazy-rescaling, QK^T-prefetch and polynomial-exp2 options of sweeps 3 and 4
    (benchmarks/NOTES.md, call 6) live in commit ad0b83c, not in the current kernel.
    """
    from flashlab.kernels import flash_fwd_hopper as hopper

    if not text:
        return hopper.SWEEP_CONFIGS
    configs = []
    for item in text.split(";"):
        parts = [x.strip() for x in item.split(",")]
        opts = {}
        for flag in parts[4:]:
            if flag == "ws":
                opts["warp_specialize"] = True
            elif flag[:1] == "p" and flag[1:].isdigit():
                opts["persistent"] = int(flag[1:])
            else:
                raise SystemExit(f"--configs item {item!r}: unknown flag {flag!r}; expected BQ,BK,WARPS,STAGES[,ws][,pN]")
        if len(parts) < 4:
            raise SystemExit(f"--configs item {item!r}: expected BQ,BK,WARPS,STAGES[,ws][,pN]")
        configs.append(hopper.HopperConfig(*(int(x) for x in parts[:4]), **opts))
    return tuple(configs)


def config_label(c) -> str:
    return (f"{c.block_q}x{c.block_k} w{c.num_warps} s{c.num_stages}" + (" ws" if c.warp_specialize else "")
            + (f" p{c.persistent}" if c.persistent else ""))


def sweep(args) -> dict:
    """Every sweep config at each (dtype, d, N, causal): correctness, fwd TFLOP/s, resources."""
    import torch
    from flashlab.kernels import flash_fwd_hopper as hopper

    configs = parse_configs(args.configs)
    out = {"dtypes": list(args.dtypes or ("bfloat16",)), "entries": [], "sdpa_ms": []}
    for dtype_name in out["dtypes"]:
        dtype = getattr(torch, dtype_name)
        for n in args.seq_lens or (args.sweep_n,):
            for d in args.head_dims or HEAD_DIMS:
                batch, heads, scale = TOKENS // n, MODEL_DIM // d, 1.0 / math.sqrt(d)
                for causal in (bool(c) for c in (args.causal if args.causal else (0, 1))):
                    entries = []
                    ref = sweep_one(hopper, configs, entries, n, d, causal, batch, heads, scale, dtype,
                                    args.rounds)
                    out["sdpa_ms"].append({"dtype": dtype_name, **ref})
                    out["entries"] += [{"dtype": dtype_name, **e} for e in entries]
    return out


def sweep_one(hopper, configs, entries, n, d, causal, batch, heads, scale, dtype, rounds=1) -> dict:
    """Check each config once, then time SDPA and every config ``rounds`` times, interleaved."""
    flops = fwd_flops(batch, heads, n, d, causal)
    q, k, v = make_inputs(batch, heads, n, d, dtype)
    sdpa = {name: _common.sdpa(SDPA_BACKENDS[name]) for name in ("sdpa_flash", "sdpa_cudnn")}
    mine = []
    for cfg in configs:
        e = {"n": n, "d": d, "causal": causal, "config": cfg.__dict__.copy(), "fwd_ms_rounds": []}
        try:
            qc, kc, vc = make_inputs(batch, heads, n, d, dtype)
            o, lse, compiled = hopper.launch(qc, kc, vc, causal, scale, cfg)
            sl = (slice(0, 1), slice(0, 2))
            ref = _common.reference(qc[sl], kc[sl], vc[sl], causal, scale)
            e["fwd_err"] = _common.rel_err(o[sl], ref)
            e.update(hopper_resources(compiled))
        except Exception as exc:  # noqa: BLE001
            e["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        mine.append(e)
    ref_rounds = {name: [] for name in sdpa}
    for _ in range(rounds):
        for name, f in sdpa.items():
            ref_rounds[name].append(bench_ms(lambda: f(q, k, v, causal, scale)))
        for cfg, e in zip(configs, mine):
            if "error" not in e:
                e["fwd_ms_rounds"].append(bench_ms(lambda: hopper.launch(q, k, v, causal, scale, cfg)))
    ref_ms = {name: statistics.median(ms) for name, ms in ref_rounds.items()}
    for cfg, e in zip(configs, mine):
        if e["fwd_ms_rounds"]:
            ms = statistics.median(e["fwd_ms_rounds"])
            e["fwd_ms"], e["fwd_tflops"] = ms, flops / ms / 1e9
            for name, rms in ref_ms.items():
                e[f"ratio_{name}"] = round(rms / ms, 3)
        entries.append(e)
        print(f"[sweep] N{n} d{d} c{int(causal)} {config_label(cfg)} -> {e.get('fwd_tflops', 0):.0f} TFLOP/s "
              f"(/cuDNN {e.get('ratio_sdpa_cudnn')}; rounds {[round(flops / m / 1e9) for m in e['fwd_ms_rounds']]}) "
              f"err={e.get('fwd_err', 0):.1e} regs={e.get('n_regs')} spills={e.get('n_spills')} "
              f"smem={e.get('shared_bytes')} ex2={e.get('sass_MUFU_EX2')} ffma={e.get('sass_FFMA')} "
              f"{e.get('error', '')[:80]}", flush=True)
    return {"n": n, "d": d, "causal": causal, **ref_ms, "rounds": rounds,
            **{f"{name}_ms_rounds": ms for name, ms in ref_rounds.items()},
            "sdpa_flash_tflops": flops / ref_ms["sdpa_flash"] / 1e9,
            "sdpa_cudnn_tflops": flops / ref_ms["sdpa_cudnn"] / 1e9}


def ceilings() -> dict:
    """The two device ceilings, measured in this run: a big copy and a big bf16 matmul."""
    import torch
    import triton

    x = torch.randn(2**30 // 2, device="cuda", dtype=torch.bfloat16)  # 1 GiB
    y = torch.empty_like(x)
    ms = triton.testing.do_bench(lambda: y.copy_(x), return_mode="median")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    mm = triton.testing.do_bench(lambda: a @ b, return_mode="median")
    return {"copy_tb_per_s_read_plus_write": 2 * x.numel() * 2 / ms / 1e9,
            "matmul_bf16_8192_tflops": 2 * 8192**3 / mm / 1e9}


# ---------------------------------------------------------------- the short causal row under ncu

def short_profile(names: list[str], dtype_name: str) -> dict:
    """Run each forward contender (``bench_backward.py``'s names: cudnn, flashlab, hf:..., gl:...)
    once at the short causal row (B = 16, H = 16, N = 1024, d = 128) between cudaProfilerStart and
    cudaProfilerStop, after two warm-up calls each, so ``ncu --profile-from-start off`` sees only
    those kernels, in this order. Returns the Hopper configs' resource reports."""
    import torch

    import bench_backward as bb
    from flashlab.kernels import flash_fwd_hopper as hopper

    row = dict(dtype=dtype_name, d=128, n=1024, causal=True, b=TOKENS // 1024, h=MODEL_DIM // 128, hkv=MODEL_DIM // 128)
    q, k, v, _ = bb.make_inputs(row, seed=11)  # (B, H, N, d) each
    spec = bb.spec_of(row)
    fns = [(name, bb.forward_fn(name)) for name in names]
    with torch.no_grad():
        for _, f in fns:
            f(q, k, v, spec)
            f(q, k, v, spec)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        for _, f in fns:
            f(q, k, v, spec)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    resources = {}
    for name in names:
        if name.startswith("hf:"):
            cfg = hopper.HopperConfig(*bb._ints(name[3:]))
            resources[name] = hopper_resources(hopper.launch(q, k, v, spec, None, cfg, checked=True)[2])
    return {"order": names, "row": row, "resources": resources}


# ---------------------------------------------------------------- main

def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="d=128, N in {1024, 8192}, bf16")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit (no GPU needed)")
    p.add_argument("--sweep", action="store_true", help="sweep the Hopper rung's configs instead")
    p.add_argument("--rounds", type=int, default=1, help="--sweep: time every config this many times, interleaved")
    p.add_argument("--causal", nargs="*", type=int, choices=(0, 1), help="--sweep: only these causal values")
    p.add_argument("--sweep-n", type=int, default=8192, help="N of the sweep unless --seq-lens is given")
    p.add_argument("--configs", help="sweep these: 'BQ,BK,WARPS,STAGES[,ws][,pN];...' (default SWEEP_CONFIGS)")
    p.add_argument("--dtypes", nargs="*", choices=DTYPES)
    p.add_argument("--head-dims", nargs="*", type=int)
    p.add_argument("--seq-lens", nargs="*", type=int)
    p.add_argument("--variants", nargs="*", help="only these (naive, sdpa_flash, flashlab, hopper, rung, ...)")
    p.add_argument("--no-ladder", action="store_true", help="skip flashlab.kernels.ladder's rungs")
    p.add_argument("--ladder-dtypes", nargs="*", default=["bfloat16"], choices=DTYPES,
                   help="time the ladder's rungs only in these dtypes (default bfloat16)")
    p.add_argument("--no-bwd", action="store_true", help="time the forward only")
    p.add_argument("--short-profile", metavar="NAMES",
                   help="run these forward contenders (';'-separated) once at N = 1024 causal d = 128 for ncu")
    p.add_argument("--out", type=Path, default=_common.REPO / "benchmarks" / "results" / "bench_attention.json")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    plan = rows_for(args)
    if args.dry_run:
        print(f"{len(plan)} rows (dtype, d, N, causal), B = {TOKENS} // N, H = {MODEL_DIM} // d:")
        for row in plan:
            print("  ", row)
        print("variants: naive, " + ", ".join(SDPA_BACKENDS) + ", flashlab, hopper, gluon, rung:* (ladder)")
        return 0
    why = _common.timing_refusal()
    if why:
        print(f"bench_attention: refusing to time: {why}", file=sys.stderr)
        return 2
    import torch

    torch.manual_seed(0)
    if args.short_profile:
        names = [x.strip() for x in args.short_profile.split(";") if x.strip()]
        for dtype_name in args.dtypes or ["bfloat16"]:
            print("[short-profile]", json.dumps({dtype_name: short_profile(names, dtype_name)}), flush=True)
        return 0
    if args.sweep:
        payload = {"environment": _common.environment(), "protocol": PROTOCOL, "sweep": sweep(args)}
        out = args.out if args.out.name != "bench_attention.json" else args.out.with_name("hopper_sweep.json")
        _common.write_json(out, payload)
        print(f"[bench] wrote {out}")
        return 0
    variants = load_variants(args)
    print(f"[bench] variants: {list(variants)}; {len(plan)} rows", flush=True)
    payload = {"environment": _common.environment(), "protocol": PROTOCOL, "ceilings": ceilings(),
               "rows": []}
    print(f"[bench] ceilings: {payload['ceilings']}", flush=True)
    try:
        from flashlab.kernels import flash_fwd_hopper as hopper

        payload["hopper_configs"] = {f"d{d}_causal{int(c)}": cfg.__dict__.copy()
                                     for (d, c), cfg in hopper.DEFAULT_CONFIGS.items()}
        res = {}
        for d in HEAD_DIMS:
            for c in (False, True):
                q, k, v = make_inputs(1, 2, 1024, d, torch.bfloat16)
                res[f"d{d}_causal{int(c)}"] = hopper_resources(hopper.launch(q, k, v, c)[2])
        payload["hopper_resources"] = res
        print(f"[bench] hopper resources: {res}", flush=True)
    except Exception as exc:  # noqa: BLE001
        payload["hopper_resources"] = {"error": f"{type(exc).__name__}: {exc}"}
    t0 = time.time()
    for dtype_name, d, n, causal in plan:
        row = run_row(variants, dtype_name, d, n, causal, not args.no_bwd, args.ladder_dtypes)
        payload["rows"].append(row)
        payload["elapsed_s"] = round(time.time() - t0, 1)
        _common.write_json(args.out, payload)
        print(fmt_row(row), flush=True)
        print("    ratios:", row["ratios"], flush=True)
    print(f"[bench] wrote {args.out} in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
