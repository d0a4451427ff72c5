"""Print Markdown tables from results/bench_attention.json (used to write benchmarks/NOTES.md).

    python benchmarks/summarize.py [path/to/bench_attention.json]

Needs only the standard library, so it runs anywhere the results file is.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

DEFAULT = Path(__file__).resolve().parent / "results" / "bench_attention.json"


def tflops(row, name, mode):
    return row["results"].get(name, {}).get(f"{mode}_tflops")


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "n/a"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    data = json.loads(Path(argv[0] if argv else DEFAULT).read_text())
    env = data["environment"]
    print(f"{env.get('device')}, torch {env.get('torch')}, triton {env.get('triton')}, "
          f"cuDNN {env.get('cudnn')}, {env.get('date_utc')}\n")
    print("| dtype | d | N | causal | flashlab fwd | FA2 fwd | cuDNN fwd | fwd / FA2 | fwd / cuDNN "
          "| flashlab fwd+bwd | FA2 fwd+bwd | fwd+bwd / FA2 | Hopper rung 2x (fwd) | Gluon rung 2x (fwd) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in data["rows"]:
        mine, fa2, cu = (tflops(r, n, "fwd") for n in ("flashlab", "sdpa_flash", "sdpa_cudnn"))
        mine_b, fa2_b = tflops(r, "flashlab", "fwdbwd"), tflops(r, "sdpa_flash", "fwdbwd")
        same = ["/".join(f"{x:.0f}" for x in (tflops(r, n, "fwd") for n in pair) if x)
                for pair in (("hopper", "rung:v4_hopper"), ("gluon", "rung:v5_gluon_ws"))]
        print(f"| {r['dtype']} | {r['d']} | {r['n']} | {int(r['causal'])} | {mine or 0:.0f} | {fa2 or 0:.0f} "
              f"| {cu or 0:.0f} | {ratio(mine, fa2)} | {ratio(mine, cu)} | {mine_b or 0:.0f} | {fa2_b or 0:.0f} "
              f"| {ratio(mine_b, fa2_b)} | {same[0]} | {same[1]} |")
    print("\nLadder (forward TFLOP/s, bf16):\n")
    rungs = sorted({k for r in data["rows"] for k in r["results"] if k.startswith("rung:")})
    print("| d | N | causal | " + " | ".join(k[5:] for k in rungs) + " |")
    print("|---|---|---|" + "---|" * len(rungs))
    for r in data["rows"]:
        if r["dtype"] != "bfloat16":
            continue
        cells = " | ".join(f"{tflops(r, k, 'fwd') or 0:.0f}" for k in rungs)
        print(f"| {r['d']} | {r['n']} | {int(r['causal'])} | {cells} |")
    print("\nNaive vs flash, N = 8192 (B = 2), time ratio naive / flashlab:\n")
    print("| dtype | d | causal | naive fwd ms | flashlab fwd ms | ratio fwd | naive fwd+bwd ms "
          "| flashlab fwd+bwd ms | ratio fwd+bwd |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in data["rows"]:
        if r["n"] != 8192:
            continue
        nv, fl = r["results"]["naive"], r["results"].get("flashlab", {})
        print(f"| {r['dtype']} | {r['d']} | {int(r['causal'])} | {nv.get('fwd_ms', 0):.2f} | "
              f"{fl.get('fwd_ms', 0):.2f} | {ratio(nv.get('fwd_ms'), fl.get('fwd_ms'))} | "
              f"{nv.get('fwdbwd_ms', 0):.2f} | {fl.get('fwdbwd_ms', 0):.2f} | "
              f"{ratio(nv.get('fwdbwd_ms'), fl.get('fwdbwd_ms'))} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
