"""Compile the Gluon rung for an sm90 GPU on a machine that has none; print its resource report as JSON.

    python tests/sm90_compile.py HEAD_DIM CAUSAL DTYPE [BLOCK_N NBUF [CAUSAL_ALIGN WINDOW]]
    python tests/sm90_compile.py HEAD_DIM CAUSAL DTYPE BLOCK_N,NBUF,CREGS,PREGS,PERSISTENT,GROUP_HEADS -

(WINDOW 0: none; with CAUSAL_ALIGN and WINDOW the kernel is compiled for that AttnSpec.)

Triton's compiler needs only a *target* (``GPUTarget("cuda", 90, 32)``) and the ``ptxas`` it
ships; the driver is asked for the target, the device and the stream, so a stand-in answers those
three. ``kernel.warmup`` then compiles without launching. Run in its own process: the stand-in
replaces Triton's active driver for the rest of the process.
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
    from flashlab.kernels import flash_fwd_gluon as fg

    d, causal, dtype = int(sys.argv[1]), sys.argv[2] == "1", getattr(torch, sys.argv[3])
    if len(sys.argv) > 5:  # BLOCK_N may carry the rest of the config: BLOCK_N,NBUF,CREGS,PREGS,PERSISTENT,GROUP_HEADS
        fields = [int(x) for x in sys.argv[4].split(",")]
        cfg = fg.GluonConfig(*fields) if len(fields) > 1 else fg.GluonConfig(fields[0], int(sys.argv[5]))
    else:
        cfg = fg.default_config(d, causal)
    rule = causal
    if len(sys.argv) > 7:
        from flashlab.attnspec import AttnSpec

        rule = AttnSpec(causal=causal, causal_align=sys.argv[6], window=int(sys.argv[7]) or None)
    q = torch.zeros(1, 2, 300, d, dtype=dtype)  # (B, H, N, d): CPU tensors; only their dtype and alignment matter
    _, _, compiled = fg.launch(q, q, q, rule, config=cfg, warmup=True)
    cubin = Path(f"/tmp/flashlab_sm90_{d}_{int(causal)}_{sys.argv[3]}.cubin")
    cubin.write_bytes(compiled.asm["cubin"])
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    usage = subprocess.run([str(tool), "-res-usage", str(cubin)], capture_output=True, text=True).stdout
    fields = dict(item.split(":", 1) for item in usage.split("\n")[-2].split() if ":" in item)
    ptx = compiled.asm["ptx"]
    print(json.dumps({"shared": compiled.metadata.shared, "local": int(fields["LOCAL"]), "regs": int(fields["REG"]),
                      "wgmma": ptx.count("wgmma.mma_async"), "setmaxnreg": ptx.count("setmaxnreg"),
                      "threads": int(ptx.split(".reqntid")[1].split()[0]), "target": ".target sm_90a" in ptx,
                      "smem_model": cfg.smem_bytes(d)}))


if __name__ == "__main__":
    main()
