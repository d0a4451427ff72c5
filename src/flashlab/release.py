"""``flashlab release``: what an instructor hands out: a student version, a Gradescope autograder.

``flashlab release student DIR`` writes a copy of the course without what gives the answers away:
no ``solutions/``, no ``instructor/`` pack, no tests (they hold worked and deliberately broken
solutions), no notebook sources; and the library modules that hold the NumPy reference of an
exercise (:data:`WITHHELD`) are shipped compiled (a sourceless ``.pyc``, which imports and runs
but does not print as source). Triton kernels cannot be withheld that way, since Triton compiles a
kernel from its Python source: those modules are shipped as source and listed in the release's
``RELEASE.md``. A compiled module loads only under the Python version that compiled it
(``RELEASE.md`` names it).

``flashlab release gradescope DIR`` writes Gradescope's autograder layout: ``setup.sh`` (installs
the course), ``run_autograder`` (grades ``/autograder/submission`` into
``/autograder/results/results.json``), the course itself under ``source/`` with the instructor pack
when there is one, and ``autograder.zip`` holding all of it, ready to upload.
"""
from __future__ import annotations

import argparse
import os
import platform
import py_compile
import shutil
import sys
import zipfile
from pathlib import Path

# Library modules (relative to src/flashlab) holding the reference of an exercise: compiled.
WITHHELD = ("reference.py", "softmax.py", "tiled.py", "traffic.py", "flops.py", "decode.py",
            "grading/cases.py", "grading/mistakes.py")
# The hints (hint 3 is pseudocode by design) are the learner's material: shipped as they are.
HINTS = "grading/registry.py"
# What a student release leaves out entirely (paths relative to the repository).
LEFT_OUT = ("solutions", "instructor", "tests", "notebooks/_src", "notebooks/_build.py", ".ci", ".git", ".venv",
            "work", "artifacts", "docs/INSTRUCTORS.md", "_dev",
            # benchmark probes with whole decode kernels of their own: a worked answer to the kernel exercises
            "benchmarks/decode_pool_probe.py", "benchmarks/decode_flat_probe.py")
_SKIP_NAMES = {"__pycache__", ".ipynb_checkpoints", ".pytest_cache", ".hypothesis", ".DS_Store"}


def compiled_python_mismatch(package: Path | None = None) -> str | None:
    """In a student release whose withheld modules were compiled by another Python minor version than the
    one running: what to tell the learner (they will not import); else None. Reads the ``.pyc`` headers."""
    import importlib.util

    package = Path(package) if package is not None else Path(__file__).resolve().parent
    for rel in WITHHELD:
        compiled = (package / rel).with_suffix(".pyc")
        if (package / rel).exists() or not compiled.is_file():
            continue
        try:
            magic = compiled.read_bytes()[:4]
        except OSError:
            return None
        if magic == importlib.util.MAGIC_NUMBER:
            return None
        note = package.parents[1] / "RELEASE.md"
        made = ""
        if note.is_file():
            words = note.read_text(encoding="utf-8", errors="replace").split("with Python ", 1)
            made = f" {words[1].split()[0].rstrip('.')}" if len(words) == 2 else ""
        return (f"this student release was compiled with Python{made or ' of another version'} and this is Python "
                f"{platform.python_version()}: its compiled modules ({', '.join(WITHHELD[:3])}, ...; RELEASE.md) and "
                "so the grader will not import. Use that Python version (e.g. `conda create -n flashlab "
                f"python={'.'.join(made.split('.')[:2]).strip() or '3.11'}`), or ask for a release made with yours")
    return None


def require_compiled_python() -> None:
    """Raise ImportError with :func:`compiled_python_mismatch`'s words where it has any (the grader imports
    the compiled modules; Python's own error would say "bad magic number")."""
    mismatch = compiled_python_mismatch()
    if mismatch:
        raise ImportError(mismatch)


def repository() -> Path:
    """The course checkout the package runs from (a release is made from a checkout, not a wheel)."""
    from flashlab.course import repo_root

    root = repo_root()
    if root is None or not (root / "exercises").is_dir() or not (root / "notebooks").is_dir():
        raise RuntimeError("flashlab release works from a course checkout (with exercises/ and notebooks/); "
                           "run it inside the repository")
    return root


def _empty_target(target) -> Path:
    target = Path(target).expanduser().resolve()
    if target.exists() and any(target.iterdir()):
        raise ValueError(f"DIR={str(target)!r} exists and is not empty; give a new or empty folder")
    target.mkdir(parents=True, exist_ok=True)
    return target


def _copy_tree(root: Path, target: Path, left_out: tuple[str, ...]) -> None:
    skip = {root / p for p in left_out}
    for folder, dirs, files in os.walk(root):
        folder = Path(folder)
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_NAMES and folder / d not in skip
                         and not d.endswith(".egg-info"))
        for name in sorted(files):
            path = folder / name
            if path in skip or name.endswith((".pyc", ".pyo")):
                continue
            dest = target / path.relative_to(root)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dest)


def release_student(target, root: Path | None = None) -> Path:
    """Write the student version of the course into ``target`` (a new or empty folder)."""
    root = Path(root) if root is not None else repository()
    target = _empty_target(target)
    _copy_tree(root, target, LEFT_OUT)
    package = target / "src" / "flashlab"
    for rel in WITHHELD:
        source = package / rel
        if not source.is_file():
            continue
        py_compile.compile(str(source), cfile=str(source.with_suffix(".pyc")), dfile=f"flashlab/{rel}",
                           doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
        source.unlink()
    (target / "RELEASE.md").write_text(_release_note(package), encoding="utf-8")
    return target


def kernel_sources(package: Path) -> list[str]:
    """The modules of ``flashlab.kernels`` (relative to ``package``): they stay source, since Triton
    compiles a kernel from its Python source and the wrappers launch them."""
    return sorted(p.relative_to(package).as_posix() for p in (package / "kernels").glob("*.py"))


def _release_note(package: Path) -> str:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    kernels = "\n".join(f"- `src/flashlab/{p}`" for p in kernel_sources(package))
    withheld = "\n".join(f"- `src/flashlab/{p}`" for p in WITHHELD)
    return f"""# Student release

Made by `flashlab release student` with Python {platform.python_version()}. Start with `make lab`.

Left out: the worked solutions, the instructor's test pack, the test suite, the notebook sources and two
benchmark probes whose decode kernels would answer the kernel exercises.
Where README.md or exercises/README.md mention `solutions/`, `tests/`, `make test` or
`flashlab grade --solutions`, they describe the course repository, not this copy: here you grade your
own work with `check("ex01_naive")` in a notebook or `flashlab grade`.
These library modules hold the NumPy reference of an exercise and are shipped compiled; they load
only under Python {version}:

{withheld}

Triton compiles a kernel from its Python source, so these kernel modules are shipped as source
although the course's own kernels are worked answers to the Triton exercises. The hints
(`src/flashlab/grading/registry.py`) are shipped too: the third level of each is pseudocode.

{kernels}
"""


def release_gradescope(target, root: Path | None = None) -> Path:
    """Write Gradescope's autograder layout into ``target`` and zip it as ``autograder.zip``."""
    root = Path(root) if root is not None else repository()
    target = _empty_target(target)
    _copy_tree(root, target / "source", ("tests", ".ci", ".git", ".venv", "work", "artifacts", "_dev", "solutions"))
    tests = " --tests instructor" if (root / "instructor").is_dir() else ""
    scripts = {
        "setup.sh": "#!/usr/bin/env bash\n# Gradescope runs this once when it builds the autograder image.\n"
                    "set -euo pipefail\ncd /autograder/source\npython3 -m pip install -q '.[course]'\n",
        "run_autograder": "#!/usr/bin/env bash\n# Gradescope runs this for every submission; the learner's files "
                          "are in /autograder/submission.\nset -uo pipefail\ncd /autograder/source\n"
                          "mkdir -p /autograder/results\n"
                          "python3 -m flashlab.cli grade --exercises-dir /autograder/submission "
                          f"--gradescope /autograder/results/results.json{tests}\n"
                          "exit 0  # the score is in results.json; a failing grade is not a failed run\n",
    }
    for name, text in scripts.items():
        path = target / name
        path.write_text(text, encoding="utf-8")
        path.chmod(0o755)
    with zipfile.ZipFile(target / "autograder.zip", "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(target.rglob("*")):
            if path.is_file() and path.name != "autograder.zip":
                info = zipfile.ZipInfo.from_file(path, path.relative_to(target).as_posix())
                with open(path, "rb") as f:
                    z.writestr(info, f.read(), zipfile.ZIP_DEFLATED)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flashlab release", description="Write what an instructor hands out.")
    parser.add_argument("kind", choices=("student", "gradescope"),
                        help="student: the course without answers; gradescope: the autograder zip layout")
    parser.add_argument("dir", metavar="DIR", help="a new or empty folder to write into")
    args = parser.parse_args(argv)
    try:
        out = (release_student if args.kind == "student" else release_gradescope)(args.dir)
    except (ValueError, RuntimeError) as exc:
        print(f"flashlab release: {exc}", file=sys.stderr)
        return 2
    print(f"wrote the {args.kind} release to {out}")
    return 0
