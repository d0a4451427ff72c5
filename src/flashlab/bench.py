"""``flashlab bench``: run the GPU benchmarks of ``benchmarks/`` (issue 7's protocol).

    flashlab bench [ARGS]          # benchmarks/bench_attention.py: flashlab vs SDPA, TFLOP/s
    flashlab bench memory [ARGS]   # benchmarks/bench_memory.py: peak memory, naive vs flash
    flashlab bench ncu [ARGS]      # benchmarks/ncu_traffic.py: DRAM bytes (Nsight Compute) vs model

Timing needs a CUDA GPU and compiled Triton kernels. Under ``TRITON_INTERPRET=1`` (the CPU
interpreter) or without CUDA this command refuses with a message instead of printing numbers
that mean nothing; ``--dry-run`` and ``--help`` still work. The scripts live in the repository's
``benchmarks/`` folder (they are not part of the installed package): run from a checkout.
"""
from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

SCRIPTS = {"attention": "bench_attention.py", "memory": "bench_memory.py", "ncu": "ncu_traffic.py"}


def refusal() -> str | None:
    """Why timing is impossible here, or None. Checked before triton is ever imported."""
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return ("TRITON_INTERPRET is set, so Triton kernels would run in the CPU interpreter and any "
                "time would measure the interpreter, not a GPU. Unset TRITON_INTERPRET and run on a "
                "machine with a CUDA GPU.")
    try:
        import torch
    except ImportError:
        return "torch is not installed; `flashlab bench` needs torch with CUDA and a CUDA GPU."
    if not torch.cuda.is_available():
        return ("no CUDA GPU is visible (torch.cuda.is_available() is False). `flashlab bench` only "
                "times on a GPU; committed results are in benchmarks/results/ (notebook 08 plots them).")
    return None


def find_script(name: str) -> Path:
    """benchmarks/<name> of the checkout this package was installed from (or the working dir)."""
    for root in (Path(__file__).resolve().parents[2], Path.cwd()):
        path = root / "benchmarks" / name
        if path.is_file():
            return path
    raise FileNotFoundError(f"benchmarks/{name} not found next to the package or in {Path.cwd()}; "
                            "run `flashlab bench` from a flashlab checkout")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    which = "attention"
    if argv and argv[0] in SCRIPTS:
        which, argv = argv[0], argv[1:]
    if not any(a in ("--dry-run", "-h", "--help") for a in argv):
        why = refusal()
        if why:
            print(f"flashlab bench: refusing to time: {why}", file=sys.stderr)
            return 2
    path = find_script(SCRIPTS[which])
    spec = importlib.util.spec_from_file_location(f"flashlab_bench_{which}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return int(module.main(argv) or 0)
