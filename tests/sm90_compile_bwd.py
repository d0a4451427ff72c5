"""Compile the Gluon backward (``bwd_gluon_ws``) for an sm90 GPU on a machine that has none; print its resource report as JSON.

    python tests/sm90_compile_bwd.py HEAD_DIM CAUSAL DTYPE [NBUF DQ_SPLIT DQ_REDUCE [FLAGS...]]

(DQ_SPLIT "d", "keys" or "-" for the head dim's default; DQ_REDUCE "tma" or "atomic"; FLAGS any of
"lag" (lag_dq), "late" (early_dq off), "hf" (heavy_first), "gG" (head_group G), "rows" (rows_in_smem),
"one" (one_loop).)
"local" is the local memory ptxas gives arrays; "stack" the stack frame, where spilled registers go.
Same stand-in driver as tests/sm90_compile.py (tests/standin_gpu.py); run in its own process.
"""
import json
import subprocess
import sys
from pathlib import Path

from standin_gpu import target_gpu  # tests/standin_gpu.py (this script's folder is on sys.path)


def main() -> None:
    import torch
    import triton

    target_gpu(90)
    from flashlab.kernels import flash_bwd_gluon as gb

    d, causal, dtype = int(sys.argv[1]), sys.argv[2] == "1", getattr(torch, sys.argv[3])
    cfg = gb.default_config(d, causal, 2)  # GROUP = 2 below
    if len(sys.argv) > 6:
        flags = sys.argv[7:]
        cfg = gb.GluonBwdConfig(int(sys.argv[4]), "" if sys.argv[5] == "-" else sys.argv[5], sys.argv[6],
                                early_dq="late" not in flags, lag_dq="lag" in flags, heavy_first="hf" in flags,
                                head_group=next((int(f[1:]) for f in flags if f[:1] == "g" and f[1:].isdigit()), 1),
                                rows_in_smem="rows" in flags, one_loop="one" in flags)
    q = torch.zeros(1, 4, 300, d, dtype=dtype)  # (B, H, N, d): CPU tensors; only dtype and alignment matter
    kv = torch.zeros(1, 2, 300, d, dtype=dtype)  # (B, Hkv, N, d): grouped-query attention, GROUP = 2
    lse = torch.zeros(1, 4, 300, dtype=torch.float32)
    _, _, _, compiled = gb.launch(q, kv, kv, q, lse, q, causal, config=cfg, warmup=True)
    cubin = Path(f"/tmp/flashlab_sm90_bwd_{d}_{int(causal)}_{sys.argv[3]}.cubin")
    cubin.write_bytes(compiled.asm["cubin"])
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    usage = subprocess.run([str(tool), "-res-usage", str(cubin)], capture_output=True, text=True).stdout
    fields = dict(item.split(":", 1) for item in usage.split("\n")[-2].split() if ":" in item)
    ptx = compiled.asm["ptx"]
    print(json.dumps({"shared": compiled.metadata.shared, "local": int(fields["LOCAL"]),
                      "stack": int(fields["STACK"]), "regs": int(fields["REG"]),
                      "wgmma": ptx.count("wgmma.mma_async"), "setmaxnreg": ptx.count("setmaxnreg"),
                      "reduce": ptx.count("cp.reduce.async.bulk"), "atomics": ptx.count("red.global") + ptx.count("atom.global"),
                      "threads": int(ptx.split(".reqntid")[1].split()[0]), "target": ".target sm_90a" in ptx,
                      "smem_model": cfg.smem_bytes(d), "split": cfg.split(d), "dq_reduce": cfg.dq_reduce}))


if __name__ == "__main__":
    main()
