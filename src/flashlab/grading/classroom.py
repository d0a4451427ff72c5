"""Grading a class: an instructor's test pack, and a batch of submissions to one CSV file.

An instructor's test pack is a folder (``instructor/`` in the repository, left out of the student
release) holding ``pack.py`` with two optional dicts:

* ``CASES = {exercise id: {part function: make_cases}}``, ``make_cases(rng) -> [Case, ...]``: extra
  hidden cases, graded after the part's own and against the part's own reference;
* ``WEIGHTS = {exercise id: {part function: points}}``: the points each part is worth.

:func:`using_pack` applies a pack to the registry for the duration of a grading run (in the
grading process only; the learner's process never sees the pack). :func:`grade_batch` grades one
folder per student, all with the same hidden seed, and :func:`write_csv` writes one row per
student: ``flashlab grade --batch SUBMISSIONS --csv scores.csv [--tests instructor]``.
"""
from __future__ import annotations

import contextlib
import csv
import dataclasses
import importlib.util
import sys
import time
from pathlib import Path

from flashlab.grading.registry import EXERCISES
from flashlab.grading.spec import Exercise


def load_pack(folder) -> dict[str, Exercise]:
    """The exercises a test pack changes, as new Exercise objects (the registry is not touched)."""
    path = Path(folder).expanduser() / "pack.py"
    if not path.is_file():
        raise ValueError(f"tests={str(folder)!r} has no pack.py; expected a folder holding pack.py with CASES "
                         "and/or WEIGHTS")
    spec = importlib.util.spec_from_file_location("flashlab_instructor_pack", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    cases, weights = getattr(module, "CASES", {}), getattr(module, "WEIGHTS", {})
    changed = {}
    for table, what in ((cases, "CASES"), (weights, "WEIGHTS")):
        for name, parts in table.items():
            exercise = changed.get(name) or EXERCISES.get(name)
            if exercise is None:
                raise ValueError(f"{path} {what}: {name!r} is not an exercise; expected one of {sorted(EXERCISES)}")
            known = {p.function for p in exercise.parts}
            unknown = sorted(set(parts) - known)
            if unknown:
                raise ValueError(f"{path} {what}[{name!r}]: {unknown} are not parts of {name}; expected some of "
                                 f"{sorted(known)}")
            new_parts = []
            for part in exercise.parts:
                if part.function in parts and what == "CASES":
                    part = dataclasses.replace(part, hidden=_extended(part.hidden, parts[part.function]))
                elif part.function in parts:
                    points = parts[part.function]
                    if isinstance(points, bool) or not isinstance(points, (int, float)) or points < 0:
                        raise ValueError(f"{path} WEIGHTS[{name!r}][{part.function!r}]={points!r} must be a "
                                         "number >= 0")
                    part = dataclasses.replace(part, points=points)
                new_parts.append(part)
            changed[name] = dataclasses.replace(exercise, parts=tuple(new_parts))
    return changed


PACK_MARK = "[instructor's test pack]"  # ends the label of every case a pack adds (reports withhold their inputs)


def _extended(hidden, extra):
    def cases(rng):
        return list(hidden(rng)) + [dataclasses.replace(c, label=f"{c.label} {PACK_MARK}") for c in extra(rng)]

    return cases


@contextlib.contextmanager
def using_pack(folder):
    """Grade with a test pack's cases and weights (``folder=None``: the course's own)."""
    if folder is None:
        yield {}
        return
    changed = load_pack(folder)
    saved = {name: EXERCISES[name] for name in changed}
    EXERCISES.update(changed)
    PACK_FOLDER[0] = str(Path(folder).expanduser())
    try:
        yield changed
    finally:
        EXERCISES.update(saved)
        PACK_FOLDER[0] = None


PACK_FOLDER: list = [None]  # the pack in use, which the learner's process may not read (checks.hidden_paths)
BATCH_FOLDERS: list = []  # in --batch, the other students' folders, which the learner's process may not read


def students(submissions) -> list[Path]:
    """One folder per student, named by the student's id, in name order (:func:`not_students` says
    what else the folder holds)."""
    root = Path(submissions).expanduser()
    if not root.is_dir():
        raise ValueError(f"batch={str(submissions)!r} is not a directory; expected one folder per student")
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not _not_a_student(p.name))
    if not folders:
        raise ValueError(f"batch={str(submissions)!r} holds no student folders")
    return folders


def _not_a_student(name: str) -> bool:
    return name.startswith((".", "__"))  # hidden folders; an archive's metadata (__MACOSX)


def not_students(submissions) -> list[str]:
    """What the submissions folder holds besides the student folders, each with why it is not graded."""
    out = []
    for p in sorted(Path(submissions).expanduser().iterdir()):
        if p.name.startswith(".") and not p.is_dir():
            continue  # .DS_Store and the like
        if not p.is_dir():
            out.append(f"{p.name} (a file, not a folder: a submission is one folder per student; unpack archives "
                       "into a folder of their own)")
        elif _not_a_student(p.name):
            out.append(f"{p.name} (a hidden or metadata folder, such as an archive's __MACOSX)")
    return out


def _linked_folder(folder: Path, names: list[str], seed: int) -> list:
    """Every exercise of a student folder that is a link (to the answers, to another student's folder) not
    graded, as a failed load."""
    from flashlab.grading.checks import failed_result
    from flashlab.grading.registry import get_exercise

    message = f"the folder {folder.name} is a link to {folder.resolve()}, which the grader does not grade: submit " \
              "the files themselves"
    return [(e, {p.function: failed_result(e, p, "load", message, case="import", seed=seed) for p in e.parts})
            for e in (get_exercise(name) for name in names)]


def grade_batch(submissions, names: list[str], seed: int, jobs: int = 2, public_only: bool = False,
                progress=None) -> list[tuple[str, list]]:
    """[(student id, graded)] for every student folder; ``progress(line)`` after each (default stderr)."""
    from flashlab.grading.checks import grade
    from flashlab.grading.report import Report

    progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    folders, out = students(submissions), []
    for entry in not_students(submissions):
        progress(f"not graded: {entry}")
    for i, folder in enumerate(folders, 1):
        start = time.perf_counter()
        BATCH_FOLDERS[:] = [str(f) for f in folders if f != folder]  # what this student's code may not read
        try:
            graded = (_linked_folder(folder, names, seed) if folder.is_symlink() else
                      grade(names, exercises_dir=folder, seed=seed, public_only=public_only, jobs=jobs))
        finally:
            BATCH_FOLDERS.clear()
        report = Report(graded)
        progress(f"[{i}/{len(folders)}] {folder.name}: {report.score:g}/{report.total:g} points "
                 f"({time.perf_counter() - start:.1f} s)")
        out.append((folder.name, graded))
    return out


def why_points_were_lost(graded: list) -> str:
    """One line per student: for each exercise that lost points, the first reason the grader gave (a missing
    file, an import error, the first failed check), clipped; empty when nothing was lost."""
    reasons = []
    for exercise, results in graded:
        lost = [r for r in results.values() if r.get("failure") and r["earned"] < r.get("points", r["earned"] + 1)]
        if lost:
            message = " ".join(str(lost[0]["failure"].get("message", "")).split())
            reasons.append(f"{exercise.name}: {message[:160] + ('...' if len(message) > 160 else '')}")
    return " | ".join(reasons)


def public_checks(results: dict) -> tuple[int, int]:
    """(public checks passed, public checks) over the parts of one exercise."""
    return (sum(r["public"][0] for r in results.values()), sum(r["public"][1] for r in results.values()))


def write_csv(path, batch: list[tuple[str, list]], seed: int, pack=None, public_only: bool = False) -> None:
    """One row per student: id, points per exercise, total, possible, all checks passed, the seed, the test
    pack used (empty: none; regrading needs the same seed and pack), and why points were lost. With
    ``public_only`` (no points are given) each exercise's cell is its public checks passed, "3/4"."""
    from flashlab.grading.report import Report

    names = [exercise.name for exercise, _ in batch[0][1]] if batch else []
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["student", *names, "total", "possible", "passed", "seed", "pack", "why_points_were_lost"])
        for student, graded in batch:
            report = Report(graded)
            if public_only:
                cells = {e.name: "{}/{}".format(*public_checks(rs)) for e, rs in graded}
            else:
                cells = {e.name: f"{sum(r['earned'] for r in rs.values()):g}" for e, rs in graded}
            writer.writerow([student, *(cells[n] for n in names), f"{report.score:g}", f"{report.total:g}",
                             report.passed, "public cases only" if public_only else seed,
                             "" if pack is None else str(Path(pack).expanduser().resolve()),
                             why_points_were_lost(graded)])
