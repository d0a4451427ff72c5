"""The balanced (stream-K) decode grid beside the split rule and SDPA's default (benchmarks/NOTES.md,
decode, calls 17-20): at the rows where the rule runs wide programs for fewer kv groups than SMs,
``bal132`` (one wide program per SM, equal runs of key blocks across kv groups, lanes cut into
pieces merged by the fused combine), ``bal_lanes`` (the balanced kernel with one program per kv
group: the rule's work through the balanced code, which measures that code's own cost), the rule
and SDPA, in 5 rotated rounds of do_bench (L2 cleared), median. bf16, d = 128, Nq = 1.
``python benchmarks/decode_balanced_probe.py`` (writes $OUT/probe3.json)
"""
import sys, json, torch
sys.path.insert(0, __import__("os").path.dirname(__file__))
import bench_decode as bd
from flashlab import decode
from flashlab.kernels import decode_plan as dp
D = 128
out = []
for (B, H, Hkv, nk) in [(4, 32, 32, 4096), (4, 32, 32, 32768), (4, 32, 32, 131072), (16, 32, 8, 4096), (16, 32, 8, 32768),
                        (16, 32, 8, 131072), (1, 32, 32, 32768), (4, 32, 8, 131072), (1, 32, 8, 32768), (1, 32, 32, 131072)]:
    g = torch.Generator(device="cuda").manual_seed(B + nk)
    q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(B, Hkv, nk, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    ch = decode.choice_for(q, k, balanced=True)
    assert ch.balanced, ch
    cfg = decode.config_of(q, ch)
    sdpa = bd.make_variants(H, Hkv, D ** -0.5)["sdpa_default"]
    lanes = B * Hkv
    fns = {"rule": lambda: dp.forward(q, k, v, None, D ** -0.5, False, ch.splits, cfg)[0],
           "sdpa": lambda: sdpa(q, k, v),
           "bal132": lambda: dp.forward(q, k, v, None, D ** -0.5, False, 1, cfg, programs=132)[0]}
    if lanes >= 32:
        fns["bal_lanes"] = lambda: dp.forward(q, k, v, None, D ** -0.5, False, 1, cfg, programs=lanes)[0]
    ref = sdpa(q, k, v).float()
    errs = {n: (f().float() - ref).abs().max().item() for n, f in fns.items()}
    grid = dp.plan_for(q, k, v, None, None, False, 1, cfg, 132).grid
    with torch.no_grad():
        runs = bd.rotated_rounds(fns, rounds=5)
    row = {"B": B, "H": H, "Hkv": Hkv, "Nk": nk, "splits": ch.splits, "grid132": grid, "errs": errs,
           "runs": {n: bd.rounds_entry(r) for n, r in runs.items()}}
    out.append(row)
    med = {n: bd._median(r) for n, r in runs.items()}
    print((B, H, Hkv, nk), f"rule@{ch.splits}", " ".join(f"{n} {m:.1f}" for n, m in med.items()),
          f"| bal132/rule {med['bal132']/med['rule']:.4f} bal132/sdpa {med['bal132']/med['sdpa']:.4f} rule/sdpa {med['rule']/med['sdpa']:.4f}"
          + (f" bal_lanes/rule {med['bal_lanes']/med['rule']:.4f}" if "bal_lanes" in med else "")
          + f" spread {max(bd.rounds_entry(r)['spread'] for r in runs.values())*100:.2f}% err {max(errs.values()):.1e}", flush=True)
import os
json.dump(out, open(os.environ.get("OUT", "/tmp") + "/probe3.json", "w"), indent=1)
