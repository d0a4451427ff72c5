"""Helpers shared by the course notebooks: environment set-up, problem sizes, benchmark results.

Every notebook starts with ``env = course.setup()``. It decides once whether a CUDA GPU is
present, switches Triton to its CPU interpreter (``TRITON_INTERPRET=1``) *before* triton is
imported when there is none, seeds NumPy, and prints the environment in one line. Later cells
pick problem sizes with ``env.pick(cpu=..., gpu=...)`` so the same notebook runs in under a
minute on a laptop and at realistic sizes on a GPU.

Benchmark results are the JSON files written on an H200 by ``benchmarks/`` and committed in
``benchmarks/results/``; :func:`load_results` reads them so notebook 08 can plot them anywhere.
:func:`source` prints a library function or Triton kernel for reading (notebooks never paste
library code), :func:`show` displays a figure exactly once, :func:`speedup` reads one ratio out of a
benchmark row, and :func:`run_benchmark` re-runs a benchmark live on a GPU. Nothing here writes into the
repository except under ``artifacts/`` (git-ignored).
"""
from __future__ import annotations

import json
import os
import platform
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_DEVICE_ENV = "FLASHLAB_DEVICE"  # "cpu" forces the CPU path even where a GPU exists
_RESULTS_ENV = "FLASHLAB_RESULTS_DIR"
_ARTIFACTS_ENV = "FLASHLAB_ARTIFACTS_DIR"
GPU_MEMORY_FRACTION = 0.5  # of the device's memory; the rest for PyTorch's allocator cache, the context, other tabs


@dataclass(frozen=True)
class Environment:
    """What ``setup()`` found: the device the course runs on and the library versions."""

    device: str  # "cuda" or "cpu"
    gpu_name: str | None
    triton_mode: str  # "compiled", "interpreter" or "missing"
    python: str
    numpy: str
    torch: str | None
    triton: str | None
    seed: int
    gpu_memory: int | None = None  # bytes of device memory (torch's total_memory); None without a GPU

    @property
    def has_gpu(self) -> bool:
        return self.device == "cuda"

    def memory_budget(self) -> int | None:
        """Bytes a notebook's GPU sizes may use: GPU_MEMORY_FRACTION of the device's memory."""
        return None if self.gpu_memory is None else int(GPU_MEMORY_FRACTION * self.gpu_memory)

    def pick(self, cpu: Any, gpu: Any, gpu_bytes: Any = None) -> Any:
        """Return ``gpu`` when a CUDA GPU is in use, else ``cpu`` (sizes, repeat counts, ...).

        ``gpu_bytes(size) -> bytes`` estimates what one GPU size needs: sizes over
        :meth:`memory_budget` are dropped from a list, and a single size over it falls back to
        ``cpu``, so a 16 GB T4 runs the notebook where an 80 GB GPU runs it bigger.
        """
        if not self.has_gpu:
            return cpu
        budget = self.memory_budget()
        if gpu_bytes is None or budget is None:
            return gpu
        if isinstance(gpu, (list, tuple)):
            kept = type(gpu)(size for size in gpu if gpu_bytes(size) <= budget)
            return kept if kept else cpu
        return gpu if gpu_bytes(gpu) <= budget else cpu

    def line(self) -> str:
        where = f"GPU {self.gpu_name}" if self.has_gpu else "CPU only (no CUDA GPU)"
        parts = [f"flashlab course | {where}", f"Python {self.python}", f"numpy {self.numpy}",
                 f"torch {self.torch or 'not installed'}",
                 f"triton {self.triton or 'not installed'} ({self.triton_mode})", f"seed {self.seed}"]
        return " | ".join(parts)


def _cuda_device() -> tuple[bool, str | None, str | None]:
    """(has_gpu, gpu_name, torch_version). Imports torch only, never triton."""
    try:
        import torch
    except ImportError:
        return False, None, None
    if os.environ.get(_DEVICE_ENV, "").lower() == "cpu" or not torch.cuda.is_available():
        return False, None, torch.__version__
    return True, torch.cuda.get_device_name(0), torch.__version__


def _gpu_memory() -> int:
    import torch

    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory)


def setup(seed: int = 0, verbose: bool = True) -> Environment:
    """Prepare a notebook: choose the device, set Triton's mode, seed NumPy, print one line.

    Without a CUDA GPU this sets ``TRITON_INTERPRET=1`` before triton is imported, so the
    course's Triton kernels run (slowly, exactly) in the CPU interpreter. Set the environment
    variable ``FLASHLAB_DEVICE=cpu`` to take the CPU path on a GPU machine.
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise ValueError(f"seed={seed!r} must be a non-negative int")
    import numpy as np

    has_gpu, gpu_name, torch_version = _cuda_device()
    if not has_gpu:
        if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
            raise RuntimeError("triton was imported before flashlab.course.setup() on a machine "
                               "without a GPU; restart the kernel and run setup() first so Triton "
                               "uses its CPU interpreter (TRITON_INTERPRET=1)")
        os.environ["TRITON_INTERPRET"] = "1"
    try:
        from flashlab.kernels import _mode

        triton = _mode.triton()  # imports triton; repairs triton 3.6's interpreter for numpy >= 2.4
        triton_version = triton.__version__
        triton_mode = "interpreter" if os.environ.get("TRITON_INTERPRET") == "1" else "compiled"
    except ImportError:
        triton_version, triton_mode = None, "missing"
    np.random.seed(seed)
    if torch_version is not None:
        import torch
        torch.manual_seed(seed)
    env = Environment(device="cuda" if has_gpu else "cpu", gpu_name=gpu_name, triton_mode=triton_mode,
                      python=platform.python_version(), numpy=np.__version__, torch=torch_version,
                      triton=triton_version, seed=seed, gpu_memory=_gpu_memory() if has_gpu else None)
    if verbose:
        print(env.line())
    return env


def repo_root() -> Path | None:
    """The flashlab checkout this package was installed from (editable install), or None."""
    for start in (Path.cwd(), Path(__file__).resolve().parent):
        for folder in (start, *start.parents):
            if (folder / "pyproject.toml").is_file() and (folder / "src" / "flashlab").is_dir():
                return folder
    return None


def results_dir() -> Path | None:
    """``benchmarks/results`` of the checkout (or ``$FLASHLAB_RESULTS_DIR``); None if absent."""
    if os.environ.get(_RESULTS_ENV):
        return Path(os.environ[_RESULTS_ENV])
    root = repo_root()
    return None if root is None else root / "benchmarks" / "results"


def load_results(pattern: str = "*.json") -> dict[str, Any]:
    """Every committed benchmark results file matching ``pattern``, as ``{file stem: parsed JSON}``.

    Returns an empty dict when there are none yet (then notebooks say so instead of plotting).
    """
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"pattern={pattern!r} must be a non-empty glob string such as '*.json'")
    folder = results_dir()
    if folder is None or not folder.is_dir():
        return {}
    out: dict[str, Any] = {}
    for path in sorted(folder.glob(pattern)):
        with open(path, encoding="utf-8") as f:
            out[path.stem] = json.load(f)
    return out


def speedup(row: dict, impl: str, baseline: str, mode: str = "fwd") -> float | None:
    """How many times faster ``impl`` ran than ``baseline`` in one benchmark row.

    ``row``: one entry of a results file's ``rows``, holding ``row["results"][name][f"{mode}_ms"]``;
    ``mode``: "fwd" (forward) or "fwdbwd" (forward + backward). Returns baseline time / impl time,
    which equals impl TFLOP/s / baseline TFLOP/s since both did the same FLOPs; None when either was
    not timed (it failed, ran out of memory, or was not part of the run).
    """
    if mode not in ("fwd", "fwdbwd"):
        raise ValueError(f"mode={mode!r} must be 'fwd' or 'fwdbwd'")
    if not isinstance(row, dict) or not isinstance(row.get("results"), dict):
        raise TypeError(f"row={type(row).__name__} must be one benchmark row: a dict with a 'results' dict")
    t_impl = row["results"].get(impl, {}).get(f"{mode}_ms")
    t_base = row["results"].get(baseline, {}).get(f"{mode}_ms")
    if not t_impl or not t_base:
        return None
    return t_base / t_impl


def run_benchmark(which: str, args: list[str], name: str) -> dict[str, Any]:
    """Run one of ``benchmarks/``' scripts live (GPU only) and return its results file, parsed.

    ``which``: "attention" (``bench_attention.py``) or "memory" (``bench_memory.py``); ``args``:
    its command-line arguments (sizes); the results go to ``artifacts/<name>.json``, never over the
    committed ``benchmarks/results/``. Raises RuntimeError with the script's reason where it
    refuses to time (no CUDA GPU, or Triton in its interpreter).
    """
    if which not in ("attention", "memory"):
        raise ValueError(f"which={which!r} must be 'attention' or 'memory'")
    if not isinstance(name, str) or not name or "/" in name:
        raise ValueError(f"name={name!r} must be a plain file name without '/' or '.json'")
    from . import bench

    why = bench.refusal()
    if why:
        raise RuntimeError(f"cannot run the {which} benchmark here: {why}")
    out = artifacts_dir() / f"{name}.json"
    code = bench.main([which, *map(str, args), "--out", str(out)])
    if code != 0 or not out.is_file():
        raise RuntimeError(f"the {which} benchmark exited with code {code} and wrote no {out}")
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def artifacts_dir() -> Path:
    """Where notebooks may write files: ``<checkout>/artifacts`` (git-ignored), created on demand."""
    if os.environ.get(_ARTIFACTS_ENV):
        folder = Path(os.environ[_ARTIFACTS_ENV])
    else:
        root = repo_root()
        folder = (root if root is not None else Path.cwd()) / "artifacts"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def show(fig) -> None:
    """Display a matplotlib figure once in the notebook and release it.

    The library's plot functions return figures; Jupyter's inline backend does not always show
    a figure made in a cell after the first, and showing it by hand as well would draw it twice.
    ``show(fig)`` displays it explicitly and closes it, so it appears exactly once.

    Outside Jupyter (a notebook's source in ``notebooks/_src/`` run as a plain script, where
    IPython may not be installed) the figure is saved as ``artifacts/figures/figure-NNN.png``
    instead and the path printed.
    """
    if not hasattr(fig, "savefig"):
        raise TypeError(f"fig={type(fig).__name__} is not a matplotlib Figure")
    import matplotlib.pyplot as plt

    try:
        from IPython.display import display
    except ImportError:
        folder = artifacts_dir() / "figures"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"figure-{len(list(folder.glob('figure-*.png'))):03d}.png"
        fig.savefig(path)
        print(f"(no IPython to display the figure: saved {path})")
    else:
        display(fig)
    plt.close(fig)


def wrap_prose(text: str, width: int = 100) -> str:
    """``text`` with each line of prose longer than ``width`` wrapped at spaces, continued two
    columns further in; lines laid out in columns (a run of two spaces after their indent: table
    rows) are left as they are. JupyterLab breaks long printed lines anywhere, inside words too."""
    out = []
    for line in text.splitlines():
        body = line.lstrip(" ")
        if len(line) <= width or "  " in body:
            out.append(line)
            continue
        indent = " " * (len(line) - len(body))
        out.append(textwrap.fill(body, width, initial_indent=indent, subsequent_indent=indent + "  ",
                                 break_long_words=False, break_on_hyphens=False))
    return "\n".join(out)


def source(obj, start: str | None = None, stop: str | None = None) -> str:
    """The source code of a library function or Triton kernel, to read beside the prose.

    ``start`` / ``stop``: optional marker strings; the text from the line holding ``start`` up to
    (not including) the line holding ``stop``. Notebooks print library code this way instead of
    pasting it, so what the learner reads is what runs. In a student release, where the module is
    shipped compiled (``flashlab release student``), it returns a sentence saying so.
    """
    import inspect

    fn = getattr(obj, "fn", obj)  # a @triton.jit kernel wraps the Python function in .fn
    try:
        text = inspect.getsource(fn)
    except OSError:  # a sourceless module of the student release
        return f"({getattr(fn, '__qualname__', fn)!s}: its source is not part of this release)"
    lines = text.splitlines()
    first, last = 0, len(lines)
    if start is not None:
        hits = [i for i, line in enumerate(lines) if start in line]
        if not hits:
            raise ValueError(f"start={start!r} does not occur in the source of {fn.__qualname__}")
        first = hits[0]
    if stop is not None:
        hits = [i for i, line in enumerate(lines) if stop in line and i > first]
        if not hits:
            raise ValueError(f"stop={stop!r} does not occur after start in the source of {fn.__qualname__}")
        last = hits[0]
    return textwrap.dedent("\n".join(lines[first:last]))


def source_once_solved(exercise: str, *objs, start: str | None = None, stop: str | None = None,
                       exercises_dir=None) -> str:
    """:func:`source` of the library's version of what ``exercise`` builds (one or more functions or
    kernels, a blank line between them), once the learner's file passes that exercise's public
    checks; before that, one line saying where it will appear.

    A notebook prints the library's code right below an exercise's check; with this, running the
    whole notebook does not put the answer beside the stub. The public checks are re-run here
    (a few seconds at most), so the code appears as soon as the learner's own work passes, however
    the learner got there. exercises_dir: as for :func:`flashlab.grading.check`. An entry of
    ``objs`` may be a tuple ``(obj, start, stop)`` to give that object its own markers.
    """
    from flashlab.grading.checks import grade

    if not objs:
        raise ValueError(f"source_once_solved({exercise!r}): give the function(s) or kernel(s) to show after exercise")
    graded = grade([exercise], exercises_dir, public_only=True)
    statuses = [r["status"] for _, parts in graded for r in parts.values()]
    if statuses and all(s == "public passed" for s in statuses):
        return "\n\n".join(source(*obj) if isinstance(obj, tuple) else source(obj, start, stop) for obj in objs)
    return wrap_prose(f"(The library's version appears here once your {exercise}.py passes its public checks: "
                      f"run the check above until it does, then this cell again.)")
