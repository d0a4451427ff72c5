"""Compile the course's kernels for one GPU target on a machine with no GPU; print one JSON report.

    python tests/arch_compile.py TARGET [quick|full]      (TARGET: sm75, sm80, sm86, sm89, sm90)

Triton's compiler needs only a target (``GPUTarget("cuda", cc, 32)``) and the ``ptxas`` it ships;
a stand-in driver answers for the target, the device and the stream (as tests/sm90_compile.py
does). ``FLASHLAB_TARGET`` makes the library choose its configs as on that GPU, and every Triton
kernel the wrappers launch is swapped for a recorder that compiles (``kernel.warmup``) instead of
launching, so the configs compiled are the ones the real dispatcher and v3's pruned autotune list
pick. Run in its own process: the stand-in replaces Triton's driver for the rest of the process.

quick: d = 128, fp16 (the tightest shared-memory fit): v1 (v0-v2 share its config), the v3
config with the largest shared memory, the three backward kernels. full: rungs v0-v3 (every v3
config offered), the backward, the primer kernels, d in {64, 128}, fp16 and (where the target has
bf16 Tensor Cores) bf16, and the kernels of the exercises' solutions (ex06-ex08, d = 64, fp16).
"""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from standin_gpu import target_gpu  # tests/standin_gpu.py (this script's folder is on sys.path)


def main() -> None:
    name, tier = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else "quick")
    os.environ.pop("TRITON_INTERPRET", None)
    os.environ["FLASHLAB_TARGET"] = name
    import torch
    import triton  # imported before flashlab, so flashlab does not switch on the interpreter

    from flashlab import targets

    target = targets.target(name)


    target_gpu(target.cc)
    from flashlab.kernels import _mode, flash_bwd, flash_fwd, primer

    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    records = []
    job = {}

    class Recorder:
        """Stands in for a jitted kernel: ``kernel[grid](...)`` compiles and records, never launches."""

        def __init__(self, kernel, label):
            self.kernel, self.label = kernel, label

        def __getitem__(self, grid):
            def compile_only(*args, **kwargs):
                start = time.process_time()
                compiled = self.kernel.warmup(*args, grid=grid, **kwargs)
                with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
                    f.write(compiled.asm["cubin"])
                    f.flush()
                    usage = subprocess.run([str(cuobjdump), "-res-usage", f.name], capture_output=True,
                                           text=True).stdout
                fields = dict(item.split(":", 1) for item in usage.split() if ":" in item)
                records.append(dict(job, kernel=self.label, shared=compiled.metadata.shared,
                                    regs=int(fields.get("REG", -1)), local=int(fields.get("LOCAL", -1)),
                                    seconds=round(time.process_time() - start, 2),
                                    constexprs={k: v for k, v in kwargs.items() if k.isupper() or k.startswith("num_")}))
            return compile_only

    for module, names in ((flash_fwd, ["_fwd_v0_grid_bh", "_fwd_v1_minimal", "_fwd_v2_exp2_causal"]),
                          (flash_bwd, ["_bwd_preprocess", "_bwd_dkdv", "_bwd_dq"]),
                          (primer, ["_add_kernel", "_softmax_kernel", "_matmul_kernel"])):
        for attr in names:
            setattr(module, attr, Recorder(getattr(module, attr), attr))
    primer._mode.check_device = lambda name, tensor: None  # CPU tensors stand in for CUDA ones
    from flashlab.kernels import plans

    plans.ENABLED = False  # the backward launches through the Recorders above, not through a launch plan

    head_dims = [128] if tier == "quick" else [64, 128]
    dtypes = [torch.float16] + ([torch.bfloat16] if tier == "full" and target.bf16 else [])
    for dtype in dtypes:
        for d in head_dims:
            q = torch.zeros(1, 2, 300, d, dtype=dtype)  # (B, H, N, d): only dtype, shape and strides matter
            lse = torch.zeros(1, 2, 300)  # (B, H, N)
            job.update(dtype=str(dtype).removeprefix("torch."), d=d, rung="dispatch")
            rungs = ["forward_v1"] if tier == "quick" else ["forward_v0", "forward_v1", "forward_v2"]
            for rung in rungs:
                job["rung"] = rung
                getattr(flash_fwd, rung)(q, q, q, True, 0.1)
            offered = targets.offered_v3_configs(name, d, dtype)
            if tier == "quick":
                offered = [max(offered, key=lambda c: targets.fwd_smem_bytes(
                    c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], d, c.num_stages, 2, target.cc, c.num_warps))]
            job["rung"] = "v3"
            for c in offered:
                cfg = flash_fwd.FwdConfig(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)
                flash_fwd.forward_v2(q, q, q, True, 0.1, config=cfg)
            job["rung"] = "backward"
            flash_bwd.backward(q, q, q, q, lse, q, True, 0.1)
    if tier == "full":
        job.update(rung="primer", d=None)
        for dtype in dtypes:
            job["dtype"] = str(dtype).removeprefix("torch.")
            x = torch.zeros(4096, dtype=dtype)
            primer.add(x, x)
            primer.softmax(torch.zeros(64, 1000, dtype=dtype))
            primer.matmul(torch.zeros(256, 256, dtype=dtype), torch.zeros(256, 256, dtype=dtype))
        job.update(rung="exercise solutions", d=64, dtype="float16")
        for path, call in (("ex06_triton_primer.py", lambda m: (m.vector_add(x, x), m.row_softmax(x.view(16, 256)))),
                           ("ex07_kernel_inner_loop.py", lambda m: m.flash_forward(*[torch.zeros(2, 100, 64,
                                                                                     dtype=torch.float16)] * 3)),
                           ("ex08_kernel_causal.py", lambda m: m.flash_forward(*[torch.zeros(2, 100, 64,
                                                                                  dtype=torch.float16)] * 3,
                                                                                causal=True))):
            x = torch.zeros(4096, dtype=torch.float16)
            spec = importlib.util.spec_from_file_location(path[:-3], Path(__file__).parents[1] / "solutions" / path)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            for attr, value in list(vars(module).items()):
                if isinstance(value, triton.runtime.jit.JITFunction):
                    setattr(module, attr, Recorder(value, f"{path[:4]}.{attr}"))
            call(module)
    assert not _mode.is_interpreter(), "the kernels were interpreted, not compiled"
    print(json.dumps({"target": name, "cc": target.cc, "limit": target.smem_per_block, "records": records}))


if __name__ == "__main__":
    main()
