"""Decode: flash_decode's kernel beside SDPA's default (cuDNN) under Nsight Compute, at one row.

Profiles both kernels of a decode step (bf16, d = 128, one query per sequence) with the full
section set, three calls each, and writes what separates them: launch shape (grid, block,
registers, shared memory), duration, DRAM throughput, L2 hit rate, and the load and store
instructions of their SASS (the source page), counted by kind with registers and offsets blanked.
Nsight Compute flushes the caches before every pass, so these times are the kernels' own on a clean
L2 (no dirty lines left to write back, unlike ``do_bench``'s flush).

    python benchmarks/decode_ncu_compare.py 16 32 8 4096      # B H Hkv Nk -> $OUT/decode_ncu_<row>.json
    python benchmarks/decode_ncu_compare.py --summarise DETAILS.csv [SASS.csv] --out FILE.json

The first form needs ``ncu`` on the PATH (it runs ``--child`` under it); ``--summarise`` reads the CSVs
``ncu -i REPORT --page details --csv`` and ``--page source --print-source sass --csv`` wrote.
"""
from __future__ import annotations

import argparse
import collections
import csv
import json
import os
import re
import subprocess
import sys

KERNELS = "regex:cudnn|flash|fmha|_decode_split"
DETAILS = ("Duration", "DRAM Throughput", "Memory Throughput", "Grid Size", "Block Size", "Registers Per Thread",
           "Dynamic Shared Memory Per Block", "Waves Per SM", "L2 Hit Rate", "Achieved Occupancy",
           "Executed Ipc Active", "Elapsed Cycles", "SM Frequency")
MEMORY_OPS = ("LDG", "LDGSTS", "STG", "UTMALDG", "UBLKCP", "LDGDEPBAR")


def child(B: int, H: int, Hkv: int, nk: int) -> None:
    """Run SDPA's default and flash_decode three times each (ncu profiles them)."""
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_decode import D, make_variants

    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    fns = make_variants(H, Hkv, D ** -0.5)
    with torch.no_grad():
        for _ in range(3):
            fns["sdpa_default"](q, k, v)
            fns["flash_decode"](q, k, v)
    torch.cuda.synchronize()


def _short(name: str) -> str:
    return "flash_decode" if "_decode_split" in name else "sdpa_default (cuDNN)" if "cudnn" in name else name[:60]


def summarise_details(path: str) -> dict:
    """{kernel: {metric: [value per profiled call]}} from a details page CSV, and the kernels' full names."""
    out: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    names = {}
    for r in csv.DictReader(open(path)):
        if r.get("Metric Name") in DETAILS:
            kernel = _short(r["Kernel Name"])
            names[kernel] = r["Kernel Name"]
            value = r["Metric Value"].replace(",", "")
            try:
                value = float(value)
            except ValueError:
                pass
            out[kernel][f"{r['Metric Name']} ({r['Metric Unit']})"].append(value)
    return {"kernels": names, "metrics": {k: dict(v) for k, v in out.items()}}


def summarise_sass(path: str) -> dict:
    """{kernel: {"instructions": n, "memory": {instruction with registers blanked: count}}}."""
    out, kernel = {}, None
    for r in csv.reader(open(path)):
        if r and r[0] == "Kernel Name":
            kernel = _short(r[1])
            out[kernel] = {"instructions": 0, "memory": collections.Counter()}
            continue
        if kernel is None or len(r) < 2 or not r[0].startswith("0x"):
            continue
        out[kernel]["instructions"] += 1
        words = r[1].split()
        op = words[1] if words and words[0].startswith("@") and len(words) > 1 else (words[0] if words else "")
        if op.split(".")[0] in MEMORY_OPS:
            out[kernel]["memory"][re.sub(r"\bU?R\d+|\bP\d|0x[0-9a-f]+", "_", r[1].strip())] += 1
    return {k: {"instructions": v["instructions"], "memory": dict(v["memory"].most_common())} for k, v in out.items()}


def profile(B: int, H: int, Hkv: int, nk: int, folder: str) -> dict:
    tag = f"{B}_{H}_{Hkv}_{nk}"
    report = os.path.join(folder, f"decode_ncu_{tag}")
    subprocess.run(["ncu", "--clock-control", "none", "--import-source", "no", "--set", "full", "-k", KERNELS,
                    "-c", "6", "-o", report, sys.executable, os.path.abspath(__file__), "--child", str(B), str(H),
                    str(Hkv), str(nk)], check=True)
    pages = {}
    for page, extra in (("details", []), ("source", ["--print-source", "sass"])):
        path = os.path.join(folder, f"decode_ncu_{tag}_{page}.csv")
        with open(path, "w") as f:
            subprocess.run(["ncu", "-i", report + ".ncu-rep", "--page", page, "--csv", *extra], stdout=f, check=True)
        pages[page] = path
    return dict(row=[B, H, Hkv, nk], **summarise_details(pages["details"]), sass=summarise_sass(pages["source"]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("row", nargs="*", type=int, help="B H Hkv Nk")
    parser.add_argument("--child", action="store_true", help="run the kernels (under ncu)")
    parser.add_argument("--summarise", nargs="+", metavar="CSV", help="details CSV [source CSV]")
    parser.add_argument("--out", help="JSON to write")
    args = parser.parse_args(argv)
    if args.summarise:
        result = summarise_details(args.summarise[0])
        if len(args.summarise) > 1:
            result["sass"] = summarise_sass(args.summarise[1])
    else:
        if len(args.row) != 4:
            parser.error(f"row={args.row!r} must be four integers: B H Hkv Nk")
        if args.child:
            child(*args.row)
            return 0
        folder = os.environ.get("OUT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
        result = profile(*args.row, folder)
    out = args.out or os.path.join(os.environ.get("OUT") or ".", "decode_ncu_{}.json".format("_".join(map(str, args.row))))
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "sass"}, indent=1)[:3000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
