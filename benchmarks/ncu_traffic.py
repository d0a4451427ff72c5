"""HBM traffic measured by Nsight Compute beside flashlab's traffic model.

For each (variant, N) one child process runs the variant once to warm up (compile, cuBLAS
handles), then once more between cudaProfilerStart/Stop; ncu profiles only that second call:

    ncu --clock-control none --profile-from-start off --csv \
        --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
        python benchmarks/ncu_traffic.py --child VARIANT N

and the parent sums the bytes over every kernel of the call. Sizes: fp16, B=1, H=16, d=64
(the anchors' ncu shape, benchmarks/anchors/README.md), N in {1024, 4096, 8192}.

Model: ``flashlab.traffic.naive_traffic`` and ``fa2_forward_traffic`` (global loads and stores,
docs/ARCHITECTURE.md). Where that module is missing, the same rules are computed here.
Expected gaps: (1) the model counts every K/V re-read by every query block, while the H200's
60 MiB L2 serves most re-reads, so DRAM reads are close to Q+K+V once; (2) ncu flushes caches
between replays, but an output written at the end of a kernel can still sit in L2 when the kernel
ends, so DRAM writes under-count O.

    python benchmarks/ncu_traffic.py            # -> results/ncu_traffic.json
    python benchmarks/ncu_traffic.py --dry-run  # print the plan; needs no GPU
"""
from __future__ import annotations

import argparse
import csv
import io
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common  # noqa: E402

BATCH, HEADS, HEAD_DIM = 1, 16, 64
SEQ_LENS = (1024, 4096, 8192)
VARIANTS = ("naive", "hopper", "flashlab", "sdpa_flash", "sdpa_cudnn")
METRICS = "dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum"


def variant_fn(name: str):
    if name == "naive":
        return _common.naive_attention
    if name == "hopper":
        from flashlab.kernels import flash_fwd_hopper as hopper

        return lambda q, k, v, c, s: hopper.forward(q, k, v, c, s)[0]
    if name == "flashlab":
        from flashlab.kernels.attention import flash_attention

        return lambda q, k, v, c, s: flash_attention(q, k, v, causal=c, scale=s)
    if name.startswith("sdpa_"):
        return _common.sdpa({"sdpa_flash": "FLASH_ATTENTION", "sdpa_cudnn": "CUDNN_ATTENTION"}[name])
    raise ValueError(f"variant={name!r} is unknown; expected one of {VARIANTS}")


def child(name: str, n: int) -> int:
    """Warm up, then run the variant once inside the profiled range."""
    import torch

    fn = variant_fn(name)
    q, k, v = (torch.randn(BATCH, HEADS, n, HEAD_DIM, device="cuda", dtype=torch.float16) for _ in range(3))
    scale = 1.0 / math.sqrt(HEAD_DIM)
    with torch.no_grad():
        fn(q, k, v, False, scale)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        fn(q, k, v, False, scale)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
    return 0


def model(n: int) -> dict:
    """Bytes the traffic model predicts (per the ARCHITECTURE.md rules), for all heads."""
    try:
        from flashlab import traffic

        nv = traffic.naive_traffic(n, n, HEAD_DIM, itemsize=2, batch=BATCH * HEADS)
        fa = traffic.fa2_forward_traffic(n, n, HEAD_DIM, block_q=128, block_k=64, itemsize=2,
                                         stat_itemsize=4, batch=BATCH * HEADS)
        return {"source": "flashlab.traffic",
                "naive": {"read": nv.read_bytes, "write": nv.write_bytes},
                "flash_block128x64": {"read": fa.read_bytes, "write": fa.write_bytes}}
    except Exception as exc:  # noqa: BLE001  (module written by another helper; fall back to the rules)
        bh, it, d = BATCH * HEADS, 2, HEAD_DIM
        tq = math.ceil(n / 128)
        return {"source": f"computed in ncu_traffic.py from ARCHITECTURE.md rules ({type(exc).__name__})",
                "naive": {"read": bh * it * (2 * n * d + n * n + n * n + n * d),
                          "write": bh * it * (n * n + n * n + n * d)},
                "flash_block128x64": {"read": bh * it * (n * d + tq * 2 * n * d),
                                      "write": bh * (it * n * d + 4 * n)}}


def parse_ncu_csv(text: str) -> dict:
    """Sum each metric over all kernels in ncu's --csv output; list the kernels."""
    start = text.find('"ID"')
    if start < 0:
        raise RuntimeError(f"no CSV in ncu output: {text[-500:]}")
    totals, kernels = {}, set()
    for rec in csv.DictReader(io.StringIO(text[start:])):
        name, value = rec["Metric Name"], rec["Metric Value"].replace(",", "")
        kernels.add((rec["ID"], rec["Kernel Name"][:80]))
        scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "ns": 1, "us": 1e3,
                 "usecond": 1e3, "msecond": 1e6, "nsecond": 1}.get(rec["Metric Unit"], 1)
        totals[name] = totals.get(name, 0.0) + float(value) * scale
    return {"totals": totals, "kernels": sorted(kernels)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--child", nargs=2, metavar=("VARIANT", "N"))
    p.add_argument("--seq-lens", nargs="*", type=int, default=list(SEQ_LENS))
    p.add_argument("--variants", nargs="*", default=list(VARIANTS))
    p.add_argument("--out", type=Path, default=_common.REPO / "benchmarks" / "results" / "ncu_traffic.json")
    args = p.parse_args(argv)
    if args.child:
        return child(args.child[0], int(args.child[1]))
    if args.dry_run:
        print(f"fp16 B={BATCH} H={HEADS} d={HEAD_DIM} forward, N in {args.seq_lens}, variants {args.variants}")
        return 0
    why = _common.timing_refusal()
    ncu = shutil.which("ncu") or "/opt/nvidia/nsight-compute/2025.3.1/ncu"
    if why or not Path(ncu).exists():
        print(f"ncu_traffic: refusing: {why or 'ncu not found'}", file=sys.stderr)
        return 2
    rows = []
    payload = {"environment": _common.environment(),
               "protocol": {"dtype": "float16", "batch": BATCH, "heads": HEADS, "d": HEAD_DIM,
                            "pass": "forward, non-causal", "command": f"ncu --clock-control none "
                            f"--profile-from-start off --csv --metrics {METRICS}",
                            "note": "DRAM bytes summed over every kernel of one call; ncu flushes "
                                    "caches between replays; writes left in L2 at kernel end are not counted"},
               "rows": rows}
    for n in args.seq_lens:
        m = model(n)
        for name in args.variants:
            cmd = [ncu, "--clock-control", "none", "--profile-from-start", "off", "--csv",
                   "--metrics", METRICS, sys.executable, str(Path(__file__).resolve()),
                   "--child", name, str(n)]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ))
            row = {"variant": name, "n": n, "model": m}
            try:
                parsed = parse_ncu_csv(proc.stdout)
                t = parsed["totals"]
                row.update({"dram_read_bytes": t.get("dram__bytes_read.sum"),
                            "dram_write_bytes": t.get("dram__bytes_write.sum"),
                            "gpu_time_ns": t.get("gpu__time_duration.sum"),
                            "kernels": parsed["kernels"]})
            except Exception as exc:  # noqa: BLE001
                row["error"] = f"{exc}; rc={proc.returncode}; stderr={proc.stderr[-600:]}"
            rows.append(row)
            _common.write_json(args.out, payload)
            mb = lambda x: f"{x / 1e6:9.1f}" if x is not None else "      n/a"  # noqa: E731
            key = "naive" if name == "naive" else "flash_block128x64"
            print(f"{name:<11} N={n:<6} DRAM read {mb(row.get('dram_read_bytes'))} MB write "
                  f"{mb(row.get('dram_write_bytes'))} MB | model read {mb(m[key]['read'])} MB write "
                  f"{mb(m[key]['write'])} MB | {row.get('gpu_time_ns', 0) / 1e3:8.1f} us "
                  f"{row.get('error', '')[:200]}", flush=True)
    print(f"[ncu] wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
