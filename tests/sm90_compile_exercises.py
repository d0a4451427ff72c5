"""Compile the Triton kernels of the exercise solutions for an sm90 GPU on a machine that has none.

    python tests/sm90_compile_exercises.py EXERCISE_ID [EXERCISE_ID ...]

Each kernel the solution's wrappers launch is compiled, not run: a stand-in driver answers
Triton's questions about the target (``GPUTarget("cuda", 90, 32)``), the device and the stream,
and every module-level kernel is swapped for a proxy whose ``kernel[grid](...)`` calls
``kernel.warmup(...)`` with the same arguments. The wrappers run on small CPU tensors (only their
dtypes, shapes and strides matter; their outputs are never filled). Prints one JSON line:
{"exercise.kernel": [{"dtype": ..., "target": ..., "cubin": bytes, "shared": bytes}, ...]}. Run in its own
process without TRITON_INTERPRET: the stand-in replaces Triton's driver for the rest of the process.
"""
import importlib.util
import json
import sys
from pathlib import Path

from standin_gpu import target_gpu  # tests/standin_gpu.py (this script's folder is on sys.path)

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"


def _calls(mod, torch):
    """The wrapper calls that launch every kernel of the exercise, in float32 and float16 where allowed."""
    g = torch.Generator().manual_seed(0)

    def t(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=g).to(dtype)

    name = mod.__name__
    calls = []
    for dt in (torch.float32, torch.float16):
        if name == "ex06_triton_primer":
            calls += [lambda dt=dt: mod.vector_add(t(1000, dtype=dt), t(1000, dtype=dt)),
                      lambda dt=dt: mod.row_softmax(t(4, 100, dtype=dt))]
        elif name in ("ex07_kernel_inner_loop", "ex08_kernel_causal"):
            causal = (False, True) if name == "ex08_kernel_causal" else (False,)
            calls += [lambda dt=dt, c=c: mod.flash_forward(t(2, 40, 64, dtype=dt), t(2, 50, 64, dtype=dt),
                                                           t(2, 50, 64, dtype=dt), causal=c) for c in causal]
        elif name == "ex12_triton_online_softmax":
            calls.append(lambda dt=dt: mod.online_row_softmax(t(4, 300, dtype=dt), 64))
        elif name == "ex14_split_kv_decode":
            calls.append(lambda dt=dt: mod.split_kv_partials(t(2, 64, dtype=dt), t(2, 500, 64, dtype=dt),
                                                             t(2, 500, 64, dtype=dt), 4))
    if name == "ex13_triton_backward":  # float32 only (its contract)
        for c in (False, True):
            q, o, do, k, v = t(2, 40, 64), t(2, 40, 64), t(2, 40, 64), t(2, 50, 64), t(2, 50, 64)
            args = (q, k, v, o, t(2, 40), do)
            calls += [lambda c=c, a=args: mod.flash_backward_dkdv(*a, causal=c),
                      lambda c=c, a=args: mod.flash_backward_dq(*a, causal=c)]
    return calls


def main() -> None:
    import torch
    import triton


    target_gpu(90)
    report = {}

    class Warmup:  # kernel[grid](*args, **meta) compiles instead of launching
        def __init__(self, kernel, kernel_name):
            self.kernel, self.name = kernel, kernel_name

        def __getitem__(self, grid):
            def compile_only(*args, **meta):
                compiled = self.kernel.warmup(*args, grid=grid, **meta)
                dtype = next(str(a.dtype) for a in args if hasattr(a, "dtype"))
                report.setdefault(self.name, []).append(dict(
                    dtype=dtype.replace("torch.", ""), target=".target sm_90" in compiled.asm["ptx"],
                    cubin=len(compiled.asm["cubin"]), shared=compiled.metadata.shared))
            return compile_only

    for name in sys.argv[1:]:
        spec = importlib.util.spec_from_file_location(name, SOLUTIONS / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        for attr, value in list(vars(mod).items()):
            if isinstance(value, triton.runtime.jit.JITFunction):
                setattr(mod, attr, Warmup(value, f"{name}.{attr}"))
        for call in _calls(mod, torch):
            call()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
