"""Numbers and tables read from the committed benchmark results (notebook 08, the seed's claims).

Every function takes the parsed results files (``course.load_results()``: ``{stem: json}``) or
one of them, and returns numbers or a text table; nothing here times anything. Files, all from
one NVIDIA H200 (each carries its ``environment`` block):

* ``bench_attention.json``: the protocol (B*N = 16384, H*d = 2048), every variant, with the
  ``ceilings`` measured in the same run (8192^3 bf16 matmul TFLOP/s, copy TB/s).
* ``bench_baselines.json``: torch.compile'd naive attention and FlexAttention beside SDPA.
* ``bench_memory.json``, ``ncu_traffic.json``: peak memory; DRAM bytes from Nsight Compute.

TFLOP/s everywhere use the papers' convention: forward 4*B*H*N^2*d (halved when causal),
forward+backward 3.5x that (FA2's 5 backward matmuls per tile; the course's backward executes 7:
:func:`flashlab.derive.backward_matmuls`).
"""
from __future__ import annotations

MODES = ("fwd", "fwdbwd")
BACKENDS = {"sdpa_flash": "SDPA FLASH (FlashAttention-2)", "sdpa_cudnn": "SDPA CUDNN",
            "sdpa_efficient": "SDPA EFFICIENT", "hopper": "flashlab v4_hopper",
            "gluon": "flashlab v5_gluon_ws", "flashlab": "flashlab flash_attention"}


def _need(results: dict, name: str) -> dict:
    if not isinstance(results, dict) or name not in results:
        raise KeyError(f"results has no {name!r}: expected benchmarks/results/{name}.json "
                       f"(course.load_results() returns {{file stem: parsed JSON}})")
    return results[name]


def time_of(row: dict, impl: str, mode: str = "fwd"):
    """ms of one variant in one row, or None when it was not timed."""
    if mode not in MODES:
        raise ValueError(f"mode={mode!r} must be one of {MODES}")
    return row.get("results", {}).get(impl, {}).get(f"{mode}_ms")


def ratio_range(rows, impl: str, baseline: str, mode: str = "fwd", **where) -> tuple[float, float] | None:
    """(min, max) over rows matching ``where`` (e.g. n=8192, causal=True) of baseline time / impl time."""
    vals = []
    for r in rows:
        if all(r.get(key) == val for key, val in where.items()):
            a, b = time_of(r, impl, mode), time_of(r, baseline, mode)
            if a and b:
                vals.append(b / a)
    return (min(vals), max(vals)) if vals else None


def matmul_peak(bench: dict) -> float:
    """TFLOP/s of the 8192^3 bf16 matmul measured in the same run as ``bench``."""
    try:
        return float(bench["ceilings"]["matmul_bf16_8192_tflops"])
    except (KeyError, TypeError):
        raise KeyError("the results file has no ceilings.matmul_bf16_8192_tflops") from None


def peak_fractions(bench: dict, mode: str = "fwd", dtype: str = "bfloat16", n_min: int = 4096,
                   impls=None, peak: float | None = None) -> dict:
    """impl -> (min, max) of TFLOP/s / peak over rows with N >= n_min (peak: the run's matmul)."""
    peak = matmul_peak(bench) if peak is None else float(peak)
    impls = impls or [k for k in BACKENDS if any(k in r["results"] for r in bench["rows"])]
    out = {}
    for impl in impls:
        fr = [r["results"][impl][f"{mode}_tflops"] / peak for r in bench["rows"]
              if r["dtype"] == dtype and r["n"] >= n_min
              and r["results"].get(impl, {}).get(f"{mode}_tflops")]
        if fr:
            out[impl] = (min(fr), max(fr))
    return out


def peak_table(results: dict, mode: str = "fwd") -> str:
    """Each backend's fraction of the measured matmul peak (bf16, N >= 4096), with FlexAttention."""
    bench = _need(results, "bench_attention")
    runs = [(bench, BACKENDS)]
    if "bench_baselines" in results:
        runs.append((results["bench_baselines"], {"flex": "FlexAttention (torch.compile)",
                                                   "naive_compiled": "torch.compile(naive)"}))
    peaks = {run["environment"]["date_utc"]: matmul_peak(run) for run, _ in runs}
    peak = max(peaks.values())
    lines = [f"{mode}, bf16, N >= 4096; peak = the highest 8192^3 bf16 matmul measured "
             f"({', '.join(f'{p:.0f}' for p in peaks.values())} TFLOP/s in these runs): {peak:.0f} TFLOP/s"]
    for run, names in runs:
        fr = peak_fractions(run, mode, impls=list(names), peak=peak)
        for impl, (lo, hi) in fr.items():
            lines.append(f"  {names[impl]:<32} {lo:5.0%} to {hi:5.0%}  (run of {run['environment']['date_utc'][:10]})")
    return "\n".join(lines)


def ncu_dram_ratio(ncu: dict, n: int = 4096, variant: str = "sdpa_flash") -> dict:
    """Naive DRAM bytes over a flash kernel's, as ncu measured them and counting O's write.

    ncu under-counts writes still in L2 when the kernel ends (the flash kernels' O), so the second
    ratio replaces the measured write by max(measured write, bytes of O = B*H*N*d*itemsize).
    """
    rows = {(r["variant"], r["n"]): r for r in ncu["rows"]}
    if ("naive", n) not in rows or (variant, n) not in rows:
        have = sorted(rows)
        raise ValueError(f"ncu_traffic has no naive and {variant!r} rows at n={n}; it has {have}")
    p = ncu["protocol"]
    itemsize = 2 if p["dtype"] in ("float16", "bfloat16") else 4
    o_bytes = p["batch"] * p["heads"] * n * p["d"] * itemsize
    naive = rows[("naive", n)]["dram_read_bytes"] + rows[("naive", n)]["dram_write_bytes"]
    flash = rows[(variant, n)]
    measured = flash["dram_read_bytes"] + flash["dram_write_bytes"]
    with_o = flash["dram_read_bytes"] + max(flash["dram_write_bytes"], o_bytes)
    return {"naive_bytes": naive, "flash_bytes": measured, "flash_bytes_with_o": with_o,
            "o_bytes": o_bytes, "measured_ratio": naive / measured, "ratio_with_o": naive / with_o}


def ncu_anchor_rows() -> list[dict]:
    """Notebook 04's comparison: the DRAM bytes Nsight Compute measured for one forward on the H200
    (``hardware.NCU_NAIVE``, ``NCU_FLASH``: B = 1, H = 16, N = 4096, d = 64, fp16) beside
    :mod:`flashlab.traffic`'s model. The naive row is modelled twice: as Algorithm 0 and with the
    separate scale kernel the measured naive attention runs (``naive_traffic(scale_pass=True)``)."""
    from . import hardware, traffic as tr

    naive, flash = hardware.NCU_NAIVE, hardware.NCU_FLASH

    def shape(m) -> dict:
        return dict(batch=m.batch * m.heads, itemsize=m.itemsize)

    return [
        dict(name=naive.name, measured=naive.total_bytes,
             model=tr.naive_traffic(naive.n, naive.n, naive.d, **shape(naive)).total,
             model_scale_pass=tr.naive_traffic(naive.n, naive.n, naive.d, scale_pass=True, **shape(naive)).total),
        dict(name=flash.name, measured=flash.total_bytes,  # the measured kernel's 128 x 128 tiles, fp32 lse
             model=tr.fa2_forward_traffic(flash.n, flash.n, flash.d, block_q=128, block_k=128, stat_itemsize=4,
                                          **shape(flash)).total, model_scale_pass=None)]


def ncu_anchor_table() -> str:
    """:func:`ncu_anchor_rows` as text: measured, model, and the naive row's model with its scale
    pass; then the scale kernel alone, measured (``hardware.NCU_NAIVE_SCALE``) against the pass."""
    from . import hardware
    from .viz.style import format_bytes

    lines = [f"{'one forward, B = 1, H = 16, N = 4096, d = 64, fp16':<58}{'measured':>10}{'model':>11}"
             f"{'model + scale pass':>20}"]
    for r in ncu_anchor_rows():
        extra = "" if r["model_scale_pass"] is None else format_bytes(r["model_scale_pass"])
        lines.append(f"{r['name']:<58}{format_bytes(r['measured']):>10}{format_bytes(r['model']):>11}"
                     f"{extra:>20}".rstrip())
    naive = ncu_anchor_rows()[0]
    scale_pass = naive["model_scale_pass"] - naive["model"]  # S read and written once more
    lines.append(f"the scale kernel alone: measured {format_bytes(hardware.NCU_NAIVE_SCALE.total_bytes)}; "
                 f"the model's scale pass (S read and written once more) {format_bytes(scale_pass)}")
    return "\n".join(lines)


# -- notebook 08's tables ------------------------------------------------------------------------
TARGETS = (("fwd >= 1.0x FA2, N >= 1024", "sdpa_flash", "fwd", 1.0, lambda r: r["n"] >= 1024),
           ("fwd+bwd >= 1.0x FA2, N >= 1024", "sdpa_flash", "fwdbwd", 1.0, lambda r: r["n"] >= 1024),
           ("fwd >= 0.85x cuDNN, d = 128, N >= 4096", "sdpa_cudnn", "fwd", 0.85,
            lambda r: r["d"] == 128 and r["n"] >= 4096))


def _speed(row, impl, base, mode="fwd"):
    a, b = time_of(row, impl, mode), time_of(row, base, mode)
    return b / a if a and b else None


def _fmt(x, spec=".2f"):
    return format(x, spec) if x else "n/a"


def ratio_table(bench: dict, targets: bool = False) -> str:
    """flashlab against FA2 and cuDNN, every row; with ``targets``, how many rows meet the
    project's targets (benchmarks/NOTES.md)."""
    lines = [f"{'dtype':<9}{'d':>4}{'N':>7}{'causal':>7}  {'fwd/FA2':>8}{'fwdbwd/FA2':>11}{'fwd/cuDNN':>10}"]
    for r in bench["rows"]:
        c = [_speed(r, "flashlab", ref, mode) for ref, mode in
             (("sdpa_flash", "fwd"), ("sdpa_flash", "fwdbwd"), ("sdpa_cudnn", "fwd"))]
        lines.append(f"{r['dtype']:<9}{r['d']:>4}{r['n']:>7}{int(r['causal']):>7}  "
                     f"{_fmt(c[0]):>8}{_fmt(c[1]):>11}{_fmt(c[2]):>10}")
    if not targets:
        return "\n".join(lines)
    lines.append("")
    for label, ref, mode, goal, applies in TARGETS:
        got = {(r["dtype"], r["d"], r["n"], r["causal"]): _speed(r, "flashlab", ref, mode)
               for r in bench["rows"] if applies(r)}
        short = {k: x for k, x in got.items() if x is None or x < goal}
        lines.append(f"{label:<40} met on {len(got) - len(short)} of {len(got)} rows; short: "
                     + (", ".join(f"{k} {_fmt(x, '.4f')}" for k, x in short.items()) or "none"))
    return "\n".join(lines)


def host_overhead_table(results: dict) -> str:
    """fwd/FA2 and fwd+bwd/FA2 before (call 4) and after the validate-once fix, row by row."""
    after, before_run = _need(results, "bench_attention_host_overhead"), _need(results, "bench_attention_call4")
    before = {(r["dtype"], r["d"], r["n"], r["causal"]): r for r in before_run["rows"]}
    lines = [f"{'dtype':<9}{'d':>4}{'N':>6}{'causal':>7}   fwd/FA2 before -> after   fwd+bwd/FA2 before -> after"]
    for r in after["rows"]:
        old = before.get((r["dtype"], r["d"], r["n"], r["causal"]))
        cells = [f"{_fmt(_speed(old, 'flashlab', 'sdpa_flash', m) if old else None)} -> "
                 f"{_fmt(_speed(r, 'flashlab', 'sdpa_flash', m))}" for m in MODES]
        lines.append(f"{r['dtype']:<9}{r['d']:>4}{r['n']:>6}{int(r['causal']):>7}   {cells[0]:>23}   {cells[1]:>27}")
    return "\n".join(lines)


def timing_spread(bench: dict, n_min: int = 4096) -> dict:
    """Same kernel timed twice per row (hopper / rung:v4_hopper, gluon / rung:v5_gluon_ws):
    {"median": spread, "largest": spread, "where": row key}; spread = slower / faster - 1."""
    spread = {}
    for r in bench["rows"]:
        for pair in (("hopper", "rung:v4_hopper"), ("gluon", "rung:v5_gluon_ws")):
            times = [time_of(r, name) for name in pair]
            if all(times) and r["n"] >= n_min:
                spread[(pair[0], r["dtype"], r["d"], r["n"], r["causal"])] = max(times) / min(times) - 1
    if not spread:
        return {}
    worst = max(spread, key=spread.get)
    return {"median": sorted(spread.values())[len(spread) // 2], "largest": spread[worst], "where": worst}


def rows_of(bench: dict, d: int, causal: bool, dtype: str = "bfloat16") -> list:
    """The rows of one (dtype, d, causal) panel, by increasing N."""
    return sorted((r for r in bench["rows"] if r["dtype"] == dtype and r["d"] == d and r["causal"] == causal),
                  key=lambda r: r["n"])


def grid_speedups(bench: dict, d: int = 128) -> list[tuple[int, int, float]]:
    """(N, B*H programs of v0, measured v1/v0 speed-up), bf16, not causal."""
    out = []
    for r in rows_of(bench, d, False):
        gain = _speed(r, "rung:v1_minimal", "rung:v0_grid_bh")
        if gain:
            out.append((r["n"], r["batch"] * r["heads"], gain))
    return out


def gluon_gain_table(bench: dict) -> str:
    """v5_gluon_ws over v4_hopper per bf16 d=128 row, and which one flash_attention uses."""
    from .kernels import flash_fwd_gluon

    lines = []
    for r in rows_of(bench, 128, False) + rows_of(bench, 128, True):
        gain = _speed(r, "rung:v5_gluon_ws", "rung:v4_hopper")
        uses = flash_fwd_gluon.prefers_work(r["d"], r["n"], r["n"], r["causal"], r["batch"] * r["heads"])
        short = uses and flash_fwd_gluon.short_causal(r["d"], r["n"], r["n"], r["causal"])
        if gain:
            lines.append(f"bf16 d = 128 N = {r['n']:>5} causal = {int(r['causal'])}: v5 / v4 speed {gain:4.2f}x; "
                         f"flash_attention uses {'v5_gluon_ws' if uses else 'v4_hopper'}"
                         + (" on a persistent grid (timed apart)" if short else ""))
    return "\n".join(lines)


def ncu_table(ncu: dict, l2_bytes: int) -> str:
    """ncu's DRAM bytes per variant and N beside flashlab.traffic's model, and S's size against L2."""
    from .viz.style import format_bytes

    heads = ncu["protocol"]["heads"]
    lines = [f"{'variant':<11}{'N':>6}{'DRAM read':>11}{'DRAM write':>11}{'model read':>11}{'model write':>12}"
             f"{'measured/model':>15}{'GPU time':>10}{'S, all heads':>14}"]
    for r in ncu["rows"]:
        key = "naive" if r["variant"] == "naive" else next(k for k in r["model"] if k.startswith("flash"))
        model = r["model"][key]
        measured, modelled = r["dram_read_bytes"] + r["dram_write_bytes"], model["read"] + model["write"]
        s_bytes = heads * r["n"] ** 2 * 2
        lines.append(f"{r['variant']:<11}{r['n']:>6}{format_bytes(r['dram_read_bytes']):>11}"
                     f"{format_bytes(r['dram_write_bytes']):>11}{format_bytes(model['read']):>11}"
                     f"{format_bytes(model['write']):>12}{measured / modelled:>15.2f}{r['gpu_time_ns'] / 1e3:>8.0f} us"
                     f"{format_bytes(s_bytes):>14}{' < L2' if s_bytes < l2_bytes else ''}")
    return "\n".join(lines)


def naive_gain_table(bench: dict, impl: str = "flashlab") -> str:
    """naive time / impl time for every bf16 (d, N), four columns (causal x pass), and the range."""
    columns = [(False, "fwd"), (True, "fwd"), (False, "fwdbwd"), (True, "fwdbwd")]
    lines = [f"{'d':>4}{'N':>7}  {'not causal fwd':>15}{'causal fwd':>12}{'not causal fwd+bwd':>20}{'causal fwd+bwd':>16}"]
    gains = {}
    for d in (64, 128):
        by_causal = {c: {r["n"]: r for r in rows_of(bench, d, c)} for c in (False, True)}
        for n in sorted(by_causal[False]):
            cells = []
            for causal, mode in columns:
                row = by_causal[causal].get(n)
                g = _speed(row, impl, "naive", mode) if row else None
                if g:
                    gains[(d, n, causal, mode)] = g
                cells.append(f"{g:.1f}x" if g else "n/a")
            lines.append(f"{d:>4}{n:>7}  {cells[0]:>15}{cells[1]:>12}{cells[2]:>20}{cells[3]:>16}")
    if gains:
        lo, hi = min(gains, key=gains.get), max(gains, key=gains.get)
        lines.append(f"\nfrom {gains[lo]:.1f}x (d, N, causal, pass = {lo}) to {gains[hi]:.1f}x ({hi})")
        for d in (64, 128):
            keys = [k for k in gains if k[0] == d and k[2:] == (False, "fwd")]
            if keys:
                lines.append(f"d = {d}: the non-causal forward gain is largest at N = {max(keys, key=gains.get)[1]}")
        lines.append("non-causal forward TFLOP/s by N (the gain is the ratio of the two):")
        for d in (64, 128):
            rows = sorted(rows_of(bench, d, False), key=lambda r: r["n"])
            for name in ("naive", impl):
                rates = [r["results"].get(name, {}).get("fwd_tflops") for r in rows]
                lines.append(f"  d = {d:<3} {name:<9} " + " ".join(f"{x:>5.0f}" if x else "  n/a" for x in rates)
                             + f"   (N = {', '.join(str(r['n']) for r in rows)})")
    return "\n".join(lines)


def naive_forward_gain_range(bench: dict, impl: str = "flashlab") -> str:
    """The range of naive time / impl time over every forward row (both dtypes, causal or not), in one line."""
    gains = {}
    for r in bench["rows"]:
        t_naive = r["results"].get("naive", {}).get("fwd_ms")
        t_impl = r["results"].get(impl, {}).get("fwd_ms")
        if t_naive and t_impl:
            gains[(r["dtype"], r["d"], r["n"], r["causal"])] = t_naive / t_impl
    if not gains:
        return f"no row of this results file times both naive and {impl}"
    lo, hi = min(gains, key=gains.get), max(gains, key=gains.get)
    return (f"prefill forward, naive time / {impl} time: from {gains[lo]:.1f}x "
            f"(dtype, d, N, causal = {lo}) to {gains[hi]:.1f}x ({hi})")


# the backward flash_attention ran when bench_baselines.json was measured (it runs bwd_gluon_ws from
# N = 1024 on sm90 now: kernels.ladder.GLUON_BACKWARD_MIN_N)
BASELINES_BACKWARD = "bwd_two_pass"


def baselines_table(baselines: dict, mode: str = "fwd") -> str:
    """TFLOP/s of SDPA, flashlab, FlexAttention, compiled and eager naive attention, per row. In
    forward+backward the flashlab column is labelled with the backward it ran then
    (``BASELINES_BACKWARD``)."""
    names = list(baselines["rows"][0]["results"]) if baselines.get("rows") else []
    label = {"flashlab": "flashlab 2-pass"} if mode == "fwdbwd" and BASELINES_BACKWARD == "bwd_two_pass" else {}
    lines = [f"{mode} TFLOP/s, bf16 ({baselines['environment']['device']}, torch {baselines['environment']['torch']})",
             f"{'d':>4}{'N':>7}{'causal':>7}  " + "".join(f"{label.get(n, n):>16}" for n in names)]
    for r in baselines["rows"]:
        cells = []
        for n in names:
            x = r["results"][n].get(f"{mode}_tflops")
            cells.append(f"{x:16.0f}" if x else f"{str(r['results'][n].get(f'{mode}_status', '-'))[:14]:>16}")
        lines.append(f"{r['d']:>4}{r['n']:>7}{int(r['causal']):>7}  " + "".join(cells))
    if label:
        lines.append("flashlab 2-pass: flash_attention with the two-pass backward, which it ran when this file was "
                     "measured")
    return "\n".join(lines)


def sdpa_flash_memory_extra(memory: dict) -> str:
    """SDPA FLASH's peak extra memory beyond its output (O in the input dtype, lse in fp32) per N of a
    ``bench_memory.json`` payload (non-causal rows), and how many fp32 copies of (O, lse) that extra
    is: FlashAttention-2's split-KV forward keeps one fp32 partial (O, lse) per split."""
    p = memory.get("protocol", {})
    d, itemsize = p.get("d", 128), 2
    lines = ["SDPA FLASH's peak extra memory = O + lse + extra; extra = k fp32 copies of (O, lse) + 1 KiB",
             f"{'N':>7} {'SDPA FLASH':>11} {'O + lse':>10} {'extra':>10} {'k':>6}"]
    for r in sorted((r for r in memory["rows"] if not r["causal"]), key=lambda r: r["n"]):
        peak = r["results"].get("sdpa_flash", {}).get("peak_extra_bytes")
        if not peak:
            continue
        n = r["n"]
        out = n * d * itemsize + n * 4  # O (bf16) and lse (fp32)
        extra = peak - out
        copies = (extra - 1024) / (n * d * 4 + n * 4)  # 1 KiB more in every row, N = 16384 included
        from .viz.style import format_bytes

        lines.append(f"{n:>7} {format_bytes(peak):>11} {format_bytes(out):>10} {format_bytes(extra):>10} {copies:>6.2f}")
    return "\n".join(lines)


def naive_memory_table(memory: dict) -> str:
    """Naive attention's peak extra memory per N of a ``bench_memory.json`` payload (non-causal rows),
    beside the bytes of S and P (two bf16 N x N matrices), under the device and its memory as the
    file records them (``environment.memory_gib``: torch's ``total_memory``, in GiB, one decimal)."""
    from .viz.style import format_bytes

    env = memory.get("environment", {})
    lines = [f"{env.get('device', 'unknown device')}, {env.get('memory_gib', '?')} GiB of memory "
             f"(total_memory as bench_memory.json records it)"]
    for r in sorted((r for r in memory["rows"] if not r["causal"]), key=lambda r: r["n"]):
        n, naive = r["n"], r["results"].get("naive", {})
        used = format_bytes(naive["peak_extra_bytes"]) if naive.get("peak_extra_bytes") else naive.get("status", "-")
        lines.append(f"N = {n:>6}: naive attention peak extra memory {used:>10}; "
                     f"S and P (bf16) need {format_bytes(2 * n * n * 2):>10}")
    return "\n".join(lines)


def describe_environments(results: dict, names=("bench_attention", "bench_baselines", "bench_memory",
                                                 "ncu_traffic")) -> str:
    """One line per results file: device, torch, triton, cuDNN, date."""
    lines = []
    for name in names:
        e = results.get(name, {}).get("environment")
        if e:
            lines.append(f"{name}.json: {e.get('device')}, torch {e.get('torch')}, triton {e.get('triton')}, "
                         f"cuDNN {e.get('cudnn')}, {e.get('date_utc')}")
    return "\n".join(lines) or "no results files"


def predicted_grid_speedup(batch_heads: int, sms: int, programs_v1: int) -> float:
    """v1 / v0 speed-up predicted from occupancy alone: each grid runs at min(programs, SMs) / SMs
    of the chip (one program per SM at a time, equal work per program, no other difference)."""
    for name, x in (("batch_heads", batch_heads), ("sms", sms), ("programs_v1", programs_v1)):
        if not isinstance(x, int) or x < 1:
            raise ValueError(f"{name}={x!r} must be a positive int")
    return min(programs_v1, sms) / min(batch_heads, sms)


def grid_prediction_table(bench: dict, d: int = 128, block_m: int = 128) -> str:
    """Measured v1/v0 against the occupancy prediction, bf16, not causal."""
    sms = bench["environment"]["sm_count"]
    lines = [f"grid over (batch, head) [v0] against grid over query blocks [v1], bf16, d = {d}, not causal, "
             f"{sms} SMs, v1 with {block_m}-row query blocks"]
    for n, bh, gain in grid_speedups(bench, d):
        pred = predicted_grid_speedup(bh, sms, bh * -(-n // block_m))
        lines.append(f"N = {n:>5}: v0 has B x H = {bh:>4} programs; predicted v1 / v0 {pred:5.2f}x, measured {gain:5.2f}x")
    return "\n".join(lines)


def baseline_errors(baselines: dict, mode: str = "fwd") -> str:
    """Each variant's relative error against float32 attention, per row (the check before timing)."""
    key = "fwd_err" if mode == "fwd" else "grad_err"
    names = list(baselines["rows"][0]["results"])
    lines = [f"{'d':>4}{'N':>7}{'causal':>7}  " + "".join(f"{n:>16}" for n in names)]
    for r in baselines["rows"]:
        cells = [r["results"][n].get(key) for n in names]
        lines.append(f"{r['d']:>4}{r['n']:>7}{int(r['causal']):>7}  "
                     + "".join(f"{c:16.2e}" if c is not None else f"{'-':>16}" for c in cells))
    return "\n".join(lines)


def anchor_peak_table(anchor_text: str, peak_tflops: float, n_min: int = 4096) -> str:
    """SDPA backends' forward TFLOP/s in the anchors (``benchmarks/anchors/h200_sdpa.txt``, another
    H200 session) as fractions of ``peak_tflops``, over rows with N >= n_min."""
    names = {"def": "SDPA default", "fl": "SDPA FLASH (FlashAttention-2)", "ef": "SDPA EFFICIENT",
             "cu": "SDPA CUDNN"}
    fr: dict[str, list[float]] = {k: [] for k in names}
    for line in anchor_text.splitlines():
        parts = line.split()
        if len(parts) == 11 and parts[0].isdigit() and parts[3] == "def" and int(parts[1]) >= n_min:
            for key, val in zip(parts[3::2], parts[4::2]):
                fr[key].append(float(val.split("/")[0]) / peak_tflops)
    if not any(fr.values()):
        raise ValueError("anchor_text has no 'd N causal def a/b fl a/b ef a/b cu a/b' rows")
    return "\n".join(f"  {names[k]:<32} {min(v):5.0%} to {max(v):5.0%} of {peak_tflops:.0f} TFLOP/s (anchors)"
                     for k, v in fr.items() if v)


# The forward+backward contenders of ``benchmarks/bench_backward.py`` (its ``--bwd``): column, legend.
BACKWARD_CONTENDERS = {
    "cudnn": ("cuDNN", "SDPA's cuDNN backend"),
    "flashlab": ("library", "flash_attention through autograd, as it ran in that call"),
    "tp": ("2-pass", "bwd_two_pass: a dK/dV kernel, then a dQ kernel (7 matrix products per tile)"),
    "tp:cc": ("2-pass+str", "bwd_two_pass with its dQ kernel on a second CUDA stream"),
}


def _contender(name: str) -> tuple[str, str]:
    """(column, legend) of a ``--bwd`` contender name; ``fu:BM,BN,W,S[,tma]`` is bwd_fused."""
    if name in BACKWARD_CONTENDERS:
        return BACKWARD_CONTENDERS[name]
    if name == "gw" or name.startswith("gw:"):
        parts = name[3:].split(",") if name != "gw" else []
        schedule = {"lag": "dQ one step behind", "hf": "heavy key blocks first", "late": "dQ's product last",
                    "g0": "heavy key blocks first within head groups",
                    "rows": "lse_i, D_i staged in shared memory", "one": "one loop, the mask under a branch"}
        steps = [schedule[p] for p in parts if p in schedule]
        slots = f"{parts[0]} Q/dO slots, " if parts and parts[0].isdigit() else ""
        column = "Gluon " + " ".join(p for p in parts if p in schedule) if steps else "Gluon 1-pass"
        return (column, "bwd_gluon_ws: one pass in Gluon (5 products per tile), a producer warp and two consumer "
                "warpgroups, dQ by the copy engine's tile reduce; " + slots
                + (", ".join(steps) if steps else "the schedule its default config gave when measured"))
    if name.startswith("fu:"):
        bm, bn, warps, stages = name[3:].split(",")[:4]
        how = "the copy engine's tile reduce" if name.endswith(",tma") else "atomic adds"
        return (f"1-pass {bm}x{bn}", f"bwd_fused, {bm}x{bn} tiles, {warps} warps, {stages} stages: one pass "
                f"(5 products per tile), dQ by {how}")
    return name, name


def backward_ladder_table(bench, contenders=None) -> str:
    """Forward+backward TFLOP/s of each backward contender per row of a ``bench_backward``
    results file (``bench_backward_call2_proto_bf16.json``), or of several (a list, or the
    ``{name: file}`` of ``course.load_results``: their rows sorted by dtype, N, d, causal), with its
    speed against cuDNN's in the same run, and the backward rung
    ``flash_attention`` runs for that shape on an H200 (``kernels.ladder.measured_backward``).
    ``contenders``: the contender names to show (as the results file spells them, e.g.
    ``"gw:2,lag,rows"``), in that order; default all."""
    from .kernels.ladder import measured_backward

    several = isinstance(bench, (list, tuple)) or (isinstance(bench, dict) and "rows" not in bench and bench)
    files = list(bench.values() if isinstance(bench, dict) and several else bench if several else [bench])
    if not files or not all(isinstance(f, dict) and f.get("rows") for f in files):
        raise KeyError("expected a bench_backward results file (a dict with 'rows') or several "
                       "(a list of them, or course.load_results' {name: file})")
    rows = [r for f in files for r in f["rows"]]
    if several:  # bf16 first, then by N, head dim and causal
        rows.sort(key=lambda r: (r["dtype"] != "bfloat16", r["n"], r["d"], bool(r["causal"])))
    names = list(dict.fromkeys(name for r in rows for name in r.get("fwdbwd", {})))
    if contenders is not None:
        missing = [c for c in contenders if c not in names]
        if missing:
            raise KeyError(f"contenders={missing!r} are not in the results; expected some of {names}")
        names = list(contenders)
    widths = {name: max(11, len(_contender(name)[0])) for name in names}  # "429 (1.00x)": 11 characters
    lines = ["forward+backward TFLOP/s (speed against cuDNN in the same run; forward+backward = 3.5x the "
             "forward's FLOPs)",
             f"{'dtype':<5} {'d':>3} {'N':>5} {'causal':>6} "
             + " ".join(f"{_contender(n)[0]:>{widths[n]}}" for n in names) + "  rung"]
    for r in rows:
        runs = r.get("fwdbwd", {})
        cudnn = runs.get("cudnn", {}).get("tflops")
        cells = []
        for name in names:
            tflops = runs.get(name, {}).get("tflops")
            text = "-" if tflops is None else f"{tflops:.0f}" + (f" ({tflops / cudnn:.2f}x)" if cudnn else "")
            cells.append(f"{text:>{widths[name]}}")
        dtype = {"bfloat16": "bf16", "float16": "fp16"}.get(r["dtype"], r["dtype"])
        lines.append(f"{dtype:<5} {r['d']:>3} {r['n']:>5} {'yes' if r['causal'] else 'no':>6} " + " ".join(cells)
                     + f"  {measured_backward(r['d'], r['causal'], r['n'], r['n'])}")
    from .course import wrap_prose

    notes = [wrap_prose(f"{_contender(n)[0]}: {_contender(n)[1]}") for n in names]  # the table's lines stay one each
    notes.append(wrap_prose("rung: the backward flash_attention runs for that shape on an H200 "
                            "(flashlab.kernels.ladder.measured_backward)"))
    return "\n".join(lines + [""] + notes)


def timing_spread_line(bench: dict, n_min: int = 4096) -> str:
    """:func:`timing_spread` as one sentence: the median and the largest spread between two timings of the
    same kernel in one run (rows with N >= ``n_min``) and the row of the largest; "" where no row has both."""
    if isinstance(n_min, bool) or not isinstance(n_min, int) or n_min < 1:
        raise ValueError(f"n_min={n_min!r} must be a positive int")
    spread = timing_spread(bench, n_min)
    if not spread:
        return ""
    return f"same kernel: median spread {spread['median']:.1%}, largest {spread['largest']:.1%} at {spread['where']}"
