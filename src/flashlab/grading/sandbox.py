"""Running learner code so that nothing it does can hang or break the grader.

Each exercise is graded in a child process: a fresh interpreter (``python -m
flashlab.grading.sandbox``, talking over two pipes) when grading files, a ``multiprocessing`` fork
when grading function objects from a notebook (they cannot be re-imported). The child loads the
learner's module, then runs the parts one by one and reports every case over a pipe. The parent
waits with a time limit per case: a case that does not finish is reported as a timeout, the child
is killed, and a fresh child carries on with the next part. A child that dies (a segfault, an
``os._exit``) is reported the same way.

Inside the child, every learner call (:func:`guarded_call`)
- captures printing into a bounded buffer (floods are truncated, never stored whole),
- snapshots the array arguments and reports any that the call changed in place,
- records calls of flashlab's own attention/softmax/tiled/traffic functions, its Triton kernels and
  ``torch.nn.functional.scaled_dot_product_attention`` (wrappers installed before the learner's
  module is imported, so ``from flashlab.reference import naive_attention`` is recorded too; torch
  and the kernel modules are wrapped when first imported),
- optionally measures the peak of NumPy/Python allocations with :mod:`tracemalloc`.
Grading never writes to the learner's directory (``sys.dont_write_bytecode`` in the child).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import io
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import redirect_stderr, redirect_stdout
from multiprocessing.connection import Connection
from pathlib import Path

LOAD_LIMIT_S = 180.0  # importing torch + triton on a busy 2-core laptop can take a while
PREPARE_LIMIT_S = 120.0  # building cases and references
OUTPUT_LIMIT = 2000  # characters of captured printing kept per call

# Library functions a learner must not call instead of implementing (module -> names).
FORBIDDEN = {
    "flashlab.reference": ("naive_attention", "naive_attention_backward"),
    "flashlab.softmax": ("safe_softmax", "logsumexp", "softmax_state", "combine_states", "online_softmax",
                         "online_update"),
    "flashlab.tiled": ("tiled_attention", "tiled_attention_fa1", "tiled_attention_backward",
                       "causal_tile_skipped", "kv_blocks_visited", "first_q_block"),
    "flashlab.traffic": ("naive_traffic", "naive_backward_traffic", "fa2_forward_traffic", "fa1_forward_traffic",
                         "backward_traffic", "flash_hbm_accesses", "standard_hbm_accesses"),
}
# The course's kernels: every forward rung (the ladder's entries call these at run time), the
# Hopper kernel, the backward, and the primer.
FORBIDDEN_TRITON = {
    "flashlab.kernels.primer": ("vector_add", "row_softmax", "softmax", "add", "matmul"),
    "flashlab.kernels.attention": ("flash_attention", "attention_reference", "best_forward"),
    "flashlab.kernels.flash_fwd": ("forward_v0", "forward_v1", "forward_v2", "forward_v3"),
    "flashlab.kernels.flash_fwd_hopper": ("forward", "launch"),
    "flashlab.kernels.flash_bwd": ("backward",),
}


class BoundedText(io.TextIOBase):
    """A text sink that keeps the first ``limit`` characters and counts the rest."""

    def __init__(self, limit: int = OUTPUT_LIMIT):
        self.limit, self.parts, self.kept, self.total = limit, [], 0, 0

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        text = str(text)
        self.total += len(text)
        if self.kept < self.limit:
            piece = text[: self.limit - self.kept]
            self.parts.append(piece)
            self.kept += len(piece)
        return len(text)

    def text(self) -> str:
        return "".join(self.parts)


class Recorder:
    """Records calls of wrapped library functions while ``active``."""

    def __init__(self):
        self.active, self.calls, self.depth = False, [], 0
        self.wrappers = {}  # id(original function) -> its recording wrapper

    def wrap(self, qualname: str, func):
        recorder = self

        def recorded(*args, **kwargs):
            if recorder.active and recorder.depth == 0 and qualname not in recorder.calls:
                recorder.calls.append(qualname)
            recorder.depth += 1  # calls the library makes inside this one are not the learner's
            try:
                return func(*args, **kwargs)
            finally:
                recorder.depth -= 1

        recorded.__name__ = getattr(func, "__name__", qualname)
        recorded.__doc__ = getattr(func, "__doc__", None)
        recorded.__wrapped__ = func
        recorded.flashlab_recorded = True  # not __wrapped__: functools.wraps sets that on library functions too
        self.wrappers[id(func)] = recorded
        return recorded


RECORDER = Recorder()


def _wrap_module(module, names, prefix=None) -> None:
    prefix = prefix or module.__name__
    for name in names:
        func = getattr(module, name, None)
        if callable(func) and not getattr(func, "flashlab_recorded", False):
            setattr(module, name, RECORDER.wrap(f"{prefix}.{name}", func))


TORCH_FORBIDDEN = {"torch.nn.functional": ("scaled_dot_product_attention",)}


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Wraps the forbidden functions of a module as soon as it is imported (module -> names).

    Used for torch and the Triton kernels, which are slow to import: the learner's module imports
    them if it uses them, and only then are they wrapped.
    """

    def __init__(self, table: dict):
        self.table = table

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.table:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                exec_module = spec.loader.exec_module

                def exec_and_wrap(module, _exec=exec_module, _names=self.table[fullname]):
                    _exec(module)
                    _wrap_module(module, _names)

                spec.loader.exec_module = exec_and_wrap
                return spec
        return None


def install_recorders(triton: bool) -> None:
    """Wrap every forbidden function before the learner's module is imported."""
    import flashlab

    for module_name, names in FORBIDDEN.items():  # NumPy modules: cheap, imported now
        try:
            module = importlib.import_module(module_name)
        except Exception:  # a module not written yet: nothing to forbid there
            continue
        _wrap_module(module, names)
        for name in names:  # the lazy exports of flashlab/__init__.py
            if name in getattr(flashlab, "_EXPORTS", {}):
                setattr(flashlab, name, getattr(module, name))
    later = dict(TORCH_FORBIDDEN, **(FORBIDDEN_TRITON if triton else {}))
    for module_name in [name for name in later if name in sys.modules]:
        _wrap_module(sys.modules[module_name], later.pop(module_name))
    if later:
        sys.meta_path.insert(0, _WrapOnImport(later))


def rebind_globals(functions: dict) -> None:
    """Point the names a notebook bound to forbidden functions before grading at their wrappers.

    ``from flashlab.tiled import tiled_attention`` in a notebook cell binds the original function
    in the notebook's globals, which the grading fork inherits; the wrappers installed in the fork
    would not see those calls.
    """
    for func in functions.values():
        namespace = getattr(func, "__globals__", None)
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            wrapper = RECORDER.wrappers.get(id(value)) if callable(value) else None
            if wrapper is not None and wrapper.__wrapped__ is value:
                namespace[name] = wrapper


class LaunchCounter:
    """Stands in for a module-level @triton.jit kernel and counts ``kernel[grid](...)`` launches."""

    def __init__(self, kernel):
        self._kernel, self.launches = kernel, 0

    def __getitem__(self, grid):
        launcher = self._kernel[grid]

        def launch(*args, **kwargs):
            self.launches += 1
            return launcher(*args, **kwargs)

        return launch

    def __getattr__(self, name):
        return getattr(self._kernel, name)


def _snapshot(value):
    import numpy as np

    if isinstance(value, np.ndarray):
        return value.copy()
    if type(value).__name__ == "Tensor" and type(value).__module__.startswith("torch"):
        return value.detach().clone()
    return None


def _changed(before, after) -> bool:
    import numpy as np

    if before is None:
        return False
    if isinstance(before, np.ndarray):
        return after.shape != before.shape or not np.array_equal(after, before, equal_nan=True)
    import torch

    return not torch.equal(torch.nan_to_num(before, nan=0.0), torch.nan_to_num(after.detach(), nan=0.0))


def guarded_call(func, kwargs: dict, measure_peak: bool = False) -> dict:
    """Call ``func(**kwargs)``; return what happened (value, exception, printing, mutation, calls)."""
    import tracemalloc

    snapshots = {name: _snapshot(value) for name, value in kwargs.items()}
    out = BoundedText()
    RECORDER.calls, RECORDER.active = [], True
    result = dict(value=None, exception=None, not_implemented=None, peak_bytes=None)
    if measure_peak:
        tracemalloc.start()
    start = time.perf_counter()
    try:
        with redirect_stdout(out), redirect_stderr(out):
            result["value"] = func(**kwargs)
    except NotImplementedError as exc:
        result["not_implemented"] = str(exc) or "NotImplementedError"
    except BaseException as exc:  # SystemExit and KeyboardInterrupt from learner code too
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
        result["exception"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = "".join(lines[-6:])[-1500:]
    finally:
        RECORDER.active = False
        result["seconds"] = time.perf_counter() - start
        if measure_peak:
            result["peak_bytes"] = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
    result["mutated"] = [name for name, before in snapshots.items() if _changed(before, kwargs[name])]
    result["forbidden_calls"] = list(RECORDER.calls)
    result["output"], result["output_chars"] = out.text(), out.total
    return result


def load_module(path: str, name: str):
    """Import the learner's file under a private name, without writing __pycache__."""
    sys.dont_write_bytecode = True
    folder = str(Path(path).parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)
    spec = importlib.util.spec_from_file_location(f"flashlab_learner_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def prepare_triton() -> str:
    """Switch on Triton's interpreter where there is no GPU; return the tensor device."""
    import torch

    if torch.cuda.is_available():
        return "cuda"
    os.environ.setdefault("TRITON_INTERPRET", "1")
    from flashlab.kernels import _mode

    _mode.triton()  # the interpreter, repaired where triton 3.6 meets numpy >= 2.4 (see _mode)
    return "cpu"


def child_main(conn, job: dict) -> None:
    """Entry point of the grading child: load, then grade each part in ``job['parts']``."""
    from flashlab.grading import checks
    from flashlab.grading.registry import get_exercise

    exercise = get_exercise(job["exercise"])
    sys.dont_write_bytecode = True
    conn.send(("phase", None, "loading the module", LOAD_LIMIT_S, None))
    try:
        device = prepare_triton() if exercise.needs_triton else None
        install_recorders(exercise.needs_triton)
        out = BoundedText()
        with redirect_stdout(out), redirect_stderr(out):
            if job.get("functions") is not None:
                module, functions = None, job["functions"]
                rebind_globals(functions)
            else:
                module = load_module(job["path"], exercise.name)
                functions = None
    except BaseException as exc:
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-4:])[-1500:]
        conn.send(("load_error", f"{type(exc).__name__}: {exc}", tb))
        conn.close()
        return
    for name in job["parts"]:
        part = next(p for p in exercise.parts if p.function == name)
        def phase(label, limit, snapshot, _name=name):
            conn.send(("phase", _name, label, limit, snapshot))

        try:
            result = checks.grade_part(exercise, part, module, functions, job["seed"], job["public_only"],
                                       device, phase, job.get("time_limit_s"))
        except Exception as exc:  # a bug in the grader or the library, not in the learner's code
            tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-4:])[-1500:]
            result = checks.failed_result(exercise, part, "grader", "internal grader error (not a problem "
                                          f"with your code): {type(exc).__name__}: {exc}", seed=job["seed"],
                                          traceback=tb)
        conn.send(("part", name, result))
    conn.send(("done",))
    conn.close()


class _Child:
    """One grading child: a fresh interpreter (files) or a fork (function objects)."""

    def __init__(self, job: dict):
        self.stderr = None
        if job.get("functions") is not None:
            # Function objects from a notebook cannot be re-imported by a new interpreter: fork.
            ctx = multiprocessing.get_context("fork")
            self.receive, send = ctx.Pipe(duplex=False)
            self.proc = ctx.Process(target=child_main, args=(send, job), daemon=True)
            self.proc.start()
            send.close()
            return
        # A new interpreter (python -m), not multiprocessing 'spawn': spawn re-runs the caller's
        # __main__ script, which breaks grading from a script without an `if __name__` guard.
        job_read, job_write = os.pipe()
        msg_read, msg_write = os.pipe()
        env = dict(os.environ)
        src = str(Path(__file__).resolve().parents[2])  # the folder holding the flashlab package
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        self.stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-m", "flashlab.grading.sandbox", str(job_read),
                                      str(msg_write)], pass_fds=(job_read, msg_write), env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.stderr)
        os.close(job_read)
        os.close(msg_write)
        with Connection(job_write, readable=False) as conn:
            conn.send(job)
        self.receive = Connection(msg_read, writable=False)

    def exitcode(self):
        return self.proc.exitcode if hasattr(self.proc, "exitcode") else self.proc.poll()

    def stderr_tail(self) -> str:
        if self.stderr is None:
            return ""
        self.stderr.seek(0, os.SEEK_END)
        self.stderr.seek(max(0, self.stderr.tell() - 800))
        return self.stderr.read().decode(errors="replace").strip()

    def stop(self) -> None:
        if self.exitcode() is None:
            self.proc.kill()
        if hasattr(self.proc, "join"):
            self.proc.join(10.0)
        else:
            self.proc.wait(10.0)
        self.receive.close()
        if self.stderr is not None:
            self.stderr.close()


def run_exercise(exercise, path: str | None, seed: int, public_only: bool = False,
                 functions: dict | None = None, time_limit_s: float | None = None) -> dict[str, dict]:
    """Grade every part of ``exercise`` in child processes; part name -> result dict."""
    from flashlab.grading.checks import failed_result

    remaining = [p.function for p in exercise.parts]
    results: dict[str, dict] = {}
    while remaining:
        job = dict(exercise=exercise.name, parts=list(remaining), path=path, seed=seed,
                   public_only=public_only, functions=functions, time_limit_s=time_limit_s)
        child = _Child(job)
        current, label, limit, snapshot = None, "starting", LOAD_LIMIT_S, None
        while True:
            message = None
            if child.receive.poll(limit * 1.1 + 1.0):
                try:
                    message = child.receive.recv()
                except (EOFError, OSError):
                    for _ in range(50):  # let the exit code arrive
                        if child.exitcode() is not None:
                            break
                        time.sleep(0.1)
                    tail = child.stderr_tail()
                    why = (f"the grading process died (exit code {child.exitcode()}) during {label!r}: "
                           "a crash in native code, or os._exit / sys.exit"
                           + (f"; its last error output:\n{tail}" if tail else ""))
                    kind = "crash"
            else:
                why, kind = f"did not return within {limit:.0f} s; stopped (the time limit per check)", "timeout"
            if message is None:
                targets = [current] if current else list(remaining)
                for name in targets:
                    part = next(p for p in exercise.parts if p.function == name)
                    if name == current and snapshot is not None:  # counts so far, and the case
                        results[name] = dict(snapshot, failure=dict(snapshot["failure"], kind=kind, message=why))
                    else:
                        results[name] = failed_result(exercise, part, kind, why, case=label, seed=seed)
                    remaining.remove(name)
                break
            if message[0] == "phase":
                _, current, label, limit, snapshot = message
                current = current or None
            elif message[0] == "part":
                results[message[1]] = message[2]
                remaining.remove(message[1])
                current, label, limit, snapshot = None, "between parts", PREPARE_LIMIT_S, None
            elif message[0] == "load_error":
                for name in list(remaining):
                    part = next(p for p in exercise.parts if p.function == name)
                    results[name] = failed_result(exercise, part, "load", f"importing the module failed: "
                                                  f"{message[1]}", case="import", seed=seed,
                                                  traceback=message[2])
                    remaining.remove(name)
                break
            elif message[0] == "done":
                break
        child.stop()
    return {p.function: results[p.function] for p in exercise.parts}


if __name__ == "__main__":  # the grading child: python -m flashlab.grading.sandbox JOB_FD MESSAGE_FD
    from flashlab.grading import sandbox as _sandbox  # the importable module, not this __main__ copy

    with Connection(int(sys.argv[1]), writable=False) as _job_conn:
        _job = _job_conn.recv()
    _sandbox.child_main(Connection(int(sys.argv[2]), readable=False), _job)
