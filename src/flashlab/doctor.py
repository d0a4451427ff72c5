"""``flashlab doctor``: what this machine will run, and known-bad combinations with their fix.

Versions are read from package metadata, so the doctor imports neither torch nor triton unless
it must (to ask torch whether a CUDA GPU is present).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata

from . import targets

PACKAGES = ("numpy", "torch", "triton", "matplotlib", "ipywidgets", "jupyterlab")


@dataclass
class Finding:
    level: str  # "ok", "warn" or "error"
    text: str
    fix: str = ""


@dataclass
class Diagnosis:
    python: str
    platform: str
    versions: dict[str, str | None]
    gpu: str | None  # device name, or None without a CUDA GPU
    triton_mode: str  # "compiled", "interpreter", or "unavailable"
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(f.level != "error" for f in self.findings)


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _release(version: str | None) -> tuple[int, ...]:
    """(major, minor) of a version string such as '2.3.5' or '2.13.0+cpu'."""
    if version is None:
        return ()
    parts = []
    for piece in version.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _gpu_name() -> str | None:
    if _version("torch") is None:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return f"{torch.cuda.get_device_name()} (sm_{major}{minor})"


def _requires(name: str) -> list[str]:
    """The Requires-Dist lines of an installed package ([] when it is missing or declares none)."""
    try:
        return metadata.requires(name) or []
    except metadata.PackageNotFoundError:
        return []


def _torch_triton_pin() -> str | None:
    """The triton version torch was built against (its ``triton==X`` requirement), if it has one."""
    for line in _requires("torch"):
        match = re.match(r"\s*(?:pytorch-)?triton\s*==\s*([^\s;,]+)", line)
        if match:
            return match.group(1)
    return None


def _nvidia_driver() -> bool:
    """True when an NVIDIA driver is visible (Linux driver file or nvidia-smi on PATH)."""
    return os.path.exists("/proc/driver/nvidia/version") or shutil.which("nvidia-smi") is not None


def diagnose() -> Diagnosis:
    """Collect versions, GPU presence, Triton's mode and the known problems of this machine."""
    versions = {name: _version(name) for name in PACKAGES}
    gpu = _gpu_name()
    interpret = os.environ.get("TRITON_INTERPRET", "") not in ("", "0")
    if versions["triton"] is None:
        mode = "unavailable"
    elif gpu is not None and not interpret:
        mode = "compiled"
    else:
        mode = "interpreter"
    d = Diagnosis(sys.version.split()[0], platform.platform(), versions, gpu, mode)
    add = d.findings.append

    if sys.version_info < (3, 10):
        add(Finding("error", f"Python {d.python} is too old", "use Python 3.10 or newer (the course is tested on 3.11)"))
    for name in PACKAGES:
        if versions[name] is None:
            add(Finding("error" if name == "numpy" else "warn", f"{name} is not installed",
                        "run `make install` (or `pip install -e '.[course]'`) in the repository"))
    if versions["triton"] is None and sys.platform != "linux":
        add(Finding("warn", "Triton publishes wheels for Linux only: the Triton notebooks (05-08) cannot run here",
                    "use Linux or WSL2 for notebooks 05-08; notebooks 00-04 and 09 need only NumPy"))
    numpy_v, triton_v = _release(versions["numpy"]), _release(versions["triton"])
    if mode == "interpreter" and triton_v and triton_v < (3, 7) and numpy_v >= (2, 4):
        add(Finding("error", f"triton {versions['triton']} with numpy {versions['numpy']}: the CPU interpreter fails "
                             "('only 0-dimensional arrays can be converted to Python scalars')",
                    "pip install 'numpy<2.4' (numpy 2.3.5 works with triton 3.6, measured; the interpreter was "
                    "fixed after triton 3.6, in triton-lang/triton pull request 9172)"))
    pin = _torch_triton_pin()
    if pin and versions["triton"] and _release(pin) != triton_v:
        add(Finding("warn", f"torch {versions['torch']} was built against triton {pin} but triton {versions['triton']} "
                            "is installed: pip reports a conflict and torch.compile may fail",
                    f"pip install 'triton=={pin}' (or the torch release that pins triton {versions['triton']})"))
    if gpu is None and versions["torch"] and _nvidia_driver():
        add(Finding("warn", f"an NVIDIA driver is present but torch {versions['torch']} sees no CUDA GPU "
                            "(a CPU-only torch build, or a CUDA build newer than the driver): everything runs on the "
                            "CPU, Triton in its interpreter",
                    "install the CUDA build of torch that matches your driver (see `nvidia-smi`), then re-run "
                    "`flashlab doctor`"))
    if mode == "interpreter":
        add(Finding("ok", "Triton runs in the CPU interpreter: kernels are correct but slow, and timings mean nothing "
                          "for GPU speed; bf16 dot operands are upcast to fp32 by flashlab because the interpreter's "
                          "bf16 tl.dot is wrong"))
        if gpu is not None:
            add(Finding("warn", "TRITON_INTERPRET is set although a GPU is present: kernels will not use it",
                        "unset TRITON_INTERPRET before starting Python"))
    if mode == "compiled":
        add(Finding("ok", f"Triton compiles for the GPU {gpu}"))
        add(Finding("ok", _forward_rungs(gpu)))
        add(Finding("ok", targets.doctor_report() or "no CUDA target found"))  # flashlab.targets: rungs, dtypes here
    if "triton" in sys.modules and mode == "interpreter" and not interpret:
        add(Finding("warn", "triton was imported before TRITON_INTERPRET was set; its mode is fixed now",
                    "restart the kernel; flashlab sets TRITON_INTERPRET itself when it imports triton first"))
    if not any(f.level != "ok" for f in d.findings):
        add(Finding("ok", "no known problems"))
    return d


def _forward_rungs(gpu: str) -> str:
    """Which forward rungs ``flash_attention`` can use on this GPU (``kernels.ladder.best_rung`` decides per call)."""
    if gpu.endswith("(sm_90)"):
        return ("Hopper GPU: flash_attention's forward runs the Gluon rung v5_gluon_ws (fp16/bf16, d = 128, long "
                "sequences), the Hopper rung v4_hopper (fp16/bf16, d 64 or 128) or v3_autotuned (everything else)")
    return ("not a Hopper (sm_90) GPU: the v4_hopper and v5_gluon_ws rungs do not run here; flash_attention's "
            "forward runs v3_autotuned (benchmarks/NOTES.md was measured on an H200)")


def format_text(d: Diagnosis) -> str:
    lines = [f"Python      {d.python}  ({d.platform})"]
    lines += [f"{name:<11} {v or 'not installed'}" for name, v in d.versions.items()]
    lines.append(f"GPU         {d.gpu or 'none (CPU only)'}")
    lines.append(f"Triton      {d.triton_mode}")
    for f in d.findings:
        lines.append(f"[{f.level}] {f.text}" + (f"\n       fix: {f.fix}" if f.fix else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flashlab doctor", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    args = parser.parse_args(argv)
    d = diagnose()
    print(json.dumps(asdict(d) | {"ok": d.ok}, indent=2) if args.json else format_text(d))
    return 0 if d.ok else 1
