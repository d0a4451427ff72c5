"""Compile the Hopper rung (``v4_hopper``) for an sm90 GPU on a machine that has none; print one JSON
line per config: registers, spills, shared memory and the wgmma instructions and waits in the PTX.

    python tests/sm90_compile_hopper.py DTYPE CONFIG [CONFIG ...]

CONFIG is a ``bench_backward.py`` ``hf:`` token body, e.g. ``64,64,4,3`` or ``128,64,4,2,0,1``
(persistent). Compiled for d = 128, causal top-left, N = 1024. Same stand-in driver as
tests/sm90_compile.py (tests/standin_gpu.py); run in its own process.
"""
import json
import re
import subprocess
import sys
from pathlib import Path

from standin_gpu import target_gpu  # tests/standin_gpu.py (this script's folder is on sys.path)


def main() -> None:
    import torch
    import triton

    target_gpu(90)
    from triton.tools.tensor_descriptor import TensorDescriptor

    from flashlab.attnspec import AttnSpec
    from flashlab.kernels import flash_fwd_hopper as hopper

    dtype = getattr(torch, sys.argv[1])
    n, d = 1024, 128
    spec = AttnSpec(causal=True)
    q = torch.zeros(1, 2, n, d, dtype=dtype)  # (B, H, N, d): only dtype and alignment matter
    lse = torch.zeros(1, 2, n, dtype=torch.float32)
    heads = q.view(-1, n, d)  # (B*H, N, d)
    for token in sys.argv[2:]:
        cfg = hopper.HopperConfig(*(int(x) for x in token.split(",")))
        compiled = hopper._flash_fwd_hopper_kernel.warmup(
            TensorDescriptor.from_tensor(heads, [1, cfg.block_q, d]), TensorDescriptor.from_tensor(heads, [1, cfg.block_k, d]),
            TensorDescriptor.from_tensor(heads, [1, cfg.block_k, d]), q, lse, 0.18, n, n, 2, 1,
            HEAD_DIM=d, BLOCK_M=cfg.block_q, BLOCK_N=cfg.block_k, **spec.kernel_args(n, n),
            WARP_SPECIALIZE=cfg.warp_specialize, PERSISTENT=bool(cfg.persistent),
            num_warps=cfg.num_warps, num_stages=cfg.num_stages, grid=(n // cfg.block_q, 2))
        cubin = Path(f"/tmp/flashlab_sm90_hopper_{token.replace(',', '_')}.cubin")
        cubin.write_bytes(compiled.asm["cubin"])
        tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        usage = subprocess.run([str(tool), "-res-usage", str(cubin)], capture_output=True, text=True).stdout
        fields = dict(item.split(":", 1) for item in usage.split("\n")[-2].split() if ":" in item)
        ptx = compiled.asm["ptx"]
        waits = re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)
        print(json.dumps({"config": token, "regs": int(fields["REG"]), "stack": int(fields["STACK"]),
                          "local": int(fields["LOCAL"]), "shared": compiled.metadata.shared,
                          "wgmma": ptx.count("wgmma.mma_async"), "waits": {w: waits.count(w) for w in sorted(set(waits))}}))


if __name__ == "__main__":
    main()
