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

# The torch releases flashlab supports (pyproject.toml's course extra; README "Platforms").
TORCH_SUPPORTED = ((2, 11), (2, 14))  # lower bound included, upper bound excluded
TORCH_RANGE = "torch>=2.11,<2.14"
# The triton each torch release's Linux wheels require (Requires-Dist of the manylinux_2_28_x86_64
# cp311 wheels on PyPI, read 2026-11-30 with `pip install --dry-run --no-deps --report`). Used for
# torch builds that name no triton themselves (CPU builds, conda); a torch that does name one is
# checked against its own requirement.
SHIPPED_TRITON = {
    "2.9.0": "==3.5.0", "2.9.1": "==3.5.1", "2.10.0": "==3.6.0", "2.11.0": "==3.6.0",
    "2.12.0": "==3.7.0", "2.12.1": "==3.7.1", "2.13.0": "==3.7.1",
    "2.14.0": "~=3.8.0", "2.14.1": "~=3.8.0", "2.15.0": "~=3.9.0",
}


@dataclass
class Finding:
    level: str  # "ok", "warn" or "error"
    text: str
    fix: str = ""


@dataclass
class Diagnosis:
    flashlab: str | None
    python: str
    platform: str
    versions: dict[str, str | None]
    gpu: str | None  # device name, or None without a CUDA GPU
    triton_mode: str  # "compiled", "interpreter", or "unavailable"
    torch_requires: str | None = None  # torch's own triton requirement ('==3.7.1'), if its metadata names one
    grading: str = ""  # how the grader confines a submission here (grading.confine)
    findings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(f.level != "error" for f in self.findings)


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _release(version: str | None, parts: int = 2) -> tuple[int, ...]:
    """The first numbers of a version string: '2.13.0+cpu' -> (2, 13), or (2, 13, 0) with parts=3."""
    if version is None:
        return ()
    numbers = re.findall(r"\d+", version.split("+")[0])[:parts]
    return tuple(int(n) for n in numbers) + (0,) * (parts - len(numbers))


def _satisfies(version: str, spec: str) -> bool:
    """Does ``version`` meet ``spec``? Only the two forms torch uses for triton: '==3.7.1' and '~=3.8.0'."""
    target = _release(spec.lstrip("=~ "), 3)
    have = _release(version, 3)
    if spec.startswith("~="):  # ~=3.8.0 means >=3.8.0 and ==3.8.*
        return have >= target and have[:2] == target[:2]
    return have == target


def _named(spec: str) -> str:
    """'==3.7.1' -> 'triton 3.7.1'; '~=3.8.0' -> 'triton~=3.8.0'."""
    return f"triton {spec[2:]}" if spec.startswith("==") else f"triton{spec}"


def torch_triton_findings(torch: str | None, triton: str | None, torch_requires: str | None = None) -> list[Finding]:
    """Flag a torch outside flashlab's tested range and a triton that torch does not ship with.

    ``torch_requires`` is torch's own triton requirement ('==3.7.1') when its metadata names one;
    otherwise the triton PyTorch's Linux wheels require for that release (``SHIPPED_TRITON``) is
    used, and a release missing from the table is not judged.
    """
    found = []
    if torch is None:
        return found
    if not TORCH_SUPPORTED[0] <= _release(torch) < TORCH_SUPPORTED[1]:
        found.append(Finding("warn", f"torch {torch} is outside the releases flashlab is tested with ({TORCH_RANGE})",
                             f'pip install "{TORCH_RANGE}"'))
    if triton is None:
        return found
    base = ".".join(map(str, _release(torch, 3)))
    if torch_requires:
        if not _satisfies(triton, torch_requires):
            found.append(Finding("warn", f"torch {torch} was built against {_named(torch_requires)} but triton {triton} "
                                         "is installed: pip reports a conflict and torch.compile may fail",
                                 f'pip install "triton{torch_requires}" (or the torch release that pins triton {triton})'))
    elif base in SHIPPED_TRITON and not _satisfies(triton, SHIPPED_TRITON[base]):
        found.append(Finding("warn", f"torch {torch} with triton {triton}: PyTorch ships torch {base} with "
                                     f"{_named(SHIPPED_TRITON[base])}, so this pair is untested",
                             f'pip install "triton{SHIPPED_TRITON[base]}"'))
    return found


def interpreter_numpy_findings(triton: str | None, numpy: str | None, interpreter: bool) -> list[Finding]:
    """Flag triton < 3.7 with numpy >= 2.4 when Triton runs in its CPU interpreter."""
    if not (interpreter and triton and numpy and _release(triton) < (3, 7) and _release(numpy) >= (2, 4)):
        return []
    return [Finding("warn", f"triton {triton} with numpy {numpy}: the CPU interpreter of triton < 3.7 fails with "
                            "numpy >= 2.4 ('only 0-dimensional arrays can be converted to Python scalars'); flashlab "
                            "repairs it in its own processes (kernels, notebooks after course.setup(), the grader), "
                            "but Triton code run without flashlab still fails",
                    'pip install "numpy<2.4" (numpy 2.3.5 works with triton 3.6.0, measured), or move to torch 2.13 '
                    'with triton 3.7.1: pip install "torch>=2.13,<2.14" "triton==3.7.1"')]


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
    """torch's own triton requirement ('==3.7.1', '~=3.8.0') from its metadata, if it names one."""
    for line in _requires("torch"):
        match = re.match(r"\s*(?:pytorch-)?triton\s*((?:==|~=)\s*[^\s;,]+)", line)
        if match:
            return match.group(1).replace(" ", "")
    return None


def _pair_text(torch: str | None, triton: str | None, torch_requires: str | None) -> str:
    """One line: the torch/triton pair and where the expected triton comes from."""
    if torch is None or triton is None:
        return f"torch {torch or 'not installed'} / triton {triton or 'not installed'}"
    base = ".".join(map(str, _release(torch, 3)))
    if torch_requires:
        source = f"torch requires {_named(torch_requires)}"
    elif base in SHIPPED_TRITON:
        source = f"PyTorch ships {base} with {_named(SHIPPED_TRITON[base])}"
    else:
        source = "a torch release missing from flashlab's table"
    return f"torch {torch} / triton {triton} ({source})"


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
    d = Diagnosis(_version("flashlab"), sys.version.split()[0], platform.platform(), versions, gpu, mode,
                  grading=grading_confinement())
    add = d.findings.append

    from flashlab.release import compiled_python_mismatch

    mismatch = compiled_python_mismatch()
    if mismatch:
        add(Finding("error", mismatch.split(". Use", 1)[0], "use" + mismatch.split(". Use", 1)[1]
                    if ". Use" in mismatch else ""))
    if sys.version_info < (3, 10):
        add(Finding("error", f"Python {d.python} is too old", "use Python 3.10 or newer (the course is tested on 3.11)"))
    for name in PACKAGES:
        if versions[name] is None:
            add(Finding("error" if name == "numpy" else "warn", f"{name} is not installed",
                        "run `make install` (or `pip install -e '.[course]'`) in the repository"))
    if versions["triton"] is None and sys.platform != "linux":
        add(Finding("warn", "Triton publishes wheels for Linux only: the Triton notebooks (05-08) cannot run here",
                    "use Linux or WSL2 for notebooks 05-08; notebooks 00-04 and 09 need only NumPy"))
    d.findings += interpreter_numpy_findings(versions["triton"], versions["numpy"], mode == "interpreter")
    d.torch_requires = _torch_triton_pin()
    d.findings += torch_triton_findings(versions["torch"], versions["triton"], d.torch_requires)
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


def grading_confinement() -> str:
    """How a graded submission is confined on this machine: by the kernel (Landlock and seccomp,
    Linux 5.13+) or only by the grader's checks inside Python (docs/ARCHITECTURE.md's threat model)."""
    from .grading import confine

    abi = confine.landlock_abi()
    if confine.available():
        return (f"submissions confined by the kernel (Landlock ABI {abi}: files and TCP; seccomp: "
                "no processes unless Triton compiles for a GPU)")
    why = "no Landlock in this kernel" if platform.system() == "Linux" else f"{platform.system()}, not Linux"
    return (f"submissions checked inside Python only ({why}): fine for your own work; grade a class "
            "on Linux 5.13 or newer")


def _forward_rungs(gpu: str) -> str:
    """Which forward rungs ``flash_attention`` can use on this GPU (``kernels.ladder.best_rung`` decides per call)."""
    if gpu.endswith("(sm_90)"):
        return ("Hopper GPU: flash_attention's forward runs the Gluon rung v5_gluon_ws (fp16/bf16, d = 128, long "
                "sequences), the Hopper rung v4_hopper (fp16/bf16, d 64 or 128) or v3_autotuned (everything else)")
    return ("not a Hopper (sm_90) GPU: the v4_hopper and v5_gluon_ws rungs do not run here; flash_attention's "
            "forward runs v3_autotuned (benchmarks/NOTES.md was measured on an H200)")


def format_text(d: Diagnosis) -> str:
    lines = [f"flashlab    {d.flashlab or 'unknown (not installed: run `pip install -e .` in the repository)'}",
             f"Python      {d.python}  ({d.platform})"]
    lines += [f"{name:<11} {v or 'not installed'}" for name, v in d.versions.items()]
    lines.append(f"pair        {_pair_text(d.versions.get('torch'), d.versions.get('triton'), d.torch_requires)}")
    lines.append(f"GPU         {d.gpu or 'none (CPU only)'}")
    lines.append(f"Triton      {d.triton_mode}")
    if d.grading:
        lines.append(f"grading     {d.grading}")
    for f in d.findings:
        lines.append(f"[{f.level}] {f.text}" + (f"\n       fix: {f.fix}" if f.fix else ""))
    from flashlab.course import wrap_prose

    return wrap_prose("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flashlab doctor", description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    args = parser.parse_args(argv)
    d = diagnose()
    print(json.dumps(asdict(d) | {"ok": d.ok}, indent=2) if args.json else format_text(d))
    return 0 if d.ok else 1
