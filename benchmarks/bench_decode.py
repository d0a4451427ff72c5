"""Time decode attention (one new query per sequence against a KV cache) on one GPU.

Rows: bf16, d = 128, Nq = 1, (H, Hkv) in {(32, 32), (32, 8)}, Nk in {4k, 32k, 128k}, B in
{1, 4, 16, 64}; a row whose K and V would take more than ``MAX_KV_GIB`` is skipped and recorded
as skipped. Variants, each checked against SDPA FLASH's output on the row's inputs before it is
timed (relative error recorded):

* ``flash_decode``      flashlab.flash_decode: split-KV + GQA packing; splits, tile config and
                        combine by ``decode.split_rule``
* ``flash_decode_lens`` the same with ``cache_seqlens`` (every length Nk) and ``check_lengths=False``
                        (no host check of the lengths, no sync): what a serving loop calls
* ``decode_2kernels``   the same choice with the combine as a second kernel (``fused_combine=False``;
                        the same as flash_decode where the rule chose 1 split)
* ``unsplit``           the course's forward rung (``attention.best_forward``), one program per
                        (query block, batch x head): what flash_attention ran at decode before
* ``sdpa_default``      torch SDPA, backend chosen by PyTorch (``enable_gqa`` for Hkv < H)
* ``sdpa_flash``        torch SDPA with the FLASH_ATTENTION backend only
* ``naive``             matmul, softmax, matmul in bf16 (K, V repeated to H heads for GQA);
                        only where the repeated K and V stay under ``NAIVE_MAX_GIB``

Time: median of ``triton.testing.do_bench`` (it clears the L2 cache before every run, so every run
reads K and V from HBM). flash_decode and SDPA default are timed in ``ROUNDS`` = 3 interleaved
rounds spread over the row (at its start, after the other variants in the reverse order, after
the host timings): ``us`` is the median of the three do_bench medians (``us_runs``; ``us_min``:
the smallest, call 6's protocol took the smaller of two), and ``vs_sdpa_default`` gives the ratio
of medians, each round's ratio, the spread ((max - min) / median of each variant's rounds, the
larger of the two) and whether the difference is within it. For flash_decode, flash_decode_lens
and SDPA default also, at rows under ``GRAPH_MAX_US``: ``graph_us``,
one call's share of a CUDA graph of 10 calls (GPU time with the host's launch work taken out;
consecutive calls may then find part of K and V in L2 at the smallest rows); ``host_us``, the wall
time of ``host_calls`` back-to-back calls / host_calls, the GPU synchronised before and after
(1000 calls where a call takes under 300 us, else enough for ~0.1 s, at least 20): the steady-state time per
call, the larger of the host's and the GPU's; and ``issue_us``, the host's time to issue them
(clock read before the final synchronisation). Bandwidth: bytes of K and V read (2 * B * Hkv * Nk
* d * 2 B) / time. ``read_ceiling``: the read roofline at the row's byte count, the best time of a
pure-read Triton kernel over the same K and V (``read_roofline.py``; ``read_ceilings``: every
config), and each variant's ``read_fraction`` = that time / its time.
``launch_path``: host_us of flash_decode at the small rows with the plan's
direct launch of the compiled kernel and with every launch through Triton's JITFunction, and
with the default host check of the lengths (``checked``: one sync per call).
``split_wide``: at the rows the rule splits, the wide config at a few split counts beside call 6's
choice (default config) and SDPA, in interleaved rounds. ``paged``: a paged cache (pages of 16 and
256 keys, physical blocks shuffled) beside the contiguous one at a few rows.
Also (not with ``--skip-chunk``): a bottom-right causal chunk (Nq = 2048 against Nk = 32768) through
``flash_attention(causal=True, causal_align="bottom_right")`` beside a non-causal run of equal
FLOPs (Nk' = Nk - Nq/2); and the device-copy bandwidth ceiling. The sweeps of calls 1-5 (the
flags below) and call 7's ``split_wide`` live in ``decode_sweeps.py``; the copy ceiling, the
graph-replayed read, the launch path, the chunk and the paged cache in ``decode_extras.py``; call 9's
read experiments and one-wave rows in ``decode_probe.py``.

    python benchmarks/bench_decode.py                  # full run -> $OUT or results/bench_decode.json
    python benchmarks/bench_decode.py --tune           # the split rule vs other split counts; the Nk threshold
    python benchmarks/bench_decode.py --sweep-misses   # split counts and configs at the rows over SDPA
    python benchmarks/bench_decode.py --sweep-combine  # split counts x combine kinds (and configs) per row
    python benchmarks/bench_decode.py --paged          # the paged-cache rows and the launch path only
    python benchmarks/bench_decode.py --probe          # the 134 MB read and the one-wave rows (decode_probe.py)
    python benchmarks/bench_decode.py --dry-run        # print the rows; needs no GPU
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

D = 128
HEADS = ((32, 32), (32, 8))
SEQ_LENS = (4096, 32768, 131072)
BATCHES = (1, 4, 16, 64)
MAX_KV_GIB = 64.0  # K + V of a row above this: skipped (SDPA's and naive's buffers come on top)
NAIVE_MAX_GIB = 16.0  # naive repeats K and V to H heads: above this it is not run
VARIANTS = ("flash_decode", "flash_decode_lens", "decode_2kernels", "unsplit", "sdpa_default", "sdpa_flash", "naive")
GRAPH_VARIANTS = ("flash_decode", "flash_decode_lens", "sdpa_default")  # also graph_us, host_us, issue_us
ROUND_VARIANTS = ("flash_decode", "sdpa_default")  # timed in ROUNDS interleaved rounds per row; us = median
ROUNDS = 3
GRAPH_MAX_US = 2000.0  # graph_us and host_us only where a call takes less (above, the launch is < 1% of it)
HOST_CALLS = 1000  # back-to-back calls for host_us (fewer where a call takes over 300 us)


def rows():
    """(B, H, Hkv, Nk, skip reason or None) for every row."""
    out = []
    for H, Hkv in HEADS:
        for nk in SEQ_LENS:
            for B in BATCHES:
                gib = 2 * B * Hkv * nk * D * 2 / 2**30
                out.append((B, H, Hkv, nk, f"K+V = {gib:.0f} GiB > {MAX_KV_GIB:.0f} GiB" if gib > MAX_KV_GIB else None))
    return out


def bench_us(fn, warmup=25, rep=100) -> float:
    import triton

    return 1e3 * float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def graph_us(fn) -> float:
    """Median us of one replay of a CUDA graph of 10 calls of fn, / 10: GPU time without the host."""
    import torch
    import triton

    fn()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(10):
                fn()
    torch.cuda.current_stream().wait_stream(stream)
    return 1e3 * float(triton.testing.do_bench(graph.replay, warmup=10, rep=40, return_mode="median")) / 10


def host_calls(us: float) -> int:
    """How many back-to-back calls host_us makes for a call of ``us`` microseconds (GPU time)."""
    return HOST_CALLS if us < 300 else max(20, int(1e5 / us))


def host_us(fn, calls=HOST_CALLS) -> tuple[float, float]:
    """(wall us per call of ``calls`` back-to-back calls, GPU synchronised before and after; host
    us per call to issue them). The first is the steady state of a decode loop without graphs."""
    issue, wall = _common.issue_and_wall_us(fn, calls, warmup=10)
    return wall, issue


def make_variants(H, Hkv, scale):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import flashlab
    from flashlab.kernels import attention

    gqa = H != Hkv

    def sdpa_default(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=gqa)

    def sdpa_flash(q, k, v):
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            return F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=gqa)

    def naive(q, k, v):
        k, v = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)  # (B, H, Nk, d)
        return _common.naive_attention(q, k, v, False, scale)

    from flashlab import decode
    from flashlab.kernels import decode_plan as plans

    def decode_2kernels(q, k, v):
        choice = decode.choice_for(q, k)._replace(fused=False)
        return plans.forward(q, k, v, None, scale, True, choice.splits, decode.config_of(q, choice))[0]

    lens = {}  # cache_seqlens per batch size: every length Nk

    def flash_decode_lens(q, k, v):
        key = (q.shape[0], k.shape[2])
        if key not in lens:
            lens[key] = torch.full((q.shape[0],), k.shape[2], dtype=torch.int32, device=q.device)
        return flashlab.flash_decode(q, k, v, lens[key], scale=scale, check_lengths=False)

    return {
        "flash_decode": lambda q, k, v: flashlab.flash_decode(q, k, v, scale=scale),
        "flash_decode_lens": flash_decode_lens,
        "decode_2kernels": decode_2kernels,
        "unsplit": lambda q, k, v: attention.best_forward(q, k, v, False, scale)[0],
        "sdpa_default": sdpa_default,
        "sdpa_flash": sdpa_flash,
        "naive": naive,
    }


def _step_inputs(B, H, Hkv, nk, seed):
    """One bf16 decode step's inputs for the host-time rows: q (B, H, 1, d), k, v (B, Hkv, nk, d),
    lengths (B,) all nk; SDPA's default for the same shapes; the row's identifying fields."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)  # (B, H, 1, d)
    k, v = (torch.randn(B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    lens = torch.full((B,), nk, dtype=torch.int32, device="cuda")  # (B,)
    return q, k, v, lens, make_variants(H, Hkv, D ** -0.5)["sdpa_default"], {"B": B, "H": H, "Hkv": Hkv, "Nk": nk}


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else 0.5 * (xs[len(xs) // 2 - 1] + xs[len(xs) // 2])


def rotated_rounds(fns: dict, rounds: int = ROUNDS, warmup: int = 10, rep: int = 40) -> dict:
    """{name: [us per round]}: every function timed once per round, the order rotated each round so
    that no variant always runs first (or right after the same neighbour)."""
    names, runs = list(fns), {name: [] for name in fns}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            runs[name].append(bench_us(fns[name], warmup, rep))
    return runs


def checked_rounds(fns: dict, ref) -> tuple[dict, dict]:
    """({name: relative error against ref}, {name: [us per round]}): every function's output checked
    first, then all timed in rotated rounds (call under torch.no_grad())."""
    return {name: _common.rel_err(fn(), ref) for name, fn in fns.items()}, rotated_rounds(fns)


def rounds_entry(runs: list) -> dict:
    """us (median of the rounds), us_min, us_runs and the spread (max - min) / median of one variant."""
    med = _median(runs)
    return {"us": med, "us_min": min(runs), "us_runs": runs, "spread": (max(runs) - min(runs)) / med}


def compare_rounds(ours: list, base: list) -> dict:
    """Ours against the baseline over interleaved rounds: the ratio of medians (the target's
    ratio), of minima, of each round, and whether the difference exceeds the run-to-run spread
    (``spread``: the larger of the two variants' (max - min) / median)."""
    ratio = _median(ours) / _median(base)
    spread = max((max(x) - min(x)) / _median(x) for x in (ours, base))
    per_round = [a / b for a, b in zip(ours, base)]
    return {"ratio": ratio, "ratio_min": min(ours) / min(base), "round_ratios": per_round, "spread": spread,
            "within_spread": abs(ratio - 1.0) <= spread,
            "sign_resolved": all(x < 1.0 for x in per_round) or all(x > 1.0 for x in per_round)}


def time_row(B, H, Hkv, nk, ceilings: dict, dtype_name="bfloat16") -> dict:
    """One row of the matrix: every variant checked against SDPA FLASH, then timed; flash_decode
    and SDPA default in ROUNDS interleaved rounds spread over the row (us = median); the read
    roofline at the row's K/V bytes (``ceilings``: cache by byte count)."""
    import torch

    import read_roofline
    from flashlab import decode

    dtype = getattr(torch, dtype_name)
    scale = D ** -0.5
    g = torch.Generator(device="cuda").manual_seed(B * 1000003 + nk + Hkv)
    q = torch.randn(B, H, 1, D, device="cuda", dtype=dtype, generator=g)  # (B, H, 1, d)
    k = torch.randn(B, Hkv, nk, D, device="cuda", dtype=dtype, generator=g)  # (B, Hkv, Nk, d)
    v = torch.randn(B, Hkv, nk, D, device="cuda", dtype=dtype, generator=g)  # (B, Hkv, Nk, d)
    kv_bytes = 2 * k.numel() * k.element_size()
    choice = decode.choice_for(q, k)
    row = {"B": B, "H": H, "Hkv": Hkv, "Nk": nk, "Nq": 1, "d": D, "dtype": dtype_name, "kv_bytes": kv_bytes,
           "num_splits": choice.splits, "wide_config": choice.wide, "fused_combine": choice.fused,
           "results": {}}
    variants = make_variants(H, Hkv, scale)
    round_names = ROUND_VARIANTS
    res = row["results"]
    runs = {name: [] for name in round_names}

    def timed(name, fn):  # a backend that refuses the shape is recorded, not fatal
        try:
            return fn()
        except Exception as exc:
            res[name] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            return None

    def one_round(order):
        for name in order:
            if "error" not in res[name]:
                us = timed(name, lambda: bench_us(lambda: variants[name](q, k, v)))
                if us is not None:
                    runs[name].append(us)

    with torch.no_grad():
        ref = variants["sdpa_flash"](q, k, v).float()
        for name, fn in variants.items():  # every output checked before anything is timed
            if name == "naive" and kv_bytes * H / Hkv / 2**30 > NAIVE_MAX_GIB:
                res[name] = {"skipped": f"repeated K+V over {NAIVE_MAX_GIB:.0f} GiB"}
                continue
            err = timed(name, lambda: _common.rel_err(fn(q, k, v), ref))
            if err is not None:
                res[name] = {"rel_err_vs_sdpa_flash": err}
            torch.cuda.empty_cache()
        one_round(round_names)  # round 1
        for name, fn in variants.items():
            if name in round_names or "rel_err_vs_sdpa_flash" not in res[name]:
                continue
            us = timed(name, lambda: bench_us(lambda: fn(q, k, v)))
            if us is not None:
                res[name].update(us=us, tb_s=kv_bytes / us / 1e6)
            torch.cuda.empty_cache()
        one_round(round_names[::-1])  # round 2, the other order
        for name in GRAPH_VARIANTS:
            if "error" in res[name] or (res[name]["us"] if "us" in res[name] else min(runs[name])) > GRAPH_MAX_US:
                continue
            fn = variants[name]
            graph = timed(name, lambda: graph_us(lambda: fn(q, k, v)))
            if graph is not None:
                res[name]["graph_us"] = graph
                calls = host_calls(res[name]["us"] if "us" in res[name] else min(runs[name]))
                wall, issue = host_us(lambda: fn(q, k, v), calls)
                res[name].update(host_us=wall, issue_us=issue, host_calls=calls)
        one_round(round_names)  # round 3
        for name in round_names:
            if "error" not in res[name] and runs[name]:
                res[name].update(rounds_entry(runs[name]))
                res[name]["tb_s"] = kv_bytes / res[name]["us"] / 1e6
        if all(len(runs[name]) == ROUNDS for name in ROUND_VARIANTS):
            row["vs_sdpa_default"] = compare_rounds(runs["flash_decode"], runs["sdpa_default"])
        # -- the read roofline at this byte count (one pure-read kernel, best config)
        if kv_bytes not in ceilings:
            sms = torch.cuda.get_device_properties(0).multi_processor_count
            configs = read_roofline.CONFIGS if kv_bytes <= 2**30 else read_roofline.CONFIGS_LARGE
            ceilings[kv_bytes] = read_roofline.ceiling(k, v, sms, lambda fn: bench_us(fn, 5, 20), configs)
        ceiling = ceilings[kv_bytes]
        row["read_ceiling"] = {"us": ceiling["us"], "tb_s": ceiling["tb_s"], "config": ceiling["config"]}
        for name in ("flash_decode", "sdpa_default"):
            if "us" in res[name]:
                res[name]["read_fraction"] = ceiling["us"] / res[name]["us"]  # 1.0: as fast as a pure read
    del q, k, v
    torch.cuda.empty_cache()
    return row


def print_table(rows_out):
    print(f"{'B':>3} {'H':>3} {'Hkv':>3} {'Nk':>7} {'spl':>4} | " + " ".join(f"{v[:14]:>14}" for v in VARIANTS)
          + " | TB/s  vs default | graph: decode sdpa  host: decode sdpa")
    for r in rows_out:
        if r.get("skipped"):
            print(f"{r['B']:>3} {r['H']:>3} {r['Hkv']:>3} {r['Nk']:>7}  skipped: {r['skipped']}")
            continue
        cells = []
        for v in VARIANTS:
            res = r["results"].get(v, {})
            cells.append(f"{res['us']:>12.1f}us" if "us" in res else f"{'-':>14}")
        fd, sd = r["results"].get("flash_decode", {}), r["results"].get("sdpa_default", {})
        ratio = fd["us"] / sd["us"] if "us" in fd and "us" in sd else float("nan")
        print(f"{r['B']:>3} {r['H']:>3} {r['Hkv']:>3} {r['Nk']:>7} {r['num_splits']:>4} | " + " ".join(cells)
              + f" | {fd.get('tb_s', float('nan')):>4.2f} {ratio:>5.2f}x | {fd.get('graph_us', float('nan')):>7.1f} "
              f"{sd.get('graph_us', float('nan')):>7.1f} {fd.get('host_us', float('nan')):>6.1f} {sd.get('host_us', float('nan')):>6.1f}")


def print_summary(rows_out):
    """The target table: flash_decode vs SDPA default per row (us = median of the rounds, ratio,
    spread, TB/s, the read ceiling and the fraction of it, host_us, graph_us)."""
    print(f"{'row (B,H,Hkv,Nk)':>20} {'spl':>5} {'ours us':>9} {'SDPA us':>9} {'ratio':>6} {'min':>6} {'spread':>6} "
          f"{'in?':>3} {'TB/s':>5} {'read us':>8} {'ours/rd':>7} {'sdpa/rd':>7} {'host ours':>9} {'host SDPA':>9} "
          f"{'graph ours':>10} {'graph SDPA':>10}")
    for r in rows_out:
        if r.get("skipped"):
            continue
        fd, sd = (r["results"].get(n, {}) for n in ("flash_decode", "sdpa_default"))
        cmp_, ceiling = r.get("vs_sdpa_default", {}), r.get("read_ceiling", {})
        nan = float("nan")
        kind = f"{r['num_splits']}{'w' if r.get('wide_config') else ''}{'' if r.get('fused_combine', True) else 'k'}"
        print(f"{str((r['B'], r['H'], r['Hkv'], r['Nk'])):>20} {kind:>5} {fd.get('us', nan):>9.1f} "
              f"{sd.get('us', nan):>9.1f} {cmp_.get('ratio', nan):>6.3f} {cmp_.get('ratio_min', nan):>6.3f} "
              f"{100 * cmp_.get('spread', nan):>5.2f}% {'y' if cmp_.get('within_spread') else 'n':>3} "
              f"{fd.get('tb_s', nan):>5.2f} {ceiling.get('us', nan):>8.1f} {1 / fd.get('read_fraction', nan):>7.3f} "
              f"{1 / sd.get('read_fraction', nan):>7.3f} {fd.get('host_us', nan):>9.1f} {sd.get('host_us', nan):>9.1f} "
              f"{fd.get('graph_us', nan):>10.1f} {sd.get('graph_us', nan):>10.1f}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--tune", action="store_true")
    parser.add_argument("--sweep-misses", action="store_true", help="split counts and configs at the rows that miss")
    parser.add_argument("--sweep-combine", action="store_true", help="split counts x combines (and configs) per row")
    parser.add_argument("--skip-chunk", action="store_true", help="full run without the bottom-right chunk")
    parser.add_argument("--paged", action="store_true", help="only the paged-cache rows and the launch path")
    parser.add_argument("--probe", action="store_true", help="read experiments at 134 MB and the one-wave rows")
    parser.add_argument("--out", type=Path, default=None, help="results file (default $OUT or results/)")
    args = parser.parse_args(argv)
    if args.dry_run:
        for r in rows():
            print(r)
        return 0
    refusal = _common.timing_refusal()
    if refusal:
        print(refusal)
        return 2
    out_dir = Path(os.environ["OUT"]) if os.environ.get("OUT") else _common.REPO / "benchmarks" / "results"
    if args.sweep_combine or args.sweep_misses or args.tune:
        import decode_sweeps  # the sweeps of calls 1-5
    if args.sweep_combine:
        t0 = time.time()
        payload = {"environment": _common.environment(), "sweep_combine": decode_sweeps.sweep_combine()}
        payload["wall_s"] = time.time() - t0
        _common.write_json(args.out or out_dir / "decode_sweep_combine.json", payload)
        return 0
    if args.sweep_misses:
        payload = {"environment": _common.environment(), "sweep_misses": decode_sweeps.sweep_misses()}
        _common.write_json(args.out or out_dir / "decode_sweep_misses.json", payload)
        return 0
    if args.probe:
        import decode_probe  # call 9's experiments

        payload = {"environment": _common.environment()}
        path = args.out or out_dir / "decode_probe.json"
        payload["probe"] = decode_probe.probe(lambda part: _common.write_json(path, dict(payload, probe=part)))
        _common.write_json(path, payload)
        return 0
    if args.paged:
        import decode_extras

        t0 = time.time()
        payload = {"environment": _common.environment(), "paged": decode_extras.paged_cache(),
                   "launch_path": decode_extras.launch_path()}
        payload["wall_s"] = time.time() - t0
        _common.write_json(args.out or out_dir / "decode_paged.json", payload)
        for r in payload["launch_path"]["rows"]:
            print("launch path (host_us, issue_us):", r)
        print("direct launch used:", payload["launch_path"]["direct_launch_used"])
        return 0
    if args.tune:
        payload = {"environment": _common.environment(), "tune": decode_sweeps.tune()}
        _common.write_json(args.out or out_dir / "decode_tune.json", payload)
        for s in payload["tune"]["splits"]:
            print("splits", s)
        for t in payload["tune"]["threshold"]:
            print("threshold", t)
        return 0
    t0 = time.time()
    out_path = args.out or out_dir / "bench_decode.json"
    payload = {"environment": _common.environment(), "method": {
        "time": "median of triton.testing.do_bench(warmup=25 ms, rep=100 ms), L2 cleared before every run",
        "bandwidth": "bytes of K and V read (2*B*Hkv*Nk*d*2 B) / time",
        "check": "each variant's output vs SDPA FLASH's on the same inputs (relative Frobenius error)",
        "inputs": "torch.randn, bf16, d = 128, Nq = 1, cache_seqlens None (every key valid); "
                  "flash_decode_lens: cache_seqlens = Nk for every sequence, check_lengths=False (the "
                  "sync-free step: no host check of the lengths; launch_path.checked times the default check)",
        "repeats": f"flash_decode and sdpa_default: {ROUNDS} interleaved rounds per row (start; after the other "
                   "variants, reverse order; after the host timings); us = median of the rounds' do_bench "
                   "medians (us_runs), us_min the smallest; vs_sdpa_default: ratio of medians, per-round "
                   "ratios, spread = larger (max - min) / median of the two, within_spread = |ratio - 1| <= spread",
        "read_ceiling": "best do_bench median (warmup 5 ms, rep 20 ms, L2 cleared) of a pure-read Triton kernel "
                        "(read_roofline.py) over the row's K and V, over read_roofline.CONFIGS",
        "host_us": "wall time of host_calls back-to-back calls / host_calls, torch.cuda.synchronize before "
                   "and after (10 calls of warm-up first); issue_us: the host's time to issue them"}}
    phases = payload["phase_s"] = {}

    def phase(name, fn):
        t = time.time()
        payload[name] = fn()
        phases[name] = round(time.time() - t, 1)
        _common.write_json(out_path, payload)

    import decode_extras  # the parts beside the matrix
    import decode_sweeps

    phase("copy_ceiling", decode_extras.copy_ceiling)
    phase("split_wide", decode_sweeps.split_wide)
    rows_out, ceilings = [], {}
    t = time.time()
    for B, H, Hkv, nk, skip in rows():
        if skip:
            rows_out.append({"B": B, "H": H, "Hkv": Hkv, "Nk": nk, "skipped": skip})
            continue
        rows_out.append(time_row(B, H, Hkv, nk, ceilings))
        payload["rows"] = rows_out
        payload["read_ceilings"] = {str(n): c for n, c in sorted(ceilings.items())}
        _common.write_json(out_path, payload)
    phases["rows"] = round(time.time() - t, 1)
    phase("paged", decode_extras.paged_cache)
    phase("read_ceiling_graph", lambda: decode_extras.read_ceiling_graph(ceilings))
    phase("launch_path", decode_extras.launch_path)
    if not args.skip_chunk:
        phase("bottom_right_chunk", lambda: [decode_extras.bottom_right_chunk(Hkv=8),
                                             decode_extras.bottom_right_chunk(Hkv=32)])
    payload["wall_s"] = time.time() - t0
    _common.write_json(out_path, payload)
    print(f"copy ceiling: {payload['copy_ceiling']['tb_s']:.2f} TB/s (read + written); phases (s): {phases}")
    for br in payload.get("bottom_right_chunk", []):
        print("bottom-right chunk:", {k: (round(v, 3) if isinstance(v, float) else v) for k, v in br.items()})
    for r in payload["launch_path"]["rows"]:
        print("launch path (host_us, issue_us):", r)
    print("direct launch used:", payload["launch_path"]["direct_launch_used"])
    print("read ceiling in graph replays:", payload["read_ceiling_graph"])
    print_table(rows_out)
    print_summary(rows_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
