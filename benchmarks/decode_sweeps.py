"""Sweeps behind the decode split rule and configs (calls 1-5 of benchmarks/NOTES.md, decode section).

Run through ``bench_decode.py`` (``--tune``, ``--sweep-misses``, ``--sweep-combine``); they reuse its
timing helpers. Kept so that the committed results of those calls can be reproduced:
``results/decode_tune_call*.json``, ``results/decode_sweep_call4.json``,
``results/decode_sweep_combine_call5.json``; and call 7's ``split_wide`` (the wide config where
the rule splits), still part of a full run (``bench_decode.json``'s ``split_wide``).
"""
from __future__ import annotations

import _common
from bench_decode import D, _median, _step_inputs, checked_rounds, bench_us, host_us, make_variants


# ---------------------------------------------------------------- tuning (call 1)

TUNE_SHAPES = ((1, 32, 32, 32768), (1, 32, 8, 131072), (16, 32, 8, 32768), (4, 32, 8, 32768), (16, 32, 32, 131072),
               (64, 32, 8, 131072))


def tune() -> dict:
    """The split rule's choice beside every power-of-two split count, and the Nk from which the
    split-KV path beats the unsplit rung (flash_attention's DECODE_MIN_NK)."""
    import torch

    from flashlab import decode
    from flashlab.kernels import attention
    from flashlab.kernels import decode_plan as plans

    out = {"splits": [], "threshold": []}
    for B, H, Hkv, nk in TUNE_SHAPES:
        g = torch.Generator(device="cuda").manual_seed(nk + B)
        q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)
        k = torch.randn(B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g)
        v = torch.randn(B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g)
        kv_bytes = 2 * k.numel() * 2
        rule = decode.splits_for(q, k)
        for splits in sorted({1, 2, 4, 8, 16, 32, 64, 128, rule}):
            us = bench_us(lambda: plans.forward(q, k, v, None, D ** -0.5, False, splits), 10, 40)
            out["splits"].append({"shape": [B, H, Hkv, nk], "splits": splits, "rule": rule, "us": us,
                                  "tb_s": kv_bytes / us / 1e6})
        del q, k, v
    for B, Hkv in ((1, 32), (1, 8), (64, 8)):
        for nk in (16, 64, 256, 1024, 2048):
            g = torch.Generator(device="cuda").manual_seed(nk)
            q = torch.randn(B, 32, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)
            k = torch.randn(B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g)
            v = torch.randn(B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g)
            split = bench_us(lambda: plans.forward(q, k, v, None, D ** -0.5, False, decode.splits_for(q, k)), 10, 40)
            unsplit = bench_us(lambda: attention.best_forward(q, k, v, False, D ** -0.5), 10, 40)
            out["threshold"].append({"B": B, "Hkv": Hkv, "Nk": nk, "splits": decode.splits_for(q, k),
                                     "split_kv_us": split, "unsplit_us": unsplit})
    return out


# ---------------------------------------------------------------- the rows that miss (call 4)

MISS_SHAPES = ((1, 32, 8, 4096), (1, 32, 8, 32768), (1, 32, 8, 131072), (4, 32, 32, 4096), (16, 32, 32, 4096),
               (64, 32, 8, 4096), (1, 32, 32, 131072))
MISS_SPLITS = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128)
MISS_CONFIGS = ((32, 4, 3), (64, 4, 2), (64, 4, 4), (64, 8, 3), (128, 4, 2), (128, 8, 3))  # BLOCK_N, warps, stages


def sweep_misses() -> dict:
    """For the rows still over SDPA default after call 3: do_bench (L2 cleared) of the split-KV
    kernel at every split count of MISS_SPLITS (default config) and at the rule's split count
    under each of MISS_CONFIGS, beside SDPA default on the same inputs."""
    import torch

    from flashlab import decode
    from flashlab.kernels import decode_plan as plans
    from flashlab.kernels import flash_decode as kernels

    out = []
    for B, H, Hkv, nk in MISS_SHAPES:
        g = torch.Generator(device="cuda").manual_seed(11 * nk + B)
        q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, H, 1, d)
        k, v = (torch.randn(B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        sdpa = make_variants(H, Hkv, D ** -0.5)["sdpa_default"]
        rule = decode.splits_for(q, k)
        entry = {"shape": [B, H, Hkv, nk], "rule": rule, "sdpa_default_us": None, "splits": {}, "configs": {}}
        with torch.no_grad():
            ref = sdpa(q, k, v).float()
            entry["sdpa_default_us"] = bench_us(lambda: sdpa(q, k, v), 10, 40)
            for splits in sorted(set(MISS_SPLITS) | {rule}):
                entry["splits"][splits] = bench_us(
                    lambda: plans.forward(q, k, v, None, D ** -0.5, False, splits), 10, 40)
            for block_n, warps, stages in MISS_CONFIGS:
                config = kernels.DecodeConfig(block_n, warps, stages)
                try:
                    err = _common.rel_err(plans.forward(q, k, v, None, D ** -0.5, False, rule, config)[0], ref)
                    us = bench_us(lambda: plans.forward(q, k, v, None, D ** -0.5, False, rule, config), 10, 40)
                    entry["configs"][f"{block_n}/{warps}/{stages}"] = {"us": us, "rel_err": err}
                except Exception as exc:  # a config the GPU refuses (shared memory) is recorded
                    entry["configs"][f"{block_n}/{warps}/{stages}"] = {"error": f"{type(exc).__name__}: {str(exc)[:120]}"}
        best = min(entry["splits"], key=entry["splits"].get)
        print(f"{(B, H, Hkv, nk)}: SDPA {entry['sdpa_default_us']:.1f} us; rule {rule} splits "
              f"{entry['splits'][rule]:.1f} us; best {best} splits {entry['splits'][best]:.1f} us; configs "
              + " ".join(f"{c}={r.get('us', float('nan')):.1f}" for c, r in entry["configs"].items()))
        out.append(entry)
        del q, k, v
        torch.cuda.empty_cache()
    return {"rows": out}


# ---------------------------------------------------------------- the combine and the split rule (call 5)

COMBINE_ROWS = ((1, 32, 32, 4096), (4, 32, 32, 4096), (16, 32, 32, 4096), (1, 32, 32, 32768), (4, 32, 32, 32768),
                (1, 32, 32, 131072), (1, 32, 8, 4096), (4, 32, 8, 4096), (16, 32, 8, 4096), (64, 32, 8, 4096),
                (1, 32, 8, 32768), (4, 32, 8, 32768), (16, 32, 8, 32768), (1, 32, 8, 131072), (4, 32, 8, 131072))
COMBINE_SPLITS = {8: (8, 12, 16, 20, 24, 33), 32: (4, 6, 8, 12, 16), 128: (1, 2, 3, 4, 6), 512: (1, 2, 4, 8)}
COMBINES = {"fused1": (True, 1), "fused4": (True, 4), "fused8": (True, 8), "kernel2": (False, 8)}
SWEEP_CONFIGS = ((64, 2, 3), (32, 2, 4), (64, 4, 5), (128, 4, 3), (32, 4, 6))  # BLOCK_N, warps, stages
CONFIG_ROWS = ((4, 32, 32, 4096), (16, 32, 32, 4096), (64, 32, 8, 4096), (1, 32, 8, 4096), (1, 32, 8, 32768),
               (4, 32, 32, 32768))


def sweep_combine() -> dict:
    """At every row of COMBINE_ROWS (the rows under ~300 us): do_bench (L2 cleared) of the split-KV
    kernel, through its launch plan, at each split count of COMBINE_SPLITS[programs per split] x
    each combine of COMBINES (fused, loading 1, 4 or 8 splits per step; or the second kernel),
    beside SDPA default (timed at the start and the end of the row: the spread is the noise);
    at CONFIG_ROWS also the configs of SWEEP_CONFIGS. Each variant's output is checked against
    SDPA default's (relative error) before it is timed."""
    import dataclasses

    import torch

    from flashlab.kernels import decode_plan as plans
    from flashlab.kernels import flash_decode as kernels

    out = []
    base = kernels.default_config(D, torch.bfloat16)
    for B, H, Hkv, nk in COMBINE_ROWS:
        g = torch.Generator(device="cuda").manual_seed(13 * nk + B + Hkv)
        q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, H, 1, d)
        k, v = (torch.randn(B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        sdpa = make_variants(H, Hkv, D ** -0.5)["sdpa_default"]
        entry = {"shape": [B, H, Hkv, nk], "sdpa_default_us": [], "times": {}, "configs": {}, "max_rel_err": 0.0}
        with torch.no_grad():
            ref = sdpa(q, k, v).float()
            entry["sdpa_default_us"].append(bench_us(lambda: sdpa(q, k, v), 10, 40))

            def timed(splits, config):
                fn = lambda: plans.forward(q, k, v, None, D ** -0.5, False, splits, config)[0]  # noqa: E731
                entry["max_rel_err"] = max(entry["max_rel_err"], _common.rel_err(fn(), ref))
                return bench_us(fn, 5, 25)

            for splits in COMBINE_SPLITS[B * Hkv]:
                for name, (fused, step) in COMBINES.items():
                    if splits == 1 and name != "fused8" or step == 4 and B * Hkv != 8:
                        continue
                    config = dataclasses.replace(base, fused_combine=fused, combine_step=step)
                    entry["times"][f"{splits}/{name}"] = timed(splits, config)
            if (B, H, Hkv, nk) in CONFIG_ROWS:
                best = min(entry["times"], key=entry["times"].get)
                splits_best = int(best.split("/")[0])
                for block_n, warps, stages in SWEEP_CONFIGS:
                    config = kernels.DecodeConfig(block_n, warps, stages, fused_combine=True, combine_step=8)
                    for splits in sorted({splits_best, max(1, splits_best // 2)}):
                        try:
                            entry["configs"][f"{block_n}/{warps}/{stages}@{splits}"] = timed(splits, config)
                        except Exception as exc:  # a config the GPU refuses (shared memory) is recorded
                            entry["configs"][f"{block_n}/{warps}/{stages}@{splits}"] = f"{type(exc).__name__}: {str(exc)[:80]}"
            entry["sdpa_default_us"].append(bench_us(lambda: sdpa(q, k, v), 10, 40))
        sd = min(entry["sdpa_default_us"])
        best = sorted(entry["times"], key=entry["times"].get)[:3]
        print(f"{str((B, H, Hkv, nk)):>20} SDPA {entry['sdpa_default_us'][0]:.1f}/{entry['sdpa_default_us'][1]:.1f} "
              f"err {entry['max_rel_err']:.4f} | " + " ".join(f"{n}={entry['times'][n]:.1f}({entry['times'][n] / sd:.3f})"
                                                           for n in best))
        print("    " + " ".join(f"{n}={t:.1f}" for n, t in entry["times"].items()))
        if entry["configs"]:
            print("    configs " + " ".join(f"{n}={t:.1f}" if isinstance(t, float) else f"{n}=ERR"
                                            for n, t in entry["configs"].items()))
        out.append(entry)
        del q, k, v
        torch.cuda.empty_cache()
    return {"rows": out, "check_lengths": check_cost()}


def check_cost(rows=((1, 32, 8, 4096), (4, 32, 32, 4096), (1, 32, 8, 32768))) -> list:
    """host_us and issue_us of flash_decode with cache_seqlens, the host check of the lengths on
    (the default: one sync per call) and off (``check_lengths=False``), beside SDPA default."""
    import torch

    import flashlab

    out = []
    for B, H, Hkv, nk in rows:
        q, k, v, lens, sdpa, row = _step_inputs(B, H, Hkv, nk, seed=5 * nk + B)
        with torch.no_grad():
            for name, fn in (("check_on", lambda: flashlab.flash_decode(q, k, v, lens)),
                             ("check_off", lambda: flashlab.flash_decode(q, k, v, lens, check_lengths=False)),
                             ("sdpa_default", lambda: sdpa(q, k, v))):
                wall, issue = host_us(fn)
                row[name] = {"host_us": wall, "issue_us": issue, "us": bench_us(fn, 10, 40)}
        print("check_lengths cost:", {n: (r if not isinstance(r, dict) else {f: round(x, 1) for f, x in r.items()})
                                      for n, r in row.items()})
        out.append(row)
        del q, k, v
    return out


# ---------------------------------------------------------------- the wide config where the rule splits (call 7)

SPLIT_ROWS = ((1, 32, 32, 4096), (1, 32, 32, 32768), (1, 32, 32, 131072), (4, 32, 8, 4096), (4, 32, 8, 32768),
              (4, 32, 8, 131072), (1, 32, 8, 4096), (1, 32, 8, 32768), (1, 32, 8, 131072))
WIDE_SPLITS = {8: (12, 16, 32), 32: (3, 4, 8)}  # programs per split -> wide split counts (one per SM: 16, 4)
CALL6_SPLITS = {8: 16, 32: 8}  # the rule of call 6 there: default config, two programs per SM (<= 16 splits)


def split_wide() -> dict:
    """At the rows the rule splits (8 and 32 programs per split): the wide config at the split
    counts of WIDE_SPLITS (one program per SM, fewer, and two waves) beside call 6's choice
    (default config, CALL6_SPLITS) and SDPA default; every output checked against SDPA's, then
    ROUNDS interleaved rounds (the order rotated each round), do_bench with L2 cleared; us = median."""
    import torch

    from flashlab import decode
    from flashlab.kernels import decode_plan as plans
    from flashlab.kernels import flash_decode as kernels

    out = []
    for B, H, Hkv, nk in SPLIT_ROWS:
        g = torch.Generator(device="cuda").manual_seed(17 * nk + B + Hkv)
        q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, H, 1, d)
        k, v = (torch.randn(B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
        sdpa = make_variants(H, Hkv, D ** -0.5)["sdpa_default"]
        programs = B * Hkv

        def split_kv(splits, wide):
            config = kernels.config_for(D, torch.bfloat16, wide, splits <= decode.FUSED_MAX_SPLITS)
            return lambda: plans.forward(q, k, v, None, D ** -0.5, False, splits, config)[0]

        fns = {"sdpa_default": lambda: sdpa(q, k, v),
               f"default@{CALL6_SPLITS[programs]}": split_kv(CALL6_SPLITS[programs], False)}
        fns.update({f"wide@{splits}": split_kv(splits, True) for splits in WIDE_SPLITS[programs]})
        choice = decode.choice_for(q, k)
        row = {"shape": [B, H, Hkv, nk], "rule": f"{'wide' if choice.wide else 'default'}@{choice.splits}"}
        with torch.no_grad():
            row["rel_err"], row["runs"] = checked_rounds(fns, sdpa(q, k, v).float())
        row["us"] = {name: _median(runs) for name, runs in row["runs"].items()}
        row["spread"] = {name: (max(runs) - min(runs)) / _median(runs) for name, runs in row["runs"].items()}
        best = min((n for n in fns if n != "sdpa_default"), key=row["us"].get)
        row["best"] = best
        print(f"split/wide {str((B, H, Hkv, nk)):>20} rule {row['rule']:>10} best {best:>10} | "
              + " ".join(f"{n}={row['us'][n]:.1f}({100 * row['spread'][n]:.1f}%)" for n in fns))
        out.append(row)
        del q, k, v
        torch.cuda.empty_cache()
    return {"rows": out}
