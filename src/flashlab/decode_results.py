"""What notebook 09 shows of decode: the split rule as a table, the committed measurements
(``benchmarks/results/bench_decode.json``) as a table and a summary, and a live timing on a GPU.

The kernel is :mod:`flashlab.kernels.flash_decode`; the public function and the split rule are in
:mod:`flashlab.decode`. Nothing here computes attention for the library.
"""
from __future__ import annotations

from .decode import flash_decode, flat_programs, split_rule


def split_rule_table(sms: int = 132, programs_per_sm: int = 2, max_len: int = 32768,
                     shapes=((1, 32), (1, 8), (4, 8), (4, 31), (16, 8), (64, 8), (64, 32))) -> str:
    """The split rule's choice (``flashlab.split_rule.split_rule``) for (batch, kv heads) pairs at one cache
    length, as a text table: programs without splitting, splits, programs with them, programs per
    SM, the tile config (default, or wide: one program per SM) and the combine (fused in the last
    split, or the second kernel; flat: the wide config's ranges walked by one program per SM where every
    length is N_max, ``flashlab.split_rule.flat_programs``). Defaults: an H200 (132 SMs, 2 programs per SM
    at the bf16 d = 128 config), Nq = 1, GQA groups <= 64 rows."""
    lines = [f"{sms} SMs x {programs_per_sm} programs of the default config; cache of {max_len} keys; "
             "unsplit = programs without splitting (batch x kv heads), programs = with the splits",
             f"{'batch':>6} {'kv heads':>9} {'unsplit':>9} {'splits':>7} {'programs':>9} {'per SM':>7} "
             f"{'config':>10} {'combine':>8}"]
    for batch, kv_heads in shapes:
        choice = split_rule(batch, kv_heads, 1, max_len, sms, programs_per_sm)
        programs = batch * kv_heads * choice.splits
        combine = "-" if choice.splits == 1 else "fused" if choice.fused else "kernel"
        config = "default" if not choice.wide else (
            "wide+flat" if choice.splits == 1 and flat_programs(programs, sms, max_len) else "wide")
        lines.append(f"{batch:>6} {kv_heads:>9} {batch * kv_heads:>9} {choice.splits:>7} {programs:>9} "
                     f"{programs / sms:>7.2f} {config:>10} {combine:>8}")
    if any(line.split()[-2] == "wide+flat" for line in lines[2:]):
        lines[0] += ("; wide+flat: with every sequence at the full length, one program per SM walks several "
                     "of them (the flat walk)")
    from .course import wrap_prose

    return "\n".join([wrap_prose(lines[0])] + lines[1:])


def results_table(payload: dict | None = None) -> str:
    """``benchmarks/results/bench_decode.json`` as a text table, or a sentence saying it is missing.
    Per row: us per decode step (do_bench, L2 cleared) of naive, the unsplit rung, flash_decode and
    SDPA default; flash_decode's TB/s of K and V read and its time over SDPA's; ``host_us`` (wall
    time per call of back-to-back calls, both) and ``graph_us`` (one call's share of a CUDA-graph
    replay, both), where the file has them. ``payload``: the parsed file (default: load it)."""
    if payload is None:
        from . import course

        payload = course.load_results("bench_decode.json").get("bench_decode")
    if not payload or not payload.get("rows"):
        return "no benchmarks/results/bench_decode.json yet (run `python benchmarks/bench_decode.py` on a GPU)"
    env = payload.get("environment", {})
    names = ("naive", "unsplit", "flash_decode", "sdpa_default")
    lines = [f"{env.get('device', '?')}, {env.get('date_utc', '?')[:10]}: bf16, d = 128, Nq = 1; us per step "
             "(median of do_bench, L2 cleared); TB/s = K and V bytes / time; host = wall us per call of "
             "back-to-back calls; graph = us per call in a CUDA-graph replay (ours / SDPA default); "
             "splits: flash_decode's split count, w = the wide config (one program per SM); - = not "
             "measured at that row (naive is not run where K and V repeated to every query head pass 16 GiB; "
             "host and graph times are taken only at some rows)",
             f"{'B':>3} {'H':>3} {'Hkv':>3} {'Nk':>7} {'splits':>6} " + " ".join(f"{n:>12}" for n in names)
             + f" {'TB/s':>5} {'vs SDPA':>7} {'host us':>13} {'graph us':>13}"]

    def pair(a: dict, b: dict, field: str) -> str:
        return f"{a[field]:>6.1f}/{b[field]:<6.1f}" if field in a and field in b else f"{'-':>13}"

    for r in payload["rows"]:
        head = f"{r['B']:>3} {r['H']:>3} {r['Hkv']:>3} {r['Nk']:>7}"
        if r.get("skipped"):
            lines.append(f"{head} skipped: {r['skipped']} (the benchmark's cap: SDPA's and naive's buffers come on top)")
            continue
        res = r["results"]
        cells = [f"{res[n]['us']:>12.1f}" if "us" in res.get(n, {}) else f"{'-':>12}" for n in names]
        fd, sd = res.get("flash_decode", {}), res.get("sdpa_default", {})
        ratio = f"{fd['us'] / sd['us']:>6.3f}x" if "us" in fd and "us" in sd else f"{'-':>7}"  # 1.004x, not 1.00x
        tb_s = f"{fd['tb_s']:>5.2f}" if "tb_s" in fd else f"{'-':>5}"
        splits = f"{r['num_splits']}{' w' if r.get('wide_config') else ''}"  # w: the wide config
        lines.append(f"{head} {splits:>6} " + " ".join(cells) + f" {tb_s} {ratio} "
                     f"{pair(fd, sd, 'host_us')} {pair(fd, sd, 'graph_us')}")
    if any(line.split()[-2] == "wide+flat" for line in lines[2:]):
        lines[0] += ("; wide+flat: with every sequence at the full length, one program per SM walks several "
                     "of them (the flat walk)")
    from .course import wrap_prose

    return "\n".join([wrap_prose(lines[0])] + lines[1:])  # the caption wrapped; the rows one line each


def results_summary(payload: dict | None = None, target_tb_s: float = 3.5) -> str:
    """The decode targets read from ``bench_decode.json`` (``payload``: the parsed file, default:
    load it), as sentences: rows at or under SDPA default's time, the worst rows, K/V bandwidth at
    Nk >= 32k against ``target_tb_s``, and the host's time per call (issue and steady state)."""
    if payload is None:
        from . import course

        payload = course.load_results("bench_decode.json").get("bench_decode")
    rows = [r for r in (payload or {}).get("rows", []) if not r.get("skipped")
            and "us" in r["results"].get("flash_decode", {}) and "us" in r["results"].get("sdpa_default", {})]
    if not rows:
        return "no benchmarks/results/bench_decode.json yet (run `python benchmarks/bench_decode.py` on a GPU)"

    def name(r):
        return f"B={r['B']} H={r['H']} Hkv={r['Hkv']} Nk={r['Nk']}"

    ratio = {name(r): r["results"]["flash_decode"]["us"] / r["results"]["sdpa_default"]["us"] for r in rows}
    worst = sorted(ratio, key=ratio.get, reverse=True)[:3]
    long = [r["results"]["flash_decode"]["tb_s"] for r in rows if r["Nk"] >= 32768]
    lines = [f"flash_decode at or under SDPA default's time on {sum(x <= 1.0 for x in ratio.values())} of "
             f"{len(rows)} rows, within 1.02x on {sum(x <= 1.02 for x in ratio.values())}; worst: "
             + ", ".join(f"{n} {ratio[n]:.3f}x" for n in worst),
             f"K/V read at Nk >= 32k: {min(long):.2f}-{max(long):.2f} TB/s, >= {target_tb_s} TB/s on "
             f"{sum(x >= target_tb_s for x in long)} of {len(long)} rows" if long else "no row with Nk >= 32k"]
    over = [r for r in rows if ratio[name(r)] > 1.0 and "vs_sdpa_default" in r]
    if over:
        within = [r for r in over if r["vs_sdpa_default"].get("within_spread")]
        lines.append(f"of the {len(over)} rows over SDPA default, {len(within)} differ from it by less than the "
                     "run-to-run spread of their interleaved rounds" + (
                         f"; the other {len(over) - len(within)} by more: " + ", ".join(
                             f"{name(r)} {ratio[name(r)]:.3f}x" for r in over if r not in within)
                         if len(within) < len(over) else ""))
    read = [r for r in rows if "us" in r.get("read_ceiling", {})]
    if read:
        def over_read(r, variant):
            return r["results"][variant]["us"] / r["read_ceiling"]["us"]

        small = min(read, key=lambda r: r["read_ceiling"]["us"])
        big = [r for r in read if r["kv_bytes"] >= 2**31] if all("kv_bytes" in r for r in read) else []
        lines.append(f"time over a kernel that only reads the same K and V (the read roofline): at the smallest "
                     f"row ({name(small)}, pure read {small['read_ceiling']['us']:.1f} us) flash_decode "
                     f"{over_read(small, 'flash_decode'):.2f}x, SDPA default {over_read(small, 'sdpa_default'):.2f}x"
                     + (f"; from 2 GiB of K and V up flash_decode {min(over_read(r, 'flash_decode') for r in big):.2f}-"
                        f"{max(over_read(r, 'flash_decode') for r in big):.2f}x" if big else ""))
    for field, what in (("issue_us", "host time to issue one call"), ("host_us", "steady-state wall time per call")):
        ours = [r["results"]["flash_decode"][field] for r in rows if field in r["results"]["flash_decode"]]
        sdpa = [r["results"]["sdpa_default"][field] for r in rows if field in r["results"]["sdpa_default"]]
        if ours and sdpa and field == "issue_us":
            lines.append(f"{what}: flash_decode {min(ours):.0f}-{max(ours):.0f} us, SDPA default "
                         f"{min(sdpa):.0f}-{max(sdpa):.0f} us")
        elif ours and sdpa:
            small = min(rows, key=lambda r: r["kv_bytes"] if "kv_bytes" in r else r["B"] * r["Hkv"] * r["Nk"])
            lines.append(f"{what} at the smallest row ({name(small)}): flash_decode "
                         f"{small['results']['flash_decode'][field]:.1f} us, SDPA default "
                         f"{small['results']['sdpa_default'][field]:.1f} us")
    from .course import wrap_prose

    return wrap_prose("\n".join(lines))


def repeat_summary(payload: dict | None = None, p_level: float = 0.05) -> str:
    """``benchmarks/results/decode_repeat.json`` (many interleaved rounds per row of flash_decode against
    SDPA's default) as sentences: the rows where flash_decode won or lost significantly more rounds
    (two-sided sign test below ``p_level``), with their ratio of medians, and the rows with no winner.
    ``payload``: the parsed file (default: load it)."""
    if payload is None:
        from . import course

        payload = course.load_results("decode_repeat.json").get("decode_repeat")
    rows = (payload or {}).get("rows") or []
    if not rows:
        return "no benchmarks/results/decode_repeat.json yet (run `python benchmarks/decode_repeat.py` on a GPU)"

    def name(r):
        return f"({r['B']},{r['H']},{r['Hkv']},{r['Nk'] // 1024}k) {r['ratio_of_medians']:.4f}x"  # no line break inside

    won = [r for r in rows if r["sign_test_p"] < p_level and 2 * r["rounds_flash_decode_faster"] > r["rounds_decided"]]
    lost = [r for r in rows if r["sign_test_p"] < p_level and r not in won]
    even = [r for r in rows if r not in won and r not in lost]
    env = payload.get("environment", {})
    lines = [f"{payload.get('rounds', '?')} interleaved rounds per row on one {env.get('device', 'GPU')} "
             f"({env.get('date_utc', '?')[:10]}; rows as (B,H,Hkv,Nk), time over SDPA default's): flash_decode "
             f"faster in most rounds at {len(won)} of {len(rows)} rows, slower at {len(lost)}"
             + (": " + ", ".join(name(r) for r in sorted(lost, key=lambda r: -r["ratio_of_medians"])) if lost else "")]
    if even:
        lines.append(f"no winner (sign test p >= {p_level}) at {len(even)}: "
                     + ", ".join(name(r) for r in even))
    from .course import wrap_prose

    return wrap_prose("\n".join(lines))


def time_live(shapes=((1, 32, 8, 32768), (16, 32, 8, 32768)), dtype_name: str = "bfloat16") -> str:
    """Time, on this machine's GPU, one decode step (Nq = 1, d = 128) of naive attention, the
    course's unsplit rung and flash_decode at each (B, H, Hkv, Nk); a text table (us, TB/s)."""
    import torch
    import triton.testing

    from .kernels import attention

    dtype = getattr(torch, dtype_name)
    lines = [f"{'B':>3} {'H':>3} {'Hkv':>3} {'Nk':>7} {'naive us':>9} {'unsplit us':>10} {'split-KV us':>11} "
             f"{'split-KV TB/s':>13}"]
    for B, H, Hkv, n_k in shapes:
        q = torch.randn(B, H, 1, 128, device="cuda", dtype=dtype)  # (B, H, 1, d)
        k, v = (torch.randn(B, Hkv, n_k, 128, device="cuda", dtype=dtype) for _ in range(2))  # (B, Hkv, Nk, d)

        def naive():
            kk, vv = k.repeat_interleave(H // Hkv, 1), v.repeat_interleave(H // Hkv, 1)  # (B, H, Nk, d)
            return torch.softmax(q @ kk.transpose(-1, -2) * 128 ** -0.5, dim=-1) @ vv

        times = [1e3 * triton.testing.do_bench(fn, return_mode="median") for fn in (
            naive, lambda: attention.best_forward(q, k, v, False, 128 ** -0.5), lambda: flash_decode(q, k, v))]
        kv_bytes = 2 * k.numel() * k.element_size()
        lines.append(f"{B:>3} {H:>3} {Hkv:>3} {n_k:>7} {times[0]:>9.1f} {times[1]:>10.1f} {times[2]:>11.1f} "
                     f"{kv_bytes / times[2] / 1e6:>13.2f}")
    return "\n".join(lines)


def _sizes(**sizes) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive int")


def traffic_table(ns=(1024, 8192, 65536), d: int = 128, block: int = 128) -> str:
    """One decode step (Nq = 1) of one head in fp16, as text: per cache length N, the HBM bytes of naive
    attention and of the FlashAttention-2 forward with ``block`` x ``block`` tiles and float32 statistics
    (``flashlab.traffic``), their ratio, and the step's FLOPs per flash byte (``flops.attention_flops``)."""
    from . import traffic as tr
    from .flops import attention_flops
    from .viz.style import format_bytes

    ns = tuple(ns)
    if not ns:
        raise ValueError(f"ns={ns!r} must hold at least one cache length")
    _sizes(d=d, block=block, **{f"ns[{i}]": n for i, n in enumerate(ns)})
    lines = [f"{'N (cache)':>10} {'naive bytes':>12} {'flash bytes':>12} {'naive/flash':>12} {'FLOP/byte':>10}"]
    for n in ns:
        naive = tr.naive_traffic(1, n, d).total
        flash = tr.fa2_forward_traffic(1, n, d, block_q=block, block_k=block, stat_itemsize=4).total
        lines.append(f"{n:>10} {format_bytes(naive):>12} {format_bytes(flash):>12} {naive / flash:>11.2f}x "
                     f"{attention_flops(1, n, d) / flash:>10.2f}")
    return "\n".join(lines)


def cache_floor_table(heads: int = 32, n_ctx: int = 32768, d: int = 128, itemsize: int = 2,
                      kv_heads=(32, 8, 1)) -> str:
    """The KV cache of one layer and one sequence (K and V: 2 x kv heads x n_ctx x d x itemsize bytes) and
    the least time a decode step can take to read it at the H200 datasheet's HBM bandwidth
    (``hardware.H200_DATASHEET``), as text: one line per entry of ``kv_heads`` (multi-head where it equals
    ``heads``, multi-query at 1, grouped-query between)."""
    from .hardware import H200_DATASHEET
    from .viz.style import format_bytes

    _sizes(heads=heads, n_ctx=n_ctx, d=d, itemsize=itemsize)
    kv_heads = tuple(kv_heads)
    if not kv_heads or any(isinstance(h, bool) or not isinstance(h, int) or h < 1 or heads % h for h in kv_heads):
        raise ValueError(f"kv_heads={kv_heads!r} must be positive ints that divide heads={heads}")
    lines = []
    for h_kv in kv_heads:
        name = ("multi-head (MHA)" if h_kv == heads else "multi-query (MQA)" if h_kv == 1
                else f"grouped-query (GQA, {h_kv} kv heads)")
        cache = 2 * h_kv * n_ctx * d * itemsize  # K and V
        us = cache / H200_DATASHEET.hbm_bytes_per_s * 1e6
        lines.append(f"{name:<33} KV cache {format_bytes(cache):>9} per layer and sequence "
                     f"-> >= {us:6.1f} us per decode step")
    return "\n".join(lines)


def split_kv_table(splits=(1, 4, 16, 64), n_cache: int = 1000, d: int = 64, heads: int = 4, seed: int = 0,
                   model_heads: int = 32, model_splits: int = 16) -> str:
    """Split-KV is exact, measured: per number of splits, the max abs difference between
    ``decode.split_kv_decode`` and ``naive_attention`` for one new token of ``heads`` heads over a cache of
    ``n_cache`` keys (q (heads, 1, d), then k and v (heads, n_cache, d), drawn from
    ``np.random.default_rng(seed)``); then the programs a batch of one with ``model_heads`` heads launches
    without splitting and with ``model_splits`` splits, beside an H200's SM count."""
    import numpy as np

    from .decode import split_kv_decode
    from .hardware import H200
    from .reference import naive_attention

    splits = tuple(splits)
    if not splits:
        raise ValueError(f"splits={splits!r} must hold at least one number of splits")
    _sizes(n_cache=n_cache, d=d, heads=heads, model_heads=model_heads, model_splits=model_splits)
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((heads, 1, d))  # (heads, 1, d): one new token
    k, v = rng.standard_normal((heads, n_cache, d)), rng.standard_normal((heads, n_cache, d))  # (heads, N, d)
    reference = naive_attention(q, k, v)  # (heads, 1, d)
    lines = [f"{s:>3} splits: max |split-KV - reference| = {np.abs(split_kv_decode(q, k, v, s) - reference).max():.1e}"
             for s in splits]
    lines.append(f"programs at batch 1, {model_heads} heads: {model_heads} without splitting, "
                 f"{model_heads * model_splits} with {model_splits} splits ({H200.sms} SMs on an H200)")
    return "\n".join(lines)


def naive_vs_flash_live(shapes=(("prefill", 4096, 4096), ("decode", 1, 32768)), heads: int = 32,
                        d: int = 128) -> str:
    """Time, on this machine's GPU, naive attention (matmul, softmax, matmul in bf16) and
    ``flash_attention`` at each (name, Nq, Nk) of batch 1 with ``heads`` heads of dim ``d``, as text:
    both times (ms, ``triton.testing.do_bench``) and naive / flash. Needs a CUDA GPU (RuntimeError
    without one)."""
    import torch

    shapes = tuple(shapes)
    if not shapes:
        raise ValueError(f"shapes={shapes!r} must hold at least one (name, Nq, Nk)")
    for i, shape in enumerate(shapes):
        if len(shape) != 3:
            raise ValueError(f"shapes[{i}]={shape!r} must be (name, Nq, Nk)")
        _sizes(**{f"shapes[{i}] Nq": shape[1], f"shapes[{i}] Nk": shape[2]})
    _sizes(heads=heads, d=d)
    if not torch.cuda.is_available():
        raise RuntimeError("naive_vs_flash_live times on a CUDA GPU and torch sees none")
    import triton.testing

    from .kernels.attention import flash_attention

    def naive_bf16(q, k, v):
        return torch.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5, dim=-1) @ v  # (B, H, Nq, d)

    lines = []
    for name, nq, nk in shapes:
        q = torch.randn(1, heads, nq, d, device="cuda", dtype=torch.bfloat16)  # (B, H, Nq, d)
        k, v = (torch.randn(1, heads, nk, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))  # (B, H, Nk, d)
        ms_naive = triton.testing.do_bench(lambda: naive_bf16(q, k, v))
        ms_flash = triton.testing.do_bench(lambda: flash_attention(q, k, v))
        lines.append(f"{name:<8} Nq = {nq:>5}, Nk = {nk:>6}: naive {ms_naive:7.3f} ms, flash_attention "
                     f"{ms_flash:7.3f} ms, naive / flash {ms_naive / ms_flash:5.2f}x")
    return "\n".join(lines)
