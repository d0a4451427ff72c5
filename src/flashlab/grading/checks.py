"""Grading: run one part's cases in the learner's process, judge them here, and ``check()``.

Everything that decides a score lives in this process: the cases and their reference answers are
built here (from a fresh seed for the hidden ones), the learner's process gets only the inputs of
one case at a time and sends back plain data (:mod:`flashlab.grading.wire`), and the comparison,
the memory and CPU measurements (taken from outside the child) and the verdict are made here.
Points are all or nothing per part and never exceed the part's points; the report also says how
many checks pass ("8 of 10 checks pass"), since grading keeps going after a failing case. A
timeout, a crash, a forbidden call or a stub that still raises NotImplementedError stops the part.
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import os
import re
import secrets
import sys
from pathlib import Path

import numpy as np

from flashlab.release import require_compiled_python

require_compiled_python()  # a student release compiled by another Python: say so first
from flashlab.grading import contracts, wire
from flashlab.grading.cases import PUBLIC_WHY
from flashlab.grading.mistakes import MISTAKES
from flashlab.grading.registry import DEFAULT_TOLERANCE, Case, Exercise, Part, answer_hash, get_exercise

PUBLIC_SEED = 20240601  # public cases are the same on every run
STOP_KINDS = ("timeout", "crash", "memory_limit", "forbidden", "not_implemented", "protocol")
# failures of a rule that every call must keep (how the kernel is launched, inputs left unchanged, no
# forbidden call, autograd's graph): the case that met it first says nothing about why, so the report
# names the rule instead of the case's purpose and its hint
RULE_KINDS = ("launch", "mutation", "forbidden", "gradients")
RULE_WHY = "a rule every call must keep (not what this case's inputs test)"


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
                earned=0, status="failed", public=[0, 0], hidden=[0, 0], checks=[0, 0], not_run=0, hidden_run=False,
                seed=seed, failure=None, failures=[], notes=[], hints=list(part.hints))


def failed_result(exercise: Exercise, part: Part, kind: str, message: str, case: str = "", seed: int = 0,
                  **extra) -> dict:
    """A result for a part that could not be graded normally (timeout, crash, import error)."""
    result = _base_result(exercise, part, seed)
    result["failure"] = dict(kind=kind, message=message, case=case, group="", why="", inputs={}, **extra)
    return result


# ----------------------------------------------------------------------------- comparing outputs
def _tolerance(part: Part, dtype: str, on_cuda: bool) -> tuple[float, float]:
    if on_cuda and dtype in part.gpu_tolerance:
        return part.gpu_tolerance[dtype]
    return part.tolerance.get(dtype, DEFAULT_TOLERANCE.get(dtype, DEFAULT_TOLERANCE["float32"]))


def _compare_array(part: Part, name: str, got, ref: np.ndarray, on_cuda: bool) -> dict | None:
    if type(got) is not np.ndarray:
        return dict(kind="type", message=f"{name}: expected an array of shape {ref.shape}, got {_describe(got)}")
    if got.shape != ref.shape:
        return dict(kind="shape", message=f"{name}: shape {got.shape}, expected {ref.shape}")
    if got.dtype != ref.dtype:
        return dict(kind="dtype", message=f"{name}: dtype {got.dtype}, expected {ref.dtype} (the input dtype)")
    atol, rtol = _tolerance(part, str(ref.dtype), on_cuda)
    g, r = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    nan = np.isnan(g) & ~np.isnan(r)
    with np.errstate(invalid="ignore"):
        err = np.where((g == r) | (np.isnan(g) & np.isnan(r)), 0.0, np.abs(g - r))
    err = np.nan_to_num(err, nan=np.inf)
    excess = err - (atol + rtol * np.abs(np.nan_to_num(r)))
    if nan.any():
        index = tuple(int(i) for i in np.argwhere(nan)[0])
        return dict(kind="nan", index=index, message=f"{name}: NaN at index {index} ({int(nan.sum())} of "
                    f"{nan.size} elements), expected {r[index]:.6g} there" + _batch_confined(part, excess > 0) + (
                        _unwritten_rows(part, nan, got) or (
                        "; the grader surrounds every input of a kernel with NaN, so on a GPU a load past either end "
                        "of an input (a missing mask, a wrong stride or offset) reads NaN (the CPU interpreter stops "
                        "it with OutOfBounds); so does 0/0, inf / inf after an exp() overflows, or exp(-inf - (-inf))"
                        if part.must_launch else "")))
    if (excess > 0).any():
        index = tuple(int(i) for i in np.unravel_index(int(np.argmax(excess)), excess.shape))
        return dict(kind="value", index=index, max_error=float(err.max()), message=(
            f"{name}: max abs error {err.max():.3g} (allowed {atol:g} + {rtol:g}*|expected|, dtype {ref.dtype}); "
            f"worst at index {index}: got {g[index]:.6g}, expected {r[index]:.6g}; "
            f"{int((excess > 0).sum())} of {excess.size} elements out of tolerance" + _batch_confined(part, excess > 0)
            + _rounding_sized(ref.dtype, err, r)))
    return None


ROUNDING_SIZED = 1e-4  # in float64, an error below this times (1 + |expected|) everywhere is rounding, not a formula
ROUNDING_MARK = "; every error is below"  # how that note starts in a message


def _rounding_sized(dtype, err: np.ndarray, r: np.ndarray) -> str:
    """For a float64 output whose every error is tiny (float32 rounding is about 6e-8 relative per step, and
    a softmax compounds it): say so, since the numbers alone read as a wrong formula."""
    if dtype != np.float64 or not (err <= ROUNDING_SIZED * (1.0 + np.abs(np.nan_to_num(r)))).all():
        return ""
    return (f"{ROUNDING_MARK} {ROUNDING_SIZED:g} * (1 + |expected|): rounding-sized, not a wrong formula. Look "
            "for work done in float32 (an array, an accumulator or a constant made float32) or a constant written "
            "with few digits (log2(e) = 1.4426950408889634, not 1.4427): compute in the inputs' dtype, float64 here")


def _batch_confined(part: Part, bad: np.ndarray) -> str:
    """For a kernel's output (batch elements, rows, columns): when batch element 0 is right and every later
    one is wrong, the arithmetic is right and the batch offset is not (a public check with one batch
    element passes)."""
    if not part.must_launch or bad.ndim < 3:
        return ""
    per_element = bad.reshape(-1, bad.shape[-2] * bad.shape[-1]).any(axis=1)  # (batch elements,)
    if per_element.size < 2 or per_element[0] or not per_element[1:].all():
        return ""
    return ("; batch element 0 is right and every later one is wrong: check each pointer's batch offset (the "
            "batch index times that tensor's batch stride, for the inputs and the outputs alike)")


_LETTER = re.compile(r"^\(?\s*([a-z])\s*\)?(?:[\s.):,;-].*)?$", re.S)


def choice_letter(answer) -> str | None:
    """The letter of a multiple-choice answer: "b", "B", "b.", "(a) the matmul FLOPs" -> the letter."""
    if type(answer) is not str:
        return None
    match = _LETTER.match(answer.strip().lower())
    return match.group(1) if match else None


_QUIET_PAYLOAD = {np.dtype(np.float64): (np.uint64, (1 << 51) - 1), np.dtype(np.float32): (np.uint32, (1 << 22) - 1),
                  np.dtype(np.float16): (np.uint16, (1 << 9) - 1)}


def _poisoned(got: np.ndarray, where: np.ndarray) -> bool | None:
    """Whether the NaN at ``where`` carry a payload (the NaN the launch tracker fills an output buffer
    with: never stored) rather than none (a NaN computed by the kernel); None when it cannot tell."""
    kind = _QUIET_PAYLOAD.get(got.dtype) if isinstance(got, np.ndarray) else None
    if kind is None or not where.any():
        return None
    payload = np.ascontiguousarray(got).view(kind[0])[where] & kind[1]
    return bool((payload != 0).all()) if (payload != 0).all() or (payload == 0).all() else None


def _unwritten_rows(part: Part, nan: np.ndarray, got=None) -> str:
    """For a kernel's output: which rows came back NaN in full. The launch tracker fills a buffer that
    holds data from outside the kernel (torch.empty's) with a NaN carrying a payload before the launch,
    so whole NaN rows with that payload are rows the kernel never stored (too few programs in the grid,
    a wrong store mask); NaN without one were computed, most often from a load past the end of an input
    (the grader surrounds every input with NaN)."""
    if not part.must_launch or nan.ndim < 2:
        return ""
    rows = nan.all(axis=-1).reshape(-1, nan.shape[-2])  # (batch elements, rows)
    hit = [(b, np.flatnonzero(r)) for b, r in enumerate(rows) if r.any()]
    if not hit:
        return ""
    b, idx = hit[0]
    runs, start = [], idx[0]
    for prev, cur in zip(idx, list(idx[1:]) + [None]):
        if cur != prev + 1:
            runs.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = cur
    where = f"rows {', '.join(runs[:4])}{', ...' if len(runs) > 4 else ''}" + (f" of batch element {b}" if nan.ndim > 2
                                                                              else "")
    full_rows = np.broadcast_to(nan.all(axis=-1, keepdims=True), nan.shape) & nan
    if _poisoned(got, full_rows) is False:
        return (f"; {where} are NaN in full{f' (and rows of {len(hit) - 1} more batch elements)' if len(hit) > 1 else ''}"
                ", computed by your kernel (it stored them): a row of 0/0, of inf / inf after an exp() overflows, "
                "or of exp(-inf - (-inf)) where every entry so far is masked gives this, as does a load of rows a "
                "check fills with NaN (see 'this check'); on a GPU so does a load past the end of an input (a "
                "missing mask, a wrong stride or offset: the grader surrounds every input with NaN)")
    return (f"; {where} are NaN in full{f' (and rows of {len(hit) - 1} more batch elements)' if len(hit) > 1 else ''}"
            ": rows your kernel never stores keep the NaN the grader fills an output buffer with, so check "
            "that the grid covers every block of rows (and every batch element) and that the store mask keeps "
            "every real row; a row of 0/0, or of exp(-inf - (-inf)) where every entry so far is masked, is NaN "
            "too")


def compare(part: Part, got, expected, on_cuda: bool = False) -> dict | None:
    """None when ``got`` (plain data rebuilt in this process) matches ``expected``, else a failure dict."""
    if part.kind == "exact":
        ok = type(got) in (int, bool) and int(got) == expected
        if type(got) is float and got.is_integer():
            ok = int(got) == expected
        return None if ok else dict(kind="value", message=f"returned {got!r}, expected {expected!r}")
    if part.kind == "choice":
        letter = choice_letter(got)
        if letter is None:
            return dict(kind="type", message=f"answer {got!r}: answer with one letter, e.g. Q1 = \"b\"")
        ok = answer_hash(part.function, letter) == expected
        return None if ok else dict(kind="value", message=f"answer {letter!r} is not the right choice")
    if part.kind == "number":
        if type(got) not in (int, float) or (type(got) is int and abs(got) > 1e300):  # float(got) must not overflow
            return dict(kind="type", message=f"expected a number, got {str(got)[:60]}")
        ok = abs(float(got) - expected) <= 0.01 * abs(expected)
        return None if ok else dict(kind="value", message=f"{float(got):.4g} is not within 1% of the answer")
    if len(part.outputs) > 1:
        if type(got) is not tuple or len(got) != len(part.outputs):
            return dict(kind="type", message=f"expected a tuple ({', '.join(part.outputs)}), got {_describe(got)}")
        failures = [(name, _compare_array(part, name, g, r, on_cuda)) for name, g, r in zip(part.outputs, got, expected)]
        wrong = [(name, f) for name, f in failures if f]
        if not wrong:
            return None
        first = wrong[0][1]
        right = [name for name, f in failures if not f]
        verdict = (f"; {', '.join(right)} {'is' if len(right) == 1 else 'are'} right" if right else "") + (
            f"; {', '.join(n for n, _ in wrong[1:])} wrong too" if len(wrong) > 1 else "")
        return dict(first, message=first["message"] + verdict) if verdict else first
    return _compare_array(part, part.outputs[0], got, expected, on_cuda)


# ----------------------------------------------------------------------------- one exercise, one child
class Session:
    """The child process of one exercise, started on first use and again after a crash or timeout."""

    def __init__(self, exercise: Exercise, path: str | None, functions: dict | None, drop_uid):
        self.exercise, self.path, self.functions, self.drop_uid = exercise, path, functions, drop_uid
        self.source = Path(path).read_text(errors="replace") if path else None
        self.child, self.loaded = None, None

    def start(self) -> dict | None:
        """Start the child and load the module; a failure dict when loading failed."""
        from flashlab.grading import sandbox

        folder = str(Path(self.path).parent) if self.path else None
        job = dict(op="job", exercise=self.exercise.name, path=self.path, source=self.source, hidden=hidden_paths(),
                   triton=self.exercise.needs_triton, drop_uid=self.drop_uid, exercises_dir=folder,
                   torch_only=any(part.torch_only for part in self.exercise.parts),
                   preload_torch="torch" in (self.source or "") or any(
                       "torch" in getattr(getattr(f, "__code__", None), "co_names", ()) for f in (self.functions or {}).values()))
        self.child = sandbox.Child(job, self.functions)
        try:
            self.child.send_job()
            header, _ = self.child.receive(sandbox.LOAD_LIMIT_S)
        except TimeoutError:
            return self._lost(dict(kind="timeout", message=f"importing the module did not finish within "
                                   f"{sandbox.LOAD_LIMIT_S:.0f} s"))
        except (EOFError, MemoryError, OSError, wire.WireError, ValueError) as exc:
            return self._lost(self._death("loading the module", exc))
        if header.get("op") == "load_error":
            failure = dict(kind="load", message=f"importing the module failed: {header.get('message', '?')}",
                           traceback=str(header.get("traceback", ""))[-1500:], where=_where(header.get("where")))
            self.stop()
            return failure
        if header.get("op") != "loaded":
            return self._lost(dict(kind="protocol", message="the grading process sent something unexpected"))
        problem = _loaded_problem(header, sandbox.has_gpu_driver())
        if problem:
            return self._lost(dict(kind="protocol", message=f"the grading process sent a malformed message: {problem}"))
        self.loaded = header
        return None

    def _death(self, during: str, exc) -> dict:
        if isinstance(exc, MemoryError):
            return dict(kind="memory_limit", message=f"stopped: {exc} during {during}")
        code = self.child.wait_exit(5.0) if self.child else None
        tail = self.child.stderr_tail() if self.child else ""
        if isinstance(exc, (wire.WireError, ValueError)):
            return dict(kind="protocol", message=f"the grading process sent a malformed message during {during}: {exc}")
        return dict(kind="crash", message=f"the grading process died (exit code {code}) during {during}: a crash in "
                    "native code, os._exit / sys.exit, or a resource limit (CPU time, memory)"
                    + (f"; its last error output:\n{tail[-600:]}" if tail else ""))

    def _lost(self, failure: dict) -> dict:
        self.stop()
        return failure

    def stop(self) -> None:
        if self.child is not None:
            self.child.stop()
        self.child, self.loaded = None, None

    def call(self, part: Part, case: Case, limit: float, measure: bool,
             expected_bytes: int = 0, replay_seed: int = 0) -> tuple[dict | None, dict]:
        """(failure that ended the child or None, the call's record with peak/cpu added). A result
        message larger than the answer's bytes, twice, plus 64 MiB is refused unread. After a call that
        raised nothing and kept the launch rules, a kernel with a contract is launched again on inputs made
        from ``replay_seed`` (record["replay"], judged by :func:`contracts.judge_replay`), outside the
        call's measured time and memory."""
        records, buffers = wire.encode_kwargs(case.kwargs)
        header = dict(op="case", function=part.function, kwargs=records, tensors=part.tensors,
                      must_launch=list(part.must_launch), quiz=part.kind in ("choice", "number"),
                      gradients_from=part.gradients_from, row_padding=dict(case.row_padding or {}),
                      measure_live=case.max_live_bytes is not None, torch_only=part.torch_only)
        child = self.child
        try:
            # measured from before the inputs are sent: work done with them before 'ready' counts too
            base = child.reset_peak() if measure else None
            if measure and base is None and child.measurable:
                return None, dict(op="result", unmeasurable=True)
            cpu0, written0 = child.cpu(), child.written() if measure else None
            child.send(header, buffers)
            ready, _ = child.receive(limit)  # the inputs arrived: 'ready' within the case's own time limit
            if ready.get("op") != "ready":
                raise wire.WireError("expected 'ready'")
            child.send(dict(op="go"))
            record, out_buffers = child.receive(limit, max_bytes=2 * expected_bytes + (64 << 20))
        except TimeoutError:
            return self._lost(dict(kind="timeout", message=f"did not return within {limit:.0f} s; stopped (the time "
                                   "limit per check)")), {}
        except (EOFError, MemoryError, OSError, wire.WireError, ValueError) as exc:
            return self._lost(self._death(f"{case.label!r}", exc)), {}
        peak, cpu1 = (child.peak() if measure else None), child.cpu()
        referenced = child.referenced() if measure and base is not None else None
        written1 = child.written() if written0 is not None else None
        if record.get("op") != "result":
            return self._lost(dict(kind="protocol", message="the grading process sent something unexpected")), {}
        problem = _record_problem(record)
        if problem:
            return self._lost(dict(kind="protocol", message=f"the grading process sent a malformed message "
                                   f"during {case.label!r}: {problem}")), {}
        try:
            record["value"] = wire.decode(record.get("value"), out_buffers)
            derived = record.get("derived") if isinstance(record.get("derived"), list) else []
            record["derived"] = [wire.decode(r, out_buffers) for r in derived[:64]]
        except wire.WireError as exc:
            record["value"], record["derived"] = wire.Opaque(f"malformed value ({exc})"), []
        # the received bytes and the arrays made from them (and, for torch parts, the tensors' copies)
        inputs = (3 if part.tensors else 2) * sum(len(b) for b in buffers)
        record["extra_bytes"] = None if base is None or peak is None else max(0, peak - base - inputs)
        record["referenced_bytes"] = None if referenced is None else max(0, referenced - inputs)
        record["written_bytes"] = None if written1 is None else max(0, written1 - written0 - sum(map(len, out_buffers)))
        # a record readable before the call and not after it: the learner's code hid it (prctl(PR_SET_DUMPABLE, 0))
        record["unmeasurable"] = (base is not None and (peak is None or referenced is None)) or \
            (written0 is not None and written1 is None)
        record["cpu_s"] = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
        if contracts.replayed(part.must_launch) and part.tensors and not case.raises and record.get("exception") is None \
                and record.get("not_implemented") is None and not record.get("launch_problem") \
                and not record.get("forbidden_calls"):
            try:
                child.send(dict(op="replay", seed=int(replay_seed)))
                answer, replay_buffers = child.receive(limit, max_bytes=8 * expected_bytes + (64 << 20))
                if answer.get("op") != "replayed":
                    raise wire.WireError("expected 'replayed'")
                record["replay"] = _decode_replay(answer.get("replay"), replay_buffers)
            except TimeoutError:
                return self._lost(dict(kind="timeout", message=f"your kernel, launched again by the grader on inputs "
                                       f"of its own, did not finish within {limit:.0f} s; stopped")), {}
            except (EOFError, MemoryError, OSError, wire.WireError, ValueError) as exc:
                return self._lost(self._death(f"the relaunch of your kernel after {case.label!r}", exc)), {}
        return None, record


def replay_salt() -> int:
    """The secret part of the seed of the inputs a kernel is launched again on: drawn fresh for every graded
    part, so that the grading seed (shown in the report, and readable in the grader's command line as
    ``flashlab grade --seed N``) does not predict them. ``FLASHLAB_GRADER_REPLAY_SALT`` (an integer) fixes it,
    for the project's own tests; a grading child never sees the ``FLASHLAB_GRADER*`` variables."""
    fixed = os.environ.get("FLASHLAB_GRADER_REPLAY_SALT")
    if fixed is not None:
        try:
            return int(fixed)
        except ValueError:
            raise ValueError(f"FLASHLAB_GRADER_REPLAY_SALT={fixed!r} must be an integer") from None
    return secrets.randbits(63)


def _case_scale(case: Case) -> float:
    """The softmax scale of a kernel case's call: its ``scale`` argument, else 1 / sqrt(d) of its q."""
    scale = case.kwargs.get("scale")
    if isinstance(scale, (int, float)) and not isinstance(scale, bool):
        return float(scale)
    q = case.kwargs.get("q")
    return float(q.shape[-1]) ** -0.5 if isinstance(q, np.ndarray) and q.ndim else 1.0


def _decode_replay(replay, buffers: list):
    """The child's record of a kernel launched again (``child.replay``), its arrays decoded; a malformed
    one as a record whose error says so."""
    if replay is None:
        return None
    if not isinstance(replay, dict):
        raise wire.WireError("a replay record that is not a dict")
    out = dict(kernel=str(replay.get("kernel"))[:80])
    if replay.get("error") is not None:
        return dict(out, error=str(replay["error"])[:800])
    launches = replay.get("launches")
    if not isinstance(launches, list) or not 1 <= len(launches) <= 16:
        raise wire.WireError("replay launches malformed")
    out["launches"] = []
    for launch in launches:
        if not isinstance(launch, dict):
            raise wire.WireError("a replayed launch that is not a dict")
        decoded = {}
        for role in ("inputs", "outputs"):
            group = launch.get(role)
            if not isinstance(group, dict) or len(group) > 8:
                raise wire.WireError(f"replay {role} malformed")
            decoded[role] = {str(k)[:40]: wire.decode(v, buffers) for k, v in group.items()}
        scalars = launch.get("scalars")
        if not isinstance(scalars, dict) or not all(type(v) in (int, float, bool) for v in scalars.values()):
            raise wire.WireError("replay scalars malformed")
        decoded["scalars"] = dict(scalars)
        own = launch.get("own_scalars", [])
        if not isinstance(own, list) or len(own) > 8 or not all(type(x) is str for x in own):
            raise wire.WireError("replay own_scalars malformed")
        decoded["own_scalars"] = [x[:40] for x in own]
        tile = launch.get("tile", 0)
        if type(tile) is not int or tile < 0:
            raise wire.WireError("replay tile malformed")
        decoded["tile"] = tile
        out["launches"].append(decoded)
    return out


def _where(where) -> str | None:
    if isinstance(where, (list, tuple)) and len(where) == 3 and type(where[1]) is int:
        return f"{Path(str(where[0])).name}:{where[1]}: {str(where[2])[:200]}"
    return None


# The fields of a child's messages and their types: anything else is a malformed message, never a
# grader error. Every field is still a claim; these only make sure the parent can read it.
_OPTIONAL_TEXT = (str, type(None))
_RECORD_TYPES = dict(exception=_OPTIONAL_TEXT, not_implemented=_OPTIONAL_TEXT, launch_problem=_OPTIONAL_TEXT,
                     gradient_problem=_OPTIONAL_TEXT,
                     traceback=(str,), where=(list, type(None)), forbidden_calls=(list,), digests=(dict,),
                     launches=(list,), tiles=(dict,), derived=(list,), output=(str,), output_chars=(int,),
                     seconds=(int, float), live=(dict,))


_RECORD_REQUIRED = ("exception", "not_implemented", "forbidden_calls", "digests", "output", "value")


def _record_problem(record: dict) -> str | None:
    """What is malformed in a result record, None when every field has its type."""
    missing = [key for key in _RECORD_REQUIRED if key not in record]
    if missing:
        return f"field(s) {', '.join(missing)} missing"
    for key, types in _RECORD_TYPES.items():
        if key in record and type(record[key]) not in types:
            return f"field {key!r} is a {type(record[key]).__name__}"
    if not all(type(c) is str for c in record.get("forbidden_calls") or []):
        return "field 'forbidden_calls' holds something other than text"
    if not all(type(k) is str and type(v) in _OPTIONAL_TEXT for k, v in (record.get("digests") or {}).items()):
        return "field 'digests' holds something other than text"
    if not all(isinstance(x, dict) for x in record.get("launches") or []):
        return "field 'launches' holds something other than records"
    return None


def _loaded_problem(header: dict, gpu_driver: bool) -> str | None:
    """What is wrong with the child's 'loaded' message: malformed fields, or a GPU this machine lacks
    (the GPU's looser tolerances are for a GPU the parent can see)."""
    for key in ("names", "callables"):
        if not isinstance(header.get(key), list) or not all(type(n) is str for n in header[key]):
            return f"field {key!r} is not a list of names"
    if not isinstance(header.get("kernels"), dict):
        return "field 'kernels' is not a record"
    if header.get("device") not in (None, "cpu", "cuda"):
        return f"device {str(header.get('device'))[:40]!r} is unknown"
    if header.get("device") == "cuda" and not gpu_driver:
        return "it claims a CUDA device, and this machine has no GPU driver"
    return None


def _digest(value) -> str | None:
    if isinstance(value, np.ndarray):
        buffers: list = []
        wire.encode(value, buffers)
        return hashlib.sha256(buffers[0]).hexdigest()
    return None


def _text(value, limit: int) -> str:
    return str(value)[:limit] if value is not None else ""


def clip_message(message: str, limit: int = 480) -> str:
    """A failure message shortened for an "also failed" line: whole clauses (ending in ". " or
    "; ") up to ``limit`` characters, then " ..."; never cut inside a number or a formula."""
    if len(message) <= limit:
        return message
    head = message[:limit]
    cut = max(head.rfind(". "), head.rfind("; "))
    if cut < limit // 4:  # no clause boundary worth keeping: cut at the last space
        cut = head.rfind(" ")
    return message[:cut if cut > 0 else limit].rstrip(" ;.") + " ..."


def _float_views(derived: np.ndarray) -> list:
    """The values of a buffer as its own dtype, and its bytes reinterpreted as float16, float32 and
    float64 (float64 arrays of any length)."""
    raw = np.ascontiguousarray(derived).tobytes()
    views = [np.asarray(derived, dtype=np.float64).ravel()] if derived.dtype.kind in "fiub" else []
    for dt in (np.float16, np.float32, np.float64):
        usable = len(raw) // np.dtype(dt).itemsize * np.dtype(dt).itemsize
        if usable and np.dtype(dt) != derived.dtype:
            with np.errstate(invalid="ignore"):  # bytes read as a signalling NaN: no warning in the report
                views.append(np.frombuffer(raw[:usable], dtype=dt).astype(np.float64))
    return views


def holds_output(derived, returned: np.ndarray) -> bool:
    """Whether the inputs the learner computed and handed to kernels (``derived``: one array or a
    list, the launches' float arguments included) hold every value the learner's call returned,
    exactly (as the returned dtype), in any order or layout and spread over any of them, read as
    their own dtype or with their bytes reinterpreted as float16, float32 or float64: a kernel that
    copies a smuggled answer returns exactly its values (a bit-view, a transpose, a concatenation).
    Outputs of fewer than 8 finite elements or of one repeated value are not searched (too easily
    found by chance)."""
    if not isinstance(returned, np.ndarray) or returned.dtype.kind != "f":
        return False
    out = returned.ravel()
    out = out[np.isfinite(out)]
    arrays = [derived] if isinstance(derived, np.ndarray) else [a for a in derived if isinstance(a, np.ndarray)]
    if out.size < 8 or np.unique(out).size < 2 or not arrays:
        return False
    want, need = np.unique(out, return_counts=True)
    per_array = [_float_views(a) for a in arrays]
    pools = [np.concatenate([views[0] for views in per_array if views])]  # every buffer in its own dtype
    pools += [v for views in per_array for v in views[1:]]  # each reinterpretation of each buffer
    for k in range(1, 4):  # one reinterpretation of all buffers together
        column = [views[k] for views in per_array if len(views) > k]
        if len(column) > 1:
            pools.append(np.concatenate(column))
    with np.errstate(invalid="ignore", over="ignore"):
        for pool in pools:
            pool = pool.astype(returned.dtype)
            have, count = np.unique(pool[np.isfinite(pool)], return_counts=True)
            if have.size < want.size:
                continue
            at = np.minimum(np.searchsorted(have, want), have.size - 1)
            if np.all(have[at] == want) and np.all(count[at] >= need):
                return True
    return False


def judge_raises(part: Part, case: Case, record: dict) -> dict | None:
    """The verdict on a call that must refuse its arguments: ``case.raises`` = (exception type, the
    argument its message must name)."""
    kind, name = case.raises
    if record.get("unmeasurable") or record.get("not_implemented") is not None or record.get("forbidden_calls"):
        return judge(part, case, record, None, False, None)
    raised = str(record.get("exception") or "")
    if raised.startswith(f"{kind}:") and name.lower() in raised.split(":", 1)[1].lower():  # BLOCK_N names it too
        return None
    wanted = f"{kind} whose message names {name}"
    if raised:
        return dict(kind="exception", message=f"expected {wanted}; it raised {_text(raised, 400)}",
                    where=_where(record.get("where")))
    return dict(kind="value", message=f"expected {wanted}; it returned a result instead of refusing the argument")


# Triton's own words for a shape mistake, and what they mean in the kernel exercises
TRITON_ADVICE = (
    ("must have equal reduction dimensions",
     "tl.dot(a, b) multiplies a (M, K) tile by a (K, N) one: a's last dimension must be b's first. For the scores "
     "Q K^T load K as a (HEAD_DIM, BLOCK_N) tile (offsets of d down the rows, of keys across) or pass tl.trans(k)"),
    ("active drivers",
     "@triton.autotune times its configs on a GPU, and Triton's CPU interpreter has none: on a CPU launch one "
     "config yourself, e.g. my_kernel.fn[grid](..., BLOCK_M=32, BLOCK_N=32) (.fn is the kernel under the autotuner), "
     "or drop the decorator; keep it for a GPU"),
)

MAX_TILE = (128, 256)  # exercise 15: the largest tile (query rows x key rows) its docstring allows


def _shape_in(what: str) -> tuple | None:
    """The shape at the start of a ``LiveBytes.largest`` description, "(1, 128, 256) float64 from aten.exp"."""
    found = re.match(r"\((\d+(?:, \d+)*),?\) ", what)
    return tuple(int(n) for n in found.group(1).split(", ")) if found else None


def _live_problem(case: Case, live) -> dict | None:
    """The verdict on the bytes of torch tensors the call held at once (``child.LiveBytes``), counted
    exactly: the same on every run. A record without the count gets no credit."""
    if not isinstance(live, dict) or type(live.get("tensor_peak")) is not int or type(live.get("at_peak")) is not list:
        return dict(kind="memory", message="the grader could not count the tensors this check's call held (the "
                    "count from inside the grading process is missing or malformed): no credit")
    if live["tensor_peak"] <= case.max_live_bytes:
        return None
    q, k = case.kwargs["q"], case.kwargs["k"]
    itemsize = q.dtype.itemsize
    at_peak = [(n, what) for n, what in (x for x in live["at_peak"][:3] if isinstance(x, list) and len(x) == 2)
               if type(n) is int and type(what) is str]
    largest = [f"{_text(what, 120)} ({n / 2**10:,.0f} KiB)" for n, what in at_peak]
    shapes = [_shape_in(what) for _, what in at_peak]
    if shapes and all(s is not None and len(s) >= 2 and k.shape[-2] not in s for s in shapes):  # tiles, not rows
        rows, cols = shapes[0][-2:]
        return dict(kind="memory", message=(
            f"tiles of {rows} x {cols} {str(q.dtype)} held "
            f"{live['tensor_peak'] / 2**20:.2f} MiB of torch tensors at once; the largest then: {', '.join(largest)} "
            f"(limit {case.max_live_bytes / 2**20:.2f} MiB, counted exactly: the same on every run). No tensor has "
            f"Nk = {k.shape[-2]} columns: the tiles are too large, not the wrong shape; use tiles of at most "
            f"{MAX_TILE[0]} x {MAX_TILE[1]} ({MAX_TILE[0] * MAX_TILE[1]:,} elements), as the stub's docstring says"))
    return dict(kind="memory", message=(
        f"held {live['tensor_peak'] / 2**20:.2f} MiB of torch tensors at once"
        + (f"; the largest then: {', '.join(largest)}" if largest else "")
        + f" (limit {case.max_live_bytes / 2**20:.2f} MiB, counted exactly: the same on every run). One Nq x Nk "
        f"array of this case is {q.shape[-2] * k.shape[-2] * itemsize / 2**20:.0f} MiB, one block of 8 query rows "
        f"against every key {8 * k.shape[-2] * itemsize / 2**10:,.0f} KiB, K {k[..., :1, :].size * k.shape[-2] * itemsize / 2**10:,.0f} KiB: "
        "a tiled implementation never builds an Nq x Nk array, nor a block_q x Nk one; keep only "
        "(block_q x block_k) tiles"))


def judge(part: Part, case: Case, record: dict, expected, on_cuda: bool, previous_cpu: float | None) -> dict | None:
    """The verdict on one call, from the record the child sent (every field is a claim to check)."""
    if record.get("unmeasurable"):
        return dict(kind="memory", message="the grader could not measure this check's memory (/proc/<pid>/clear_refs, "
                    "smaps, status or io, readable when your module was loaded, was refused around the call; e.g. "
                    "after prctl(PR_SET_DUMPABLE, 0)): no credit")
    if record.get("not_implemented") is not None:
        return dict(kind="not_implemented", message=_text(record["not_implemented"], 300),
                    where=_where(record.get("where")))
    calls = [str(c)[:300] for c in (record.get("forbidden_calls") or [])][:5]
    if calls:
        if all("(" in c for c in calls):  # each says why itself (exercise 15's bridges out of torch, threads)
            return dict(kind="forbidden", message=f"called {', '.join(calls)}: not rewarded")
        return dict(kind="forbidden", message=(f"called {', '.join(calls)} instead of implementing {part.function}: "
                                               "not rewarded; write the computation yourself. This holds anywhere in the call, including a "
                                               "check of your own result against a library's: remove such checks before grading"))
    if record.get("exception"):
        refused = any(words in record["exception"] for words in ("Operation not permitted",
                                                                  "[Errno 13] Permission denied"))
        advice = next((f" ({text})" for words, text in TRITON_ADVICE if words in record["exception"]), "")
        return dict(kind="exception", message=f"raised {_text(record['exception'], 1500)}{advice}" + (
                    " (while grading, code may not start processes, read flashlab's files or the course's answers, "
                    "change files outside its working folder, map memory shared with a file or another process, "
                    "signal other processes or open network connections)"
                    if refused else ""),
                    traceback=_text(record.get("traceback"), 1500), where=_where(record.get("where")))
    digests = record.get("digests") if isinstance(record.get("digests"), dict) else {}
    changed = [name for name, value in case.kwargs.items()
               if _digest(value) is not None and digests.get(name) != _digest(value)]
    if changed:
        return dict(kind="mutation", message=(f"changed its input(s) {', '.join(changed)} in place; work on copies "
                                              "(x = x.copy()) or new arrays"))
    if record.get("launch_problem"):
        return dict(kind="launch", message=_text(record["launch_problem"], 400))
    if part.gradients_from and record.get("gradient_problem", "no gradient check was reported"):
        return dict(kind="gradients", message=_text(record.get("gradient_problem")
                                                    or "no gradient check was reported", 400))
    if case.tolerance:
        loosest = lambda table: {dt: tuple(max(a, b) for a, b in zip(table.get(dt, (0.0, 0.0)), tol))  # noqa: E731
                                 for dt, tol in case.tolerance.items()}
        part = dataclasses.replace(part, tolerance=dict(part.tolerance, **loosest(part.tolerance)),
                                   gpu_tolerance=dict(part.gpu_tolerance, **loosest(part.gpu_tolerance)))
    try:
        failure = compare(part, record.get("value"), expected, on_cuda=on_cuda)
    except Exception as exc:  # noqa: BLE001  a bug in a comparison is the grader's, not the learner's
        failure = dict(kind="grader", message=f"internal grader error comparing: {type(exc).__name__}: {exc}")
    if failure is not None:
        return failure
    answers = expected if isinstance(expected, tuple) else (expected,)
    value = record.get("value")
    returned = value if isinstance(value, tuple) else (value,)
    derived_inputs = [d for d in record.get("derived") or [] if type(d) is np.ndarray]
    handed = derived_inputs and (any(
        isinstance(answer, np.ndarray) and d.shape == answer.shape
        and _compare_array(part, "x", d.astype(answer.dtype), answer, on_cuda) is None
        for answer in answers for d in derived_inputs) or any(holds_output(derived_inputs, r) for r in returned))
    if handed:
        return dict(kind="launch", message="your kernel was handed the answer, computed before the launch: "
                    "the result must be computed by the kernel")
    blocks = _launch_blocks_problem(part, case, record) or _relaunch_tile_problem(part, case, record.get("replay"))
    if blocks:
        return dict(kind="launch", message=blocks)
    if contracts.replayed(part.must_launch) and part.tensors:
        relaunched = contracts.judge_replay(part.must_launch, record.get("replay"), _case_scale(case), case.kwargs)
        if relaunched:
            return dict(kind="launch", message=_text(relaunched, 900), relaunch=True)
    if case.max_live_bytes is not None:
        failure = _live_problem(case, record.get("live"))
        if failure is not None:
            return failure
    extra, referenced = record.get("extra_bytes"), record.get("referenced_bytes")
    if case.max_peak_bytes is not None:
        q, k = case.kwargs["q"], case.kwargs["k"]
        full = q.shape[-2] * k.shape[-2] * q.dtype.itemsize
        written = record.get("written_bytes")
        if written is not None and written > full / 2:  # scores kept in a file, a memfd or a pipe
            return dict(kind="memory", message=(
                f"wrote {written / 2**20:.1f} MiB to files, pipes or memfds during the call; one Nq x Nk array of "
                f"this case is {full / 2**20:.1f} MiB. A tiled implementation keeps no Nq x Nk array, in memory "
                "or outside it"))
        if case.pool_check and referenced is not None and referenced > full / 2:  # a pool held before the call
            return dict(kind="memory", message=(
                f"read or wrote {referenced / 2**20:.1f} MiB of memory during the call (memory held before it "
                f"included); one Nq x Nk array of this case is {full / 2**20:.1f} MiB. A tiled implementation must "
                "never build an Nq x Nk array, not even in a buffer allocated beforehand"))
    if case.max_peak_bytes is not None and extra is not None and extra > case.max_peak_bytes:
        row = k.shape[-2] * q.dtype.itemsize  # one query row's scores against every key
        if row > case.max_peak_bytes - case.peak_outputs:  # a case with few query rows and very many keys
            tile = case.kwargs.get("block_q", 0) * case.kwargs.get("block_k", 0) * q.dtype.itemsize
            held = f", {case.peak_outputs / 2**20:.1f} MiB of it for the arrays returned" if case.peak_outputs else ""
            what = f"one row of Nk = {k.shape[-2]} scores (one query row against every key) is {row / 2**20:.1f} MiB"
            if extra - case.peak_outputs >= k.nbytes:  # as much as K itself: a cast or copy of the inputs?
                what += (f", and the peak is at least a copy of K or V ({k.nbytes / 2**20:.1f} MiB each): a cast copies "
                         "the inputs (astype copies, even to the same dtype; keep their dtype, or astype(..., "
                         "copy=False))")
            return dict(kind="memory", message=(
                f"used {extra / 2**20:.1f} MiB of extra memory at peak (limit {case.max_peak_bytes / 2**20:.1f} MiB"
                f"{held}); {what}. Walk the keys block_k at a time in (block_q x block_k) tiles (here "
                f"{tile / 2**10:.0f} KiB): never a row of Nk scores per query, nor a copy of K or V"))
        return dict(kind="memory", message=(
            f"used {extra / 2**20:.1f} MiB of extra memory at peak; one Nq x Nk array of this case is "
            f"{full / 2**20:.1f} MiB. A tiled implementation must never build an Nq x Nk array (nor a "
            f"block_q x Nk one): keep only (block_q x block_k) tiles (limit {case.max_peak_bytes / 2**20:.1f} MiB)"))
    cpu = record.get("cpu_s")
    if case.max_cpu_ratio is not None and cpu is not None and previous_cpu is not None \
            and cpu > max(0.3, case.max_cpu_ratio * previous_cpu):
        return dict(kind="work", message=(
            f"took {cpu:.2f} s of CPU against {previous_cpu:.2f} s for the previous check, although the extra "
            "keys are all past the last query row: the loop computes tiles a causal loop skips"))
    return None


def _not_attempted_line(source: str | None, function: str, stub: str | None) -> int | None:
    """Line of ``raise NotImplementedError`` when the learner changed the module but kept that line."""
    if not source:
        return None
    try:
        tree = ast.parse(source)
        if stub is not None and ast.dump(ast.parse(stub)) == ast.dump(tree):
            return None  # the untouched stub
    except SyntaxError:
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            body = [n for n in node.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
            raises = [n for n in body if isinstance(n, ast.Raise) and "NotImplementedError" in ast.unparse(n)]
            if raises and (len(body) > 1 or stub is not None):
                return raises[0].lineno
    return None


def _stub_source(exercise: Exercise) -> str | None:
    root = _repo_root()
    path = root / "exercises" / f"{exercise.name}.py" if root else None
    return path.read_text() if path is not None and path.is_file() else None


def _relaunch_tile_problem(part: Part, case: Case, replay) -> str:
    """Why the kernel launched again by the grader built a tile over what the call's launches may build
    (``Part.max_launch_block``, or the tile a case asks for through ``Part.launch_blocks``), or ''. In the
    interpreter only the branch a launch runs builds tensors: a kernel that builds a small tile when called
    and a whole row when launched again is judged on both."""
    launches = (replay or {}).get("launches") or []
    built = max((launch.get("tile", 0) for launch in launches), default=0)
    limits = [part.max_launch_block] if part.max_launch_block else []
    limits += [case.kwargs[argument] for _, argument in part.launch_blocks if type(case.kwargs.get(argument)) is int]
    if not built or not limits or built <= min(limits):
        return ""
    return (f"{(replay or {}).get('kernel', 'the kernel')}, launched again by the grader on inputs of its own, built a "
            f"tile of {built} (a tensor dimension: tl.arange's extent, a load's shape) where its launches may build "
            f"at most {min(limits)}: the kernel must walk its loop block by block whatever inputs it is given")


def _launch_blocks_problem(part: Part, case: Case, record: dict) -> str:
    """Why the launches did not use the tile the case asked for (``Part.launch_blocks``) or built one over
    the part's limit (``Part.max_launch_block``), or ''. A kernel's tile is the largest dimension of any
    tensor it built (``record["tiles"]``, over all of the call's launches: tl.arange's extent, a load's or
    a block pointer's shape), however the kernel wrote it."""
    launches = [launch for launch in record.get("launches") or []
                if isinstance(launch, dict) and isinstance(launch.get("constexprs"), dict)]
    tiles = record.get("tiles") if isinstance(record.get("tiles"), dict) else {}
    tiles = {str(k): v for k, v in tiles.items() if type(v) is int}
    for constexpr, argument in part.launch_blocks:
        asked = case.kwargs.get(argument)
        if type(asked) is not int:
            continue
        for launch in launches:
            values = {str(k): v for k, v in launch["constexprs"].items() if type(v) is int}
            if values.get(constexpr) != asked:
                return (f"the kernel was launched with {constexpr}={values.get(constexpr)} where {argument}={asked} "
                        f"was asked for: launch it with {constexpr}={argument}, whatever the row length, and walk "
                        "the row block by block")
        wider = sorted(f"{_text(kernel, 80)} built a tile of {tile}" for kernel, tile in tiles.items() if tile > asked)
        if wider:
            return (f"{', '.join(wider)} beside {constexpr}={asked} (a tensor dimension: tl.arange's extent, a "
                    f"load's shape): every tensor the kernel builds is at most {argument} long in each dimension, so "
                    f"that no tile holds more than one block of a row; keep one block of {argument} values at a "
                    f"time (rows per program, if several, at most {argument} too)")
    limit = part.max_launch_block
    over = sorted((kernel, tile) for kernel, tile in tiles.items() if limit and tile > limit)
    if over:
        kernel, tile = over[0]
        helper = "" if kernel in part.must_launch else (
            f" The cap holds for every kernel the part launches, a helper of yours too (a row reduction such as D "
            f"works as well in blocks of {limit} rows)")
        return (f"{_text(kernel, 80)} built a tile of {tile} (a tensor dimension: tl.arange's extent, a load's "
                f"shape): tiles here hold at most {limit} rows or keys; a tile as long as the sequence (or the "
                f"split) leaves the kernel's loop nothing to walk. Keep each tile at most {limit} and let the loop "
                "go block by block." + helper)
    return ""


def _launch_info(records: list) -> dict:
    for record in reversed(records):
        for launch in reversed(record.get("launches") or []):
            if isinstance(launch, dict) and isinstance(launch.get("constexprs"), dict):
                return {str(k): v for k, v in launch["constexprs"].items() if type(v) is int}
    return {}


def grade_part(session: Session, exercise: Exercise, part: Part, seed: int, public_only: bool,
               time_limit_s: float | None) -> dict:
    """Grade one part: cases and references built here, calls made in the child, verdicts here."""
    result = _base_result(exercise, part, seed)
    if session.child is None:
        failure = session.start()
        if failure is not None:
            result["failure"] = dict(failure, case="import", group="", why="", inputs={})
            return result
    loaded = session.loaded or {}
    names = loaded.get("names") or []
    if part.function not in names:
        result["failure"] = dict(kind="missing", case="", group="", why="", inputs={}, message=(
            f"{exercise.name} has no {part.function!r}; keep the name and signature of the exercise stub"))
        return result
    if part.kind not in ("choice", "number") and part.function not in (loaded.get("callables") or []):
        result["failure"] = dict(kind="missing", case="", group="", why="", inputs={},
                                 message=f"{part.function} is not a function")
        return result
    for name in part.must_launch:
        if name not in (loaded.get("kernels") or {}):
            result["failure"] = dict(kind="launch", case="", group="", why="", inputs={}, message=(
                f"no Triton kernel {name} next to {part.function}: the result must come from "
                f"{name}[grid](...); keep the kernel of the exercise stub"))
            return result
    index = exercise.parts.index(part)
    public = part.public(np.random.default_rng([PUBLIC_SEED, index]))
    whys = PUBLIC_WHY.get((exercise.name, part.function), ())
    public = [c if c.why or i >= len(whys) else dataclasses.replace(c, why=whys[i]) for i, c in enumerate(public)]
    hidden_rng = np.random.default_rng([seed, index])
    salt = replay_salt()  # the relaunch's inputs: not predictable from the seed the report shows
    hidden = [] if public_only else part.hidden(hidden_rng)
    result["public"], result["hidden"] = [0, len(public)], [0, len(hidden)]
    on_cuda = loaded.get("device") == "cuda"
    result["device"] = str(loaded.get("device") or "cpu")
    result["cases"] = []  # (group, label, passed) of every case that ran
    records: list = []
    deferred: list = []  # (failure, output, where, group, label) of checks whose only failure was the relaunch
    previous_cpu = None
    stopped = False
    for group, cases in (("public", public), ("hidden", hidden)):
        for case in cases:
            if stopped:
                result["not_run"] += 1
                continue
            if case.build is not None:
                built = case.build(_launch_info(records), hidden_rng)
                case = dataclasses.replace(built, hint=built.hint or case.hint)
            result["hidden_run"] = result["hidden_run"] or group == "hidden"
            where = dict(case=case.label, group=group, why=case.why, inputs=_inputs(part, case))
            if case.hint is not None and 1 <= case.hint <= len(part.hints):
                where["hint"] = case.hint  # the report shows this hint first
            limit = min(part.time_limit_s, time_limit_s or part.time_limit_s)
            if session.child is None:
                failure = session.start()
                if failure is not None:
                    result["failure"] = result["failure"] or dict(failure, **where)
                    result["not_run"] += 1
                    stopped = True
                    continue
            expected = None if case.raises else part.reference(**(case.reference_kwargs or case.kwargs))
            answers = expected if isinstance(expected, tuple) else (expected,)
            replay_seed = int(np.random.default_rng([seed, index, len(result["cases"]), 7, salt]).integers(2**31))
            lost, record = session.call(part, case, limit, measure=case.max_peak_bytes is not None,
                                        expected_bytes=sum(getattr(a, "nbytes", 0) for a in answers),
                                        replay_seed=replay_seed)
            if lost is not None:
                failure = lost
                if failure.get("kind") == "crash" and part.must_launch:
                    failure = dict(failure, message=failure["message"] + (
                        ". With a Triton kernel in the CPU interpreter the usual cause is a tl.load or tl.store past "
                        "the end of a tensor: a missing mask, or a wrong stride or offset"))
            else:
                records.append(record)
                chars = record.get("output_chars")
                if type(chars) is int and chars > OUTPUT_KEPT:
                    result["notes"].append(f"printed {chars:,} characters during {case.label!r}; only the first "
                                           f"{OUTPUT_KEPT:,} were kept")
                if part.kind in ("choice", "number") and record.get("value") is None:
                    result["status"], result["public"] = "not attempted", [0, 1]
                    return result
                failure = (judge_raises(part, case, record) if case.raises
                           else judge(part, case, record, expected, on_cuda, previous_cpu))
                previous_cpu = record.get("cpu_s") if isinstance(record.get("cpu_s"), float) else None
            result["cases"].append([group, case.label, failure is None])
            if failure is None:
                result[group][0] += 1
                continue
            if failure["kind"] == "not_implemented" and result["public"][0] + result["hidden"][0] == 0:
                line = _not_attempted_line(session.source, part.function, _stub_source(exercise))
                if line is None:
                    result["status"] = "not attempted"
                    result["not_run"] = 0
                    return result
                failure = dict(failure, message=f"your function still raises NotImplementedError at line {line}: "
                               "delete that line")
            mistakes = part.mistakes or MISTAKES.get((exercise.name, part.function), ())
            named = (result["failure"] or {}).get("mistake")
            if named:  # where the part's first failure named a mistake, a later check that it also explains says so
                mistakes = sorted(mistakes, key=lambda m: m[0] != named)
            if failure["kind"] in ("value", "nan") and mistakes and lost is None:
                failure = _name_mistake(part, mistakes, case, record, failure, on_cuda, records)
            output = str(record.get("output") or "")[:500] if record else ""
            if failure.get("relaunch") and result["failure"] is None:  # reported after the cases' own failures:
                deferred.append((failure, output, where, group, case.label))  # a plain bug shows as a value there
                continue
            if result["failure"] is None:
                if failure["kind"] in RULE_KINDS:
                    where = {**{k: v for k, v in where.items() if k != "hint"}, "why": RULE_WHY}
                result["failure"] = dict(failure, output=output, **where)
            else:
                first = result["failure"]
                same = (failure["kind"] == "exception" == first["kind"] and failure.get("where") == first.get("where")
                        and failure["message"].split(":", 1)[0] == first["message"].split(":", 1)[0])
                same_mistake = failure.get("mistake") is not None and failure.get("mistake") == first.get("mistake")
                same = same or bool(failure.get("relaunch") and first.get("relaunch"))  # the kernel launched again
                text = failure["message"]
                if ROUNDING_MARK in text and ROUNDING_MARK in first["message"]:  # said once, under the first failure
                    text = text[:text.index(ROUNDING_MARK)] + "; rounding-sized again"
                result["failures"].append(f"{group} check {case.label}: " + (
                    ("the same problem" if failure.get("relaunch") else "the same error at the same line") if same else
                    "looks like the same mistake" if same_mistake else
                    "the same problem" if failure["message"] == first["message"] else clip_message(text)))
            if failure["kind"] in STOP_KINDS:
                stopped = True
    for failure, output, where, group, label in deferred:  # the kernel launched again failed its contract
        if result["failure"] is None:
            where = {**{k: v for k, v in where.items() if k != "hint"}, "why": RULE_WHY}
            result["failure"] = dict(failure, output=output, **where)
        else:
            result["failures"].append(f"{group} check {label}: " + (
                "the same problem" if result["failure"].get("relaunch") else clip_message(failure["message"])))
    result["checks"] = [result["public"][0] + result["hidden"][0], len(public) + len(hidden)]
    passed = result["failure"] is None and result["not_run"] == 0
    complete = not public_only or part.kind in ("choice", "number")  # quizzes have no hidden cases
    if passed:
        result["status"] = "passed" if complete else "public passed"
        result["earned"] = min(part.points, part.points if complete else 0)
    return result


OUTPUT_KEPT = 2000


def _name_mistake(part: Part, mistakes, case: Case, record: dict, failure: dict, on_cuda: bool,
                  records: list) -> dict:
    """When the learner's output equals what a known mistake gives, name the mistake first: on the reference's
    inputs, or on the inputs the call had where they differ (a poisoned K read by a mistake shows its NaN)."""
    inputs = [case.reference_kwargs or case.kwargs] + ([case.kwargs] if case.reference_kwargs else [])
    for (description, mistaken), given in ((m, given) for given in inputs for m in mistakes):
        try:
            kw = dict(given)
            if case.row_padding:
                kw["row_padding"] = dict(case.row_padding)
            wrong = mistaken(kw, _launch_info(records))
        except Exception:  # noqa: BLE001  a detector that does not apply to this case
            continue
        if wrong is None:
            continue
        if all(isinstance(w, np.ndarray) and w.dtype.kind == "f" and np.isnan(w).all()
               for w in (wrong if isinstance(wrong, tuple) else (wrong,))):
            continue  # all NaN: any bug that ends in NaN would match it; it names nothing
        got = record.get("value")
        gots, wrongs = (got, wrong) if isinstance(wrong, tuple) else ((got,), (wrong,))
        if type(gots) is tuple and len(gots) == len(wrongs) and all(
                _same_as_mistake(part, name, g, w, on_cuda) for name, g, w in zip(part.outputs or ("x",) * len(wrongs),
                                                                              gots, wrongs)):
            message = failure["message"]
            cut = message.find("; rows ")  # the whole-NaN-rows explanation: the named mistake explains them
            if cut != -1 and " are NaN in full" in message[cut:]:
                message = message[:cut]
            return dict(failure, mistake=description, message=f"looks like {description}. {message}")
    return failure


def _same_as_mistake(part: Part, name: str, got, wrong, on_cuda: bool) -> bool:
    """Whether one output equals what the mistake gives, NaN where it has NaN, within the part's tolerance."""
    if part.kind in ("exact", "number", "choice"):  # a count, a quiz answer: the same one (a number within 1%)
        return compare(part, got, wrong) is None
    if type(got) is not np.ndarray or got.shape != wrong.shape:
        return False
    mask = ~np.isnan(wrong)
    return np.array_equal(np.isnan(got), ~mask) and _compare_array(
        part, name, np.where(mask, got, 0).astype(got.dtype), np.where(mask, wrong, 0).astype(got.dtype), on_cuda) is None


# ----------------------------------------------------------------------------- integrity of the grader's files
def _protected_files() -> list[Path]:
    """Every file of the flashlab package (bytecode in __pycache__ too: Python runs a cached .pyc whose
    header matches the source), solutions/, and the files every new interpreter runs at start-up
    (.pth and sitecustomize in the site-packages folders)."""
    import site

    import flashlab

    package = Path(flashlab.__file__).resolve().parent
    files = sorted(p for p in package.rglob("*") if p.is_file())
    root = _repo_root()
    if root is not None and (root / "solutions").is_dir():
        files += sorted((root / "solutions").glob("*.py"))
    for folder in {*site.getsitepackages(), site.getusersitepackages()}:
        for pattern in ("*.pth", "sitecustomize.py", "usercustomize.py"):
            files += sorted(Path(folder).glob(pattern))
    return files


def hidden_paths() -> list[str]:
    """What the grading child may not read: flashlab's package (the references), solutions/, the
    instructor's pack, the test suite (its honest variants are worked answers), the git history (every
    file ever committed) and, in a batch, the other students' folders (flashlab.grading.confine)."""
    import flashlab
    from flashlab.grading import classroom

    # the course's folders: the one flashlab was imported from, and any above the current directory
    # (Gradescope runs an installed flashlab from /autograder/source, whose src/ holds the sources too)
    above = [p for p in [Path.cwd(), *Path.cwd().parents] if (p / "src" / "flashlab").is_dir()]
    roots = {r for r in [_repo_root(), *above] if r is not None}
    paths = [Path(flashlab.__file__).resolve().parent]
    paths += [Path(p) / "flashlab" for p in sys.path if p and (Path(p) / "flashlab" / "grading").is_dir()]
    for root in roots:
        paths += [root / "src" / "flashlab", root / "solutions", root / "instructor", root / "tests", root / ".git"]
    if classroom.PACK_FOLDER[0] is not None:
        paths.append(Path(classroom.PACK_FOLDER[0]).resolve())
    paths += [Path(folder).resolve() for folder in classroom.BATCH_FOLDERS]
    return sorted({str(p.resolve()) for p in paths if p.exists()})


def grader_digest() -> dict:
    """sha256 of every file in :func:`_protected_files` (checked before and after grading)."""
    digest = {}
    for path in _protected_files():
        try:
            digest[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
        except OSError:
            digest[str(path)] = "unreadable"
    return digest


def _bytecode_of_unchanged_source(path: str, changed: set) -> bool:
    """Whether a changed file is a .pyc that Python itself writes or drops for its unchanged source:
    bytecode cached lazily by a module's first import (an editable install, a fresh checkout, another
    notebook's check starting) while an exercise ran, not a change to the grader. One that is there
    must carry the source's size and mtime in its header (as Python checks before running it) and
    hold the code that compiling the source gives; one that is gone is compiled again from the source."""
    import importlib.util
    import marshal

    cache = Path(path)
    if cache.suffix != ".pyc" or cache.parent.name != "__pycache__" or ".opt-" in cache.name:
        return False
    try:
        source = Path(importlib.util.source_from_cache(str(cache)))
    except ValueError:
        return False
    if str(source) in changed:
        return False
    if not cache.exists():
        return True
    try:
        data, text, stat = cache.read_bytes(), source.read_bytes(), source.stat()
        header = [int.from_bytes(data[i:i + 4], "little") for i in (4, 8, 12)]
        if data[:4] != importlib.util.MAGIC_NUMBER or header != [0, int(stat.st_mtime) & 0xFFFFFFFF,
                                                                 stat.st_size & 0xFFFFFFFF]:
            return False
        return marshal.loads(data[16:]) == compile(text, str(source), "exec", dont_inherit=True)
    except (OSError, ValueError, EOFError, TypeError, SyntaxError):
        return False


def _refuse_if_tampered(before: dict, graded: list) -> list:
    after = grader_digest()
    changed = set(before) ^ set(after) | {p for p in before if after.get(p) != before[p]}
    changed = sorted(p for p in changed if not _bytecode_of_unchanged_source(p, changed))
    if not changed:
        return graded
    message = ("the grader's files or solutions/ changed while the exercise ran (" + ", ".join(
        Path(p).name for p in changed[:5]) + "): no verdict is given; reinstall flashlab")
    for exercise, results in graded:
        for name, result in results.items():
            results[name] = dict(failed_result(exercise, next(p for p in exercise.parts if p.function == name),
                                               "tampered", message, seed=result.get("seed", 0)))
    return graded


def _preload_references() -> None:
    """Import the references before any learner code runs (and before the file digests)."""
    import importlib

    for name in ("flashlab.reference", "flashlab.softmax", "flashlab.tiled", "flashlab.traffic"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass


def grade_exercise(exercise: Exercise, path: str | None, seed: int, public_only: bool = False,
                   functions: dict | None = None, time_limit_s: float | None = None) -> dict[str, dict]:
    """Grade every part of ``exercise`` (one child process, restarted after a crash); part -> result."""
    from flashlab.grading.sandbox import unprivileged_uid

    session = Session(exercise, path, functions, unprivileged_uid())
    results = {}
    try:
        for part in exercise.parts:
            try:
                results[part.function] = grade_part(session, exercise, part, seed, public_only, time_limit_s)
            except Exception as exc:  # noqa: BLE001  a bug in the grader or the library, not in the learner's code
                session.stop()
                results[part.function] = failed_result(exercise, part, "grader", "internal grader error (not a "
                                                       f"problem with your code): {type(exc).__name__}: {exc}",
                                                       seed=seed)
            failure = results[part.function].get("failure") or {}
            if failure.get("kind") in ("load", "tampered") or (failure.get("case") == "import"
                                                                and failure.get("kind") != "missing"):
                for rest in exercise.parts[exercise.parts.index(part) + 1:]:
                    results[rest.function] = dict(failed_result(exercise, rest, failure["kind"], failure["message"],
                                                                case="import", seed=seed,
                                                                traceback=failure.get("traceback")))
                break
    finally:
        session.stop()
    return results


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




def _cuda_initialized() -> bool:
    """Whether this process has opened CUDA (a forked grading child could not use the GPU then):
    torch's CUDA state, or the driver library loaded, as ``torch.cuda.is_available()`` does
    without setting torch's flag."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return True
    try:
        with open("/proc/self/maps") as maps:
            return any("libcuda.so" in line for line in maps)
    except OSError:
        return False


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
    from flashlab.grading.sandbox import become_subreaper

    seed = secrets.randbelow(2**31) if seed is None else int(seed)
    exercises = [get_exercise(name) for name in names]
    if not isinstance(jobs, int) or jobs < 1:
        raise ValueError(f"jobs={jobs!r} must be an int >= 1 (exercises graded at the same time)")
    _preload_references()
    become_subreaper()
    dont_write = sys.dont_write_bytecode  # restored after: the learner's session writes bytecode as before
    sys.dont_write_bytecode = True  # while grading, a new .pyc in the package is not ours (see grader_digest)
    try:
        return _grade(exercises, exercises_dir, solutions, seed, public_only, fn, time_limit_s, jobs)
    finally:
        sys.dont_write_bytecode = dont_write


def _grade(exercises, exercises_dir, solutions, seed, public_only, fn, time_limit_s, jobs) -> list:
    from concurrent.futures import ThreadPoolExecutor

    before = grader_digest()
    if fn is not None:
        if len(exercises) != 1:
            raise ValueError(f"fn= grades one exercise; got names={[e.name for e in exercises]}")
        exercise = exercises[0]
        functions = _functions_for(exercise, fn)
        if exercise.needs_triton and _cuda_initialized():
            raise RuntimeError(
                f"fn= grades function objects in a fork of this process, and this process has already used "
                f"the GPU: CUDA cannot start again in a forked process. Grade the exercise's file instead, "
                f"check(\"{exercise.name}\") (it reads exercises/{exercise.name}.py), or call check(..., fn=...) "
                f"in a fresh kernel before any cell touches the GPU.")
        sub = Exercise(exercise.name, exercise.title,
                       tuple(p for p in exercise.parts if p.function in functions), exercise.needs_triton)
        return _refuse_if_tampered(before, [(sub, grade_exercise(sub, None, seed, public_only, functions,
                                                                 time_limit_s))])
    folder = find_exercises_dir(exercises_dir, solutions)

    def one(exercise: Exercise) -> tuple:
        path = folder / f"{exercise.name}.py"
        if not path.is_file():
            return exercise, {p.function: failed_result(exercise, p, "missing", f"no file {path}", seed=seed)
                              for p in exercise.parts}
        real = path.resolve()
        root = _repo_root()
        answer = None if root is None else root / "solutions" / path.name
        if not real.is_relative_to(folder.resolve()):  # a link out of the folder: the answers, a classmate's, tests
            message = (f"{path.name} is a link to {real}, outside {folder}, which the grader does not grade: submit "
                       "the file itself")
        elif answer is not None and answer.is_file() and real != answer.resolve() and os.path.samefile(path, answer):
            message = f"{path.name} is a hard link to {answer}, which the grader does not grade: submit your own file"
        else:
            message = None
        if message is not None:
            return exercise, {p.function: failed_result(exercise, p, "load", message, case="import", seed=seed)
                              for p in exercise.parts}
        return exercise, grade_exercise(exercise, str(path), seed, public_only, time_limit_s=time_limit_s)

    with ThreadPoolExecutor(max_workers=jobs) as pool:  # each exercise runs in its own child process
        return _refuse_if_tampered(before, list(pool.map(one, exercises)))


def check(name: str, fn=None, *, exercises_dir=None, solutions: bool = False, hint: int | None = None, seed=None,
          public_only: bool = False, time_limit_s: float | None = None):
    """Grade one exercise and return a report (HTML in Jupyter, text with ``print``).

    name: the exercise id, e.g. "ex03_tiled_forward". fn: a function to grade instead of the file
    (matched to a part by its name), or a dict {part name: function}; graded in a fork of this
    process, so a Triton exercise's fn= is refused once this process has used the GPU. exercises_dir: the folder of
    the learner's modules (default: FLASHLAB_EXERCISES_DIR, else exercises/ above the current
    directory). hint: how many hint levels to show for a failing part (``check(name, hint=2)``
    shows hints 1 and 2, and the hint for the failing check if it has one; ``hint=0`` none).
    Default: the hint for the failing check where the check points at one (e.g. the step hint
    about empty states when two empty states fail to combine), else hint 1, and none under a
    mistake the grader names. ``report.next_hint()`` adds the next hint not yet shown. seed: the
    hidden cases' seed (default: fresh each run). public_only: skip hidden cases. time_limit_s: a
    lower time limit per case than the exercise's own.
    """
    from flashlab.grading.report import Report

    if hint is not None and (type(hint) is not int or hint < 0):
        raise ValueError(f"hint={hint!r} must be an int >= 0 (hint levels to show)")
    graded = grade([name], exercises_dir, solutions, seed, public_only, fn, time_limit_s)
    if fn is None and not solutions:
        _remember(name, exercises_dir, graded)
    return Report(graded, hint=hint)


def _remember(name: str, exercises_dir, graded: list) -> None:
    """A learner's check of their own exercise file counts in ``progress(fast=True)``
    (:func:`flashlab.progress.remember`); not the self-test (progress reads its answers), nor a check of the
    course's answers (solutions/)."""
    from flashlab import progress
    from flashlab.selftest import EXERCISE

    if name == EXERCISE:
        return
    try:
        folder = find_exercises_dir(exercises_dir, False)
    except (ValueError, OSError):
        return
    root = _repo_root()
    if root is not None and folder.resolve() == (root / "solutions").resolve():
        return
    progress.remember(folder, name, graded[0][1].values())
