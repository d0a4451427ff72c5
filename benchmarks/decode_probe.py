"""Decode call 9: how hard can one launch read 134 MB, and the three rows over SDPA by more than the spread.

``read_probe``: the pure-read kernel of ``read_roofline.py`` at the 134 MB row (B = 1, H = 32,
Hkv = 8, Nk = 32k, the one target-2 exception) with L2 hints (evict_first, .cg), through the
tensor-memory accelerator (``_read_sum_tma``), and an empty launch, all timed as the decode rows
are (``do_bench`` median, L2 cleared by writing a 256 MB buffer); the best of each kind again at
2x and 4x the bytes (fixed cost vs rate); and the best plain and hinted reads, the empty launch,
flash_decode and SDPA timed after two kinds of L2 flush: ``dirty`` (a write, as do_bench does:
L2 is left full of dirty lines that must go back to HBM while the kernel reads) and ``clean`` (a
read of the same 256 MB: the lines can be dropped).

``one_wave``: at the rows (4, 32, 32, 32k), (4, 32, 32, 128k), (16, 32, 8, 4k) (128 programs,
one wide program per SM, 4 of 132 SMs idle) and (1, 32, 8, 32k): the rule's choice beside SDPA
default and grids of a bit more than one wave or other tiles; at the 134 MB row also plain
(not cp.async-pipelined, ``num_stages=1``) loads with and without evict_first, since the
pipelined cp.async loads drop the L2 hint (compile-only observation, benchmarks/NOTES.md).
Every output is checked against SDPA's first; ROUNDS rotated rounds, median.

    python benchmarks/bench_decode.py --probe     # both -> $OUT/decode_probe.json
"""
from __future__ import annotations

import dataclasses

import _common
from bench_decode import D, _median, rotated_rounds, bench_us, make_variants

PROBE_SHAPE = (1, 32, 8, 32768)  # the target-2 exception: K + V = 134 MB
READ_PLAIN = tuple((block, warps, per_sm) for block, warps in ((2048, 4), (4096, 8), (8192, 8)) for per_sm in (2, 4, 8))
READ_TMA = ((64, 4, 4), (64, 4, 8), (128, 8, 2), (128, 8, 4))  # (rows per tile, warps, programs per SM)
HINTS = {0: "plain", 1: "evict_first", 2: "cg"}
ONE_WAVE_ROWS = ((4, 32, 32, 32768), (4, 32, 32, 131072), (16, 32, 8, 4096), (1, 32, 8, 32768))


def events_us(fn, flush, n: int = 40) -> float:
    """Median us of fn between two CUDA events, ``flush()`` run before each (not timed)."""
    import torch

    fn()
    times = []
    for _ in range(n):
        flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(1e3 * start.elapsed_time(end))
    return _median(times)


def read_probe() -> dict:
    import torch

    import read_roofline as rr

    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = torch.empty(16 * sms, dtype=torch.float32, device="cuda")
    B, H, Hkv, nk = PROBE_SHAPE
    g = torch.Generator(device="cuda").manual_seed(9)
    result = {"shape": list(PROBE_SHAPE), "sizes": {}}

    def kv(scale):
        return (torch.randn(scale * B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))

    def candidates(k, v, plain, tma):
        fns = {}
        for hint in HINTS:
            for block, warps, per_sm in plain:
                fns[f"{HINTS[hint]} {block}/{warps}/{per_sm * sms}"] = (
                    lambda hint=hint, block=block, warps=warps, per_sm=per_sm:
                    rr.launch(k, v, out, block, warps, per_sm * sms, hint))
        for block_r, warps, per_sm in tma:
            try:
                fns[f"tma {block_r}/{warps}/{per_sm * sms}"] = rr.tma_launcher(k, v, out, block_r, warps, per_sm * sms, 3)
            except Exception as exc:  # no descriptors in this Triton: recorded, not fatal
                result.setdefault("errors", {})[f"tma {block_r}"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        return fns

    def time_all(k, v, fns):
        nbytes = 2 * k.numel() * 2
        want = (k.double().sum() + v.double().sum()).item()
        times = {}
        for name, fn in fns.items():
            try:
                grid = fn()
                got = out[:grid].double().sum().item()
                if abs(got - want) > 1e-3 * max(1.0, abs(want)) + 1.0:
                    times[name] = {"error": f"sum {got} != {want}"}
                    continue
                times[name] = bench_us(fn, 5, 20)
            except Exception as exc:
                times[name] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        ok = {n: t for n, t in times.items() if isinstance(t, float)}
        return {"bytes": nbytes, "us": times, "best": min(ok, key=ok.get),
                "tb_s": {n: nbytes / t / 1e6 for n, t in ok.items()}}

    k, v = kv(1)
    with torch.no_grad():
        fns = candidates(k, v, READ_PLAIN, READ_TMA)
        first = time_all(k, v, fns)
        result["sizes"]["1x"] = first
        ok = {n: t for n, t in first["us"].items() if isinstance(t, float)}
        best = {kind: min((n for n in ok if n.startswith(kind)), key=ok.get, default=None)
                for kind in ("plain", "evict_first", "cg", "tma")}
        result["best"] = best
        empty = {"1 program": lambda: rr._empty[(1,)](out, 0), f"{sms} programs": lambda: rr._empty[(sms,)](out, 0)}
        result["empty_launch_us"] = {n: bench_us(fn, 5, 20) for n, fn in empty.items()}
        # -- the same kernels after a dirty (written) and a clean (read) flush of L2
        flush_buf = torch.empty(int(256e6 // 4), dtype=torch.int32, device="cuda")
        flushes = {"dirty": lambda: flush_buf.zero_(), "clean": lambda: flush_buf.sum(), "none": lambda: None}
        q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, H, 1, d)
        kd, vd = k.view(B, Hkv, nk, D), v.view(B, Hkv, nk, D)
        import flashlab

        sdpa = make_variants(H, Hkv, D ** -0.5)["sdpa_default"]
        timed = {n: fns[best[n]] for n in ("plain", "evict_first") if best[n]}
        timed.update(empty, flash_decode=lambda: flashlab.flash_decode(q, kd, vd), sdpa_default=lambda: sdpa(q, kd, vd))
        try:
            result["flush"] = {f: {n: events_us(fn, flush) for n, fn in timed.items()} for f, flush in flushes.items()}
        except Exception as exc:
            result["flush"] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        del k, v, fns
        torch.cuda.empty_cache()
        # -- the best of each kind at 2x and 4x the bytes: time = fixed + bytes / rate
        for scale in (2, 4):
            k, v = kv(scale)
            picked = {n: f for n, f in candidates(k, v, READ_PLAIN, READ_TMA).items() if n in best.values()}
            result["sizes"][f"{scale}x"] = time_all(k, v, picked)
            del k, v
            torch.cuda.empty_cache()
    return result


def one_wave() -> dict:
    import torch

    from flashlab import decode
    from flashlab.kernels import decode_plan as plans
    from flashlab.kernels import flash_decode as kernels

    out = []
    for B, H, Hkv, nk in ONE_WAVE_ROWS:
        g = torch.Generator(device="cuda").manual_seed(29 * nk + B + Hkv)
        q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, H, 1, d)
        k, v = (torch.randn(B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        sdpa = make_variants(H, Hkv, D ** -0.5)["sdpa_default"]
        choice = decode.choice_for(q, k)
        wide = kernels.config_for(D, torch.bfloat16, True)
        default = kernels.config_for(D, torch.bfloat16, False)

        def split_kv(splits, config):
            config = dataclasses.replace(config, fused_combine=splits <= decode.FUSED_MAX_SPLITS)
            return lambda: plans.forward(q, k, v, None, D ** -0.5, False, splits, config)[0]

        fns = {"sdpa_default": lambda: sdpa(q, k, v), "rule": split_kv(choice.splits, decode.config_of(q, choice))}
        if B * Hkv == 128:
            fns.update({"wide@2": split_kv(2, wide), "default@2": split_kv(2, default),
                        "wide_8warps@1": split_kv(1, dataclasses.replace(wide, num_warps=8)),
                        "bn64_6stages@1": split_kv(1, dataclasses.replace(default, num_stages=6))})
            if nk >= 32768:
                fns["wide@33"] = split_kv(33, wide)  # 4224 programs: exactly 32 waves of 132
        else:
            plain = dataclasses.replace(default, num_stages=1)  # plain loads: the L2 hint survives
            fns.update({"default_st1@16": split_kv(16, plain),
                        "default_st1_evict@16": split_kv(16, dataclasses.replace(plain, evict_first=True)),
                        "default_st1@32": split_kv(32, plain),
                        "default_st1_evict@32": split_kv(32, dataclasses.replace(plain, evict_first=True)),
                        "wide_st1_evict@16": split_kv(16, dataclasses.replace(wide, num_stages=1, evict_first=True))})
        row = {"shape": [B, H, Hkv, nk], "rule": f"{'wide' if choice.wide else 'default'}@{choice.splits}",
               "rel_err": {}, "runs": {name: [] for name in fns}}
        with torch.no_grad():
            ref = sdpa(q, k, v).float()
            for name in list(fns):
                try:
                    row["rel_err"][name] = _common.rel_err(fns[name](), ref)
                except Exception as exc:
                    row.setdefault("errors", {})[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
                    del fns[name], row["runs"][name]
            row["runs"] = rotated_rounds(fns)
        row["us"] = {name: _median(runs) for name, runs in row["runs"].items()}
        row["spread"] = {name: (max(runs) - min(runs)) / _median(runs) for name, runs in row["runs"].items()}
        row["vs_sdpa"] = {name: row["us"][name] / row["us"]["sdpa_default"] for name in fns}
        print(f"one-wave {str((B, H, Hkv, nk)):>22} {row['rule']:>8} | "
              + " ".join(f"{n}={row['us'][n]:.1f}({row['vs_sdpa'][n]:.3f}x,{100 * row['spread'][n]:.1f}%)" for n in fns))
        out.append(row)
        del q, k, v
        torch.cuda.empty_cache()
    return {"rows": out}


def probe(save=lambda result: None) -> dict:
    """read_probe, then one_wave; ``save(result)`` after each (a killed run keeps the first)."""
    import time

    t0 = time.time()
    result = {"read_probe": read_probe()}
    save(result)
    r = result["read_probe"]
    print("read probe best:", r["best"], "empty:", r["empty_launch_us"])
    for size, entry in r["sizes"].items():
        print(f"  {size}: " + " ".join(f"{n}={t:.1f}" for n, t in sorted(
            ((n, t) for n, t in entry["us"].items() if isinstance(t, float)), key=lambda x: x[1])[:8]))
    for flush, entry in r["flush"].items():
        print(f"  flush {flush}: " + (" ".join(f"{n}={t:.1f}" for n, t in entry.items()) if isinstance(entry, dict) else entry))
    result["read_s"] = round(time.time() - t0, 1)
    result["one_wave"] = one_wave()
    result["wall_s"] = round(time.time() - t0, 1)
    return result
