import dataclasses, sys
sys.path.insert(0, "benchmarks")
import torch, bench_decode, decode_flat_probe as P
from flashlab import decode
from flashlab.kernels import decode_plan
B, H, Hkv, nk = 16, 32, 32, 4096
g = torch.Generator(device="cuda").manual_seed(1)
q = torch.randn(B, H, 1, 128, device="cuda", dtype=torch.bfloat16, generator=g)
k = torch.randn(B, Hkv, nk, 128, device="cuda", dtype=torch.bfloat16, generator=g)
v = torch.randn(B, Hkv, nk, 128, device="cuda", dtype=torch.bfloat16, generator=g)
s = 128 ** -0.5
choice = decode.choice_for(q, k); cfg = decode.config_of(q, choice)
probe = P.FlatPlan(q, k)
fns = {"probe": lambda: probe(q, k, v, s),
       "lib_causal": lambda: decode_plan.forward(q, k, v, None, s, True, 1, cfg),
       "lib_nocausal": lambda: decode_plan.forward(q, k, v, None, s, False, 1, cfg),
       "waves": lambda: decode_plan.forward(q, k, v, None, s, True, 1, dataclasses.replace(cfg, flat=False))}
for r in range(3):
    print(r, {n: round(bench_decode.bench_us(f), 1) for n, f in fns.items()}, flush=True)
pl = decode_plan.plan_for(q, k, v, None, None, True, 1, cfg)
kern = pl.kernel
if kern is not None:
    print("flat n_regs", kern.n_regs, "spills", kern.n_spills, "shared", kern.metadata.shared)
    ptx = kern.asm["ptx"]; print("cp.async", ptx.count("cp.async.cg") + ptx.count("cp.async.ca"), "wait_group", ptx.count("cp.async.wait_group"))
