"""Grading: run one part's cases against its reference, and ``check()``, the notebook entry point.

A part is graded case by case: the fixed public cases first, then (if they all pass) the hidden
cases drawn from a fresh seed. Grading of a part stops at its first failing case, which is
described in full (inputs, what went wrong, max error and where, what the case probes); the cases
after it are counted as "not yet run", never as passed. A part earns its points only when every
case ran and passed. Stubs (``NotImplementedError``) score 0 as "not attempted yet".
"""
from __future__ import annotations

import copy
import numbers
import os
import secrets
from pathlib import Path

import numpy as np

from flashlab.grading.registry import DEFAULT_TOLERANCE, Case, Exercise, Part, answer_hash, get_exercise

PUBLIC_SEED = 20240601  # public cases are the same on every run


def _describe(value) -> str:
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return f"{type(value).__name__}{tuple(value.shape)} {str(value.dtype).replace('torch.', '')}"
    return repr(value)


def _inputs(part: Part, case: Case) -> dict:
    described = {k: _describe(v) for k, v in case.kwargs.items()}
    if part.tensors:  # the learner was given torch tensors made from these arrays
        described = {k: v.replace("ndarray", "Tensor") for k, v in described.items()}
    return described


def _base_result(exercise: Exercise, part: Part, seed: int) -> dict:
    return dict(exercise=exercise.name, function=part.function, title=part.title, kind=part.kind, points=part.points,
                earned=0, status="failed", public=[0, 0], hidden=[0, 0], hidden_run=False, seed=seed,
                failure=None, notes=[], hints=list(part.hints))


def failed_result(exercise: Exercise, part: Part, kind: str, message: str, case: str = "", seed: int = 0,
                  **extra) -> dict:
    """A result for a part that could not be graded normally (timeout, crash, import error)."""
    result = _base_result(exercise, part, seed)
    result["failure"] = dict(kind=kind, message=message, case=case, group="", why="", inputs={}, **extra)
    return result


# ----------------------------------------------------------------------------- comparing outputs
def _to_numpy(value):
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        t = value.detach().cpu()
        return t.float().numpy() if str(t.dtype) == "torch.bfloat16" else t.numpy()
    return value


def _tolerance(part: Part, dtype: str, on_cuda: bool) -> tuple[float, float]:
    if on_cuda and dtype in part.gpu_tolerance:
        return part.gpu_tolerance[dtype]
    return part.tolerance.get(dtype, DEFAULT_TOLERANCE.get(dtype, DEFAULT_TOLERANCE["float32"]))


def _compare_array(part: Part, name: str, got, ref: np.ndarray, on_cuda: bool) -> dict | None:
    got = _to_numpy(got)
    if not isinstance(got, np.ndarray):
        return dict(kind="type", message=f"{name}: expected an array of shape {ref.shape}, got {_describe(got)}")
    if got.shape != ref.shape:
        return dict(kind="shape", message=f"{name}: shape {got.shape}, expected {ref.shape}")
    if got.dtype != ref.dtype:
        return dict(kind="dtype", message=f"{name}: dtype {got.dtype}, expected {ref.dtype} (the input dtype)")
    atol, rtol = _tolerance(part, str(ref.dtype), on_cuda)
    g, r = got.astype(np.float64), ref.astype(np.float64)
    nan = np.isnan(g) & ~np.isnan(r)
    if nan.any():
        index = tuple(int(i) for i in np.argwhere(nan)[0])
        return dict(kind="nan", index=index, message=f"{name}: NaN at index {index} ({int(nan.sum())} of "
                    f"{nan.size} elements), expected {r[index]:.6g} there")
    with np.errstate(invalid="ignore"):
        err = np.where((g == r) | (np.isnan(g) & np.isnan(r)), 0.0, np.abs(g - r))
    err = np.nan_to_num(err, nan=np.inf)
    excess = err - (atol + rtol * np.abs(np.nan_to_num(r)))
    if (excess > 0).any():
        index = tuple(int(i) for i in np.unravel_index(int(np.argmax(excess)), excess.shape))
        return dict(kind="value", index=index, max_error=float(err.max()), message=(
            f"{name}: max abs error {err.max():.3g} (allowed {atol:g} + {rtol:g}*|expected|, dtype {ref.dtype}); "
            f"worst at index {index}: got {g[index]:.6g}, expected {r[index]:.6g}; "
            f"{int((excess > 0).sum())} of {excess.size} elements out of tolerance"))
    return None


def compare(part: Part, got, expected, on_cuda: bool = False) -> dict | None:
    """None when ``got`` matches ``expected`` for this part, else a failure dict."""
    if part.kind == "exact":
        ok = isinstance(got, (numbers.Integral, np.integer, bool, np.bool_)) and got == expected
        if isinstance(got, (float, np.floating)) and float(got).is_integer():
            ok = int(got) == expected
        return None if ok else dict(kind="value", message=f"returned {got!r}, expected {expected!r}")
    if part.kind == "choice":
        ok = answer_hash(part.function, got) == expected
        return None if ok else dict(kind="value", message=f"answer {got!r} is not the right choice")
    if part.kind == "number":
        try:
            value = float(got)
        except (TypeError, ValueError):
            return dict(kind="type", message=f"expected a number, got {got!r}")
        ok = abs(value - expected) <= 0.01 * abs(expected)
        return None if ok else dict(kind="value", message=f"{value:.4g} is not within 1% of the answer")
    if len(part.outputs) > 1:
        if not isinstance(got, (tuple, list)) or len(got) != len(part.outputs):
            return dict(kind="type", message=f"expected a tuple ({', '.join(part.outputs)}), got {_describe(got)}")
        for name, g, r in zip(part.outputs, got, expected):
            failure = _compare_array(part, name, g, r, on_cuda)
            if failure:
                return failure
        return None
    return _compare_array(part, part.outputs[0], got, expected, on_cuda)


# ----------------------------------------------------------------------------- one case, one part
def _as_tensors(kwargs: dict, device: str) -> dict:
    import torch

    return {k: torch.from_numpy(v.copy()).to(device) if isinstance(v, np.ndarray) else v
            for k, v in kwargs.items()}


def run_case(part: Part, func, case: Case, device: str | None, counters: dict) -> tuple[dict | None, list, dict]:
    """Run one case; (failure or None, notes, the guarded call's record)."""
    from flashlab.grading.sandbox import guarded_call

    expected = part.reference(**copy.deepcopy(case.reference_kwargs or case.kwargs))
    kwargs = copy.deepcopy(case.kwargs)
    if part.tensors:
        kwargs = _as_tensors(kwargs, device or "cpu")
    for counter in counters.values():
        counter.launches = 0
    call = guarded_call(func, kwargs, measure_peak=case.max_peak_bytes is not None)
    notes = []
    if call["output_chars"] > len(call["output"]):
        notes.append(f"printed {call['output_chars']:,} characters during {case.label!r}; "
                     f"only the first {len(call['output']):,} were kept")
    if call["not_implemented"] is not None:
        return dict(kind="not_implemented", message=call["not_implemented"]), notes, call
    if call["forbidden_calls"]:  # reported even when the call then raised
        return dict(kind="forbidden", message=(
            f"called {', '.join(call['forbidden_calls'])} instead of implementing {part.function}: "
            "not rewarded; write the computation yourself")), notes, call
    if call["exception"]:
        return dict(kind="exception", message=f"raised {call['exception']}", traceback=call["traceback"]), notes, call
    if call["mutated"]:
        return dict(kind="mutation", message=(
            f"changed its input(s) {', '.join(call['mutated'])} in place; work on copies (x = x.copy()) "
            "or new arrays")), notes, call
    for name, counter in counters.items():
        if counter.launches == 0:
            return dict(kind="launch", message=f"never launched the Triton kernel {name}: the result must "
                        f"come from {name}[grid](...)"), notes, call
    try:
        failure = compare(part, call["value"], expected, on_cuda=device == "cuda")
    except Exception as exc:  # e.g. an object array, or a value whose == raises
        failure = dict(kind="type", message=f"could not compare the returned {_describe(call['value'])} with "
                       f"the expected {_describe(expected)}: {type(exc).__name__}: {exc}")
    if failure is None and case.max_peak_bytes is not None and call["peak_bytes"] > case.max_peak_bytes:
        q = case.kwargs["q"]
        full = q.shape[-2] * case.kwargs["k"].shape[-2] * q.dtype.itemsize
        failure = dict(kind="memory", message=(
            f"allocated {call['peak_bytes'] / 2**20:.1f} MiB at peak; one Nq x Nk array of this case is "
            f"{full / 2**20:.1f} MiB. A tiled implementation must never build an Nq x Nk array: keep "
            f"only (block_q x block_k) tiles (limit {case.max_peak_bytes / 2**20:.1f} MiB)"))
    return failure, notes, call


def grade_part(exercise: Exercise, part: Part, module, functions: dict | None, seed: int,
               public_only: bool, device: str | None, phase, time_limit_s: float | None = None) -> dict:
    """Grade one part in this process (called inside the grading child)."""
    result = _base_result(exercise, part, seed)
    index = exercise.parts.index(part)
    source = functions if functions is not None else vars(module)
    if part.function not in source:
        result["failure"] = dict(kind="missing", case="", group="", why="", inputs={}, message=(
            f"{exercise.name} has no {part.function!r}; keep the name and signature of the exercise stub"))
        return result
    target = source[part.function]
    if part.kind in ("choice", "number"):
        if target is None:
            result["status"] = "not attempted"
            result["public"] = [0, 1]
            return result
        value = target
        target = lambda: value  # noqa: E731  a quiz answer is graded like a function of no arguments
    elif not callable(target):
        result["failure"] = dict(kind="missing", case="", group="", why="", inputs={},
                                 message=f"{part.function} is {_describe(target)}, not a function")
        return result
    counters = {}
    if part.must_launch:
        from flashlab.grading.sandbox import LaunchCounter

        # the kernels the function launches live in its module's globals (a notebook's, for fn=)
        namespace = vars(module) if module is not None else getattr(target, "__globals__", {})
        for name in part.must_launch:
            kernel = namespace.get(name)
            if kernel is None:
                result["failure"] = dict(kind="launch", case="", group="", why="", inputs={}, message=(
                    f"no Triton kernel {name} next to {part.function}: the result must come from "
                    f"{name}[grid](...); keep the kernel of the exercise stub"))
                return result
            counters[name] = kernel if isinstance(kernel, LaunchCounter) else LaunchCounter(kernel)
            namespace[name] = counters[name]
    phase("preparing cases", 120.0, None)
    public = part.public(np.random.default_rng([PUBLIC_SEED, index]))
    hidden = [] if public_only else part.hidden(np.random.default_rng([seed, index]))
    result["public"], result["hidden"] = [0, len(public)], [0, len(hidden)]
    for group, cases in (("public", public), ("hidden", hidden)):
        result["hidden_run"] = result["hidden_run"] or (group == "hidden" and bool(cases))
        for case in cases:
            where = dict(case=case.label, group=group, why=case.why, inputs=_inputs(part, case))
            # the parent keeps this snapshot: a timeout or crash in this case is reported with it
            phase(f"{group} case {case.label}", min(part.time_limit_s, time_limit_s or part.time_limit_s),
                  dict(copy.deepcopy(result), failure=where))
            failure, notes, call = run_case(part, target, case, device, counters)
            result["notes"] += notes
            if failure is None:
                result[group][0] += 1
                continue
            if failure["kind"] == "not_implemented" and result["public"][0] == 0:
                result["status"] = "not attempted"
                return result
            result["failure"] = dict(failure, output=call["output"][:500], **where)
            return result
    complete = not public_only or part.kind in ("choice", "number")  # quizzes have no hidden cases
    result["status"] = "passed" if complete else "public passed"
    result["earned"] = part.points if complete else 0
    return result


# ----------------------------------------------------------------------------- check()
def _repo_root() -> Path | None:
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "exercises").is_dir() and (parent / "solutions").is_dir():
            return parent
    return None


def find_exercises_dir(exercises_dir=None, solutions: bool = False) -> Path:
    """Where the learner's modules are.

    Order: ``exercises_dir``; ``solutions=True`` -> the repository's ``solutions/``; the
    environment variable FLASHLAB_EXERCISES_DIR; walking up from the current directory, the
    first folder holding ``work/exercises/`` (the learner's work area, :mod:`flashlab.workarea`)
    or ``exercises/``, the work area first; then the work area or else the ``exercises/`` of the
    repository flashlab is installed from (editable install).
    """
    if exercises_dir is not None:
        path = Path(exercises_dir).expanduser()
        if not path.is_dir():
            raise ValueError(f"exercises_dir={str(exercises_dir)!r} is not a directory; expected the folder "
                             "holding ex01_naive.py, ex02_softmax.py, ...")
        return path.resolve()
    names = ["solutions"] if solutions else ["exercises"]
    env = os.environ.get("FLASHLAB_EXERCISES_DIR")
    if not solutions and env:
        if not Path(env).expanduser().is_dir():
            raise ValueError(f"FLASHLAB_EXERCISES_DIR={env!r} is not a directory; expected the folder holding "
                             "ex01_naive.py, ex02_softmax.py, ...")
        return Path(env).expanduser().resolve()
    from flashlab.workarea import exercises_dir as work_exercises  # <repo>/work/exercises, or None

    for parent in [Path.cwd(), *Path.cwd().parents]:
        if not solutions and (parent / "notebooks").is_dir() and work_exercises(parent):
            return work_exercises(parent).resolve()
        for name in names:
            if (parent / name / "ex01_naive.py").is_file():
                return (parent / name).resolve()
    root = _repo_root()
    if root is not None:
        return ((not solutions and work_exercises(root)) or root / names[0]).resolve()
    raise ValueError(f"no {names[0]}/ folder found above {Path.cwd()}; pass exercises_dir=... or set "
                     "FLASHLAB_EXERCISES_DIR")


def _functions_for(exercise: Exercise, fn) -> dict:
    if isinstance(fn, dict):
        unknown = sorted(set(fn) - {p.function for p in exercise.parts})
        if unknown:
            raise ValueError(f"fn has keys {unknown} that are not parts of {exercise.name}; expected some of "
                             f"{[p.function for p in exercise.parts]}")
        return dict(fn)
    if not callable(fn):
        raise TypeError(f"fn={fn!r} must be a function, a dict name -> function, or None")
    for part in exercise.parts:
        if getattr(fn, "__name__", None) == part.function:
            return {part.function: fn}
    if len(exercise.parts) == 1:
        return {exercise.parts[0].function: fn}
    raise ValueError(f"fn is named {getattr(fn, '__name__', '?')!r}, which is not one of "
                     f"{[p.function for p in exercise.parts]}; pass fn={{'name': function}}")


def grade(names, exercises_dir=None, solutions=False, seed=None, public_only=False, fn=None,
          time_limit_s: float | None = None, jobs: int = 1) -> list:
    """Grade exercises; a list of (Exercise, {part: result}) in the order given.

    time_limit_s: lowers every case's time limit (the registry's limits are 10-60 s per case).
    jobs: how many exercises are graded at the same time (each in its own process).
    """
    from flashlab.grading.sandbox import run_exercise

    from concurrent.futures import ThreadPoolExecutor

    seed = secrets.randbelow(2**31) if seed is None else int(seed)
    exercises = [get_exercise(name) for name in names]
    if fn is not None:
        if len(exercises) != 1:
            raise ValueError(f"fn= grades one exercise; got names={list(names)}")
        exercise = exercises[0]
        functions = _functions_for(exercise, fn)
        sub = Exercise(exercise.name, exercise.title,
                       tuple(p for p in exercise.parts if p.function in functions), exercise.needs_triton)
        return [(sub, run_exercise(sub, None, seed, public_only, functions, time_limit_s))]
    folder = find_exercises_dir(exercises_dir, solutions)

    def one(exercise: Exercise) -> tuple:
        path = folder / f"{exercise.name}.py"
        if not path.is_file():
            return exercise, {p.function: failed_result(exercise, p, "missing", f"no file {path}", seed=seed)
                              for p in exercise.parts}
        return exercise, run_exercise(exercise, str(path), seed, public_only, time_limit_s=time_limit_s)

    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs={jobs!r} must be an int >= 1 (exercises graded at the same time)")
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # each exercise runs in its own child process
        return list(pool.map(one, exercises))


def check(name: str, fn=None, *, exercises_dir=None, solutions: bool = False, hint: int = 1, seed=None,
          public_only: bool = False, time_limit_s: float | None = None):
    """Grade one exercise and return a report (HTML in Jupyter, text with ``print``).

    name: the exercise id, e.g. "ex03_tiled_forward". fn: a function to grade instead of the file
    (matched to a part by its name), or a dict {part name: function}. exercises_dir: the folder of
    the learner's modules (default: FLASHLAB_EXERCISES_DIR, else exercises/ above the current
    directory). hint: how many hint levels to show for a failing part (``report.next_hint()`` shows
    one more). seed: the hidden cases' seed (default: fresh each run). public_only: skip hidden cases.
    time_limit_s: a lower time limit per case than the exercise's own.
    """
    from flashlab.grading.report import Report

    if not isinstance(hint, int) or hint < 0:
        raise ValueError(f"hint={hint!r} must be an int >= 0 (hint levels to show)")
    return Report(grade([name], exercises_dir, solutions, seed, public_only, fn, time_limit_s), hint=hint)
