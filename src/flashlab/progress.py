"""``flashlab progress``: where a learner stands, exercise by exercise and self-test by self-test.

Lists, in course order (notebook by notebook), every exercise and each notebook's self-test with
points earned / possible, then says what to do next: the first unfinished item, with its notebook
and the command that checks it.

Where the points come from (the output says which):
- exercises: a quick grade of the public cases only (``flashlab grade --public-only``); a part
  whose public cases pass counts as earned here, and only ``flashlab grade`` runs the hidden cases
  that decide the real score. Only the files that need it are graded: a file byte for byte the
  course's stub is "not started" without running it, and a file unchanged since its last graded
  run, with the same flashlab (:func:`grader_key`), keeps that run's result where it was done or not
  started (the public cases have a fixed seed; a failing exercise is graded again). Grading the rest costs about 0.1 s per NumPy exercise and 1.7 s per Triton or torch
  exercise (the child process imports torch), so a first run over all 15 solved exercises took
  about 10 s on a 2-core CPU machine, and a later run with nothing changed 0.3 s. Each graded run,
  and each ``check(name)`` of a learner's file in a notebook (:func:`remember`), is
  cached in the exercises folder (``.flashlab_progress.json``, with a digest of each file;
  ``flashlab grade`` never reads it). The cache is the learner's own file and can be edited: progress
  believes no more of it than a graded run could have written (:func:`_cached`: an entry of another
  form is ignored, points are those its status allows and never more than the exercise's, the
  course's untouched stub is "not started" whatever it says); it is advisory, and only ``flashlab
  grade`` scores. With ``fast=True`` (``--fast``) nothing is run: an
  exercise unchanged since the last graded run shows its cached result, any other is only read, to
  tell an untouched stub from an edited one, and shows "?" points.
- self-tests: the first answer to each question recorded by ``answer(...)`` in
  ``selftest_answers.json`` (:mod:`flashlab.selftest`: ``answer`` shows the right answer after any
  attempt, so later ones earn nothing), graded again here, so the file's own "correct" flags are
  not trusted. That file too is the learner's: a first answer edited in is counted like one given
  in the notebook, so the self-test points are advisory. A notebook's self-test is finished once
  every question has an answer.
- predictions (:func:`flashlab.selftest.predict`) are listed, never scored.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

# Used when the notebook sources are not there to read (an installed package): exercise -> notebook.
DEFAULT_NOTEBOOK_OF = {"ex01_naive": "01", "ex02_softmax": "02", "ex03_tiled_forward": "03",
                       "ex04_causal_tiles": "03", "ex05_traffic": "04", "ex06_triton_primer": "05",
                       "ex07_kernel_inner_loop": "06", "ex08_kernel_causal": "06", "ex09_backward_pieces": "07",
                       "ex10_tiled_backward": "07", "ex11_quiz": "09"}
CACHE_FILE = ".flashlab_progress.json"  # in the exercises folder: the last graded run, for --fast
_CHECK = re.compile(r"""check\(\s*["'](\w+)["']""")
DONE = ("done", "done (public cases)")


def _done(status: str) -> bool:
    """Finished: an exercise done, or a self-test with every question answered (right or not)."""
    return status.split(" (cached")[0] in DONE or status.startswith("answered")


@dataclass
class Item:
    """One line of the progress table."""

    notebook: str  # "03"
    kind: str  # "exercise" or "self-test"
    name: str  # exercise id, or "self-test 03"
    earned: float | None  # None: not graded (fast mode)
    possible: float
    status: str
    todo: str  # what to do for this item, with the command


def _notebook_files(folder: Path | None = None) -> dict:
    """{"03": "notebooks/03_tiled_attention.ipynb", ...} of the checkout, or {} when not in one. Where
    the exercises ``folder`` sits beside the learner's notebook copies (``work/exercises`` in the work
    area that ``make lab`` serves), the copy is named instead: "work/03_tiled_attention.ipynb"."""
    from flashlab.course import repo_root

    root = repo_root()
    if root is None:
        return {}
    files = {}
    for p in sorted((root / "notebooks" / "_src").glob("[0-9][0-9]_*.py")):
        copy = None if folder is None else Path(folder).resolve().parent / f"{p.stem}.ipynb"
        if copy is not None and copy.is_file():
            files[p.name[:2]] = _shown(copy)
        else:
            files[p.name[:2]] = f"notebooks/{p.stem}.ipynb"
    return files


def _shown(path: Path) -> str:
    """``path`` as the learner finds it: from the repository root when inside it ("work/exercises/
    ex01_naive.py"), else in full."""
    from flashlab.course import repo_root

    root, path = repo_root(), Path(path).resolve()
    return str(path.relative_to(root.resolve())) if root is not None and path.is_relative_to(root.resolve()) \
        else str(path)


def notebook_of_exercises() -> dict:
    """exercise id -> notebook ("03"), from the check("...") cells of the notebook sources."""
    from flashlab.course import repo_root

    found = dict(DEFAULT_NOTEBOOK_OF)
    root = repo_root()
    for path in sorted((root / "notebooks" / "_src").glob("[0-9][0-9]_*.py")) if root else []:
        for name in _CHECK.findall(path.read_text(encoding="utf-8")):
            found[name] = path.name[:2]
    return found


def _stub_state(path: Path, exercise) -> str:
    """"not started" when every part is still the stub (raises NotImplementedError or is None)."""
    if not path.is_file():
        return "missing"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except SyntaxError:
        return "edited (syntax error)"
    defs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    values = {t.id: n.value for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
              if isinstance(t, ast.Name)}
    for part in exercise.parts:
        node = defs.get(part.function)
        if node is not None:
            raises = [n for n in ast.walk(node) if isinstance(n, ast.Raise) and n.exc is not None
                      and "NotImplementedError" in ast.unparse(n.exc)]
            if not raises:
                return "edited (not graded)"
        elif part.function in values and not (isinstance(values[part.function], ast.Constant)
                                               and values[part.function].value is None):
            return "edited (not graded)"
    return "not started"


def _digest(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path.is_file() else None


def grader_key() -> str:
    """A digest of flashlab's own sources (the grader, its cases and references): a cached grade
    is reused only while it is unchanged (``git pull`` of a course update grades again)."""
    import flashlab

    package = Path(flashlab.__file__).resolve().parent
    h = hashlib.sha256(sys.version.encode())
    for path in sorted(package.rglob("*.py")):
        h.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _is_course_stub(path: Path, name: str) -> bool:
    """Whether ``path`` is byte for byte the course's stub ``exercises/<name>.py``: grading it
    could only say "not attempted" for every part."""
    from flashlab.course import repo_root

    root = repo_root()
    stub = None if root is None else root / "exercises" / f"{name}.py"
    try:
        return stub is not None and stub.is_file() and path.read_bytes() == stub.read_bytes()
    except OSError:
        return False


def _load_cache(folder: Path) -> dict:
    try:
        cache = json.loads((folder / CACHE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    return cache if isinstance(cache, dict) else {}


_STAMP = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC")
_IN_PROGRESS = re.compile(r"in progress \((\w+(?:, \w+)*) to do\)")


def _cached(hit, exercise) -> dict | None:
    """A cache entry as far as progress believes it, or None. The cache is the learner's file (a
    forged entry showed 999/3 done): only what a graded run writes is read (a digest, a time stamp,
    a status of the forms progress gives, a finite number of points), and the points are the ones the
    status allows: all for done, none for not started, in progress at most those of the parts not
    named as to do."""
    if not isinstance(hit, dict) or not isinstance(hit.get("digest"), str) or not isinstance(hit.get("status"), str):
        return None
    status, earned, stamp = hit["status"], hit.get("earned"), hit.get("time")
    if type(earned) not in (int, float) or not math.isfinite(earned) or not _STAMP.fullmatch(str(stamp)):
        return None
    if status in DONE:
        earned = exercise.points
    elif status == "not started":
        earned = 0
    elif (todo := _IN_PROGRESS.fullmatch(status)) and set(todo[1].split(", ")) <= {p.function for p in exercise.parts}:
        allowed = sum(p.points for p in exercise.parts if p.function not in todo[1].split(", "))
        earned = min(max(earned, 0), allowed)
    else:
        return None
    return dict(hit, earned=earned)


def _standing(results) -> tuple:
    """(points earned, status) of one exercise's graded parts, as the progress table words them."""
    results = list(results)
    earned = sum(r["points"] for r in results if r["status"] in ("passed", "public passed"))
    statuses = {r["status"] for r in results}
    if statuses <= {"passed"}:
        return earned, "done"
    if statuses <= {"passed", "public passed"}:
        return earned, "done (public cases)"
    if statuses == {"not attempted"}:
        return earned, "not started"
    failing = [r["function"] for r in results if r["status"] not in ("passed", "public passed")]
    return earned, f"in progress ({', '.join(failing)} to do)"


def remember(folder, name: str, results) -> None:
    """Keep one exercise's graded run (``check(name)`` in a notebook, every part of it graded from the file in
    ``folder``) in the progress cache, as a progress run would: ``progress(fast=True)`` then shows it while the
    file is unchanged. A folder that cannot be written keeps nothing."""
    folder = Path(folder)
    path = folder / f"{name}.py"
    earned, status = _standing(results)
    cache = _load_cache(folder)
    cache[name] = dict(digest=_digest(path), grader=grader_key(), earned=earned, status=status,
                       time=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    try:
        (folder / CACHE_FILE).write_text(json.dumps(cache, indent=1), encoding="utf-8")
    except OSError:
        pass


def _save_cache(folder: Path, items: list[Item], key: str, times: dict) -> None:
    """Remember each graded exercise's result with its file's digest and flashlab's ``key``, for
    --fast runs and for the next graded run. ``times``: when each result was graded (default now)."""
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    cache = {i.name: dict(digest=_digest(folder / f"{i.name}.py"), grader=key, earned=i.earned, status=i.status,
                          time=times.get(i.name, stamp)) for i in items}
    try:
        (folder / CACHE_FILE).write_text(json.dumps(cache, indent=1), encoding="utf-8")
    except OSError:
        pass  # a read-only folder: progress still works, --fast just has nothing cached


def _exercise_items(folder: Path, fast: bool, notebooks: dict, files: dict) -> list[Item]:
    from flashlab.grading import EXERCISES, grade
    from flashlab.selftest import EXERCISE

    names = [n for n in EXERCISES if n != EXERCISE]
    raw = _load_cache(folder)
    cache = {name: hit for name in names if (hit := _cached(raw.get(name), EXERCISES[name])) is not None}
    key = None if fast else grader_key()
    kept, stubs = {}, set()  # not graded again: the course's stub; unchanged since their last graded run
    for name in names:
        hit, path = cache.get(name, {}), folder / f"{name}.py"
        if _is_course_stub(path, name):  # whatever the cache says of it
            stubs.add(name)
        elif (not fast and hit.get("grader") == key and hit.get("digest") == _digest(path)
                and hit.get("status") in DONE + ("not started",)):  # a failure (a time limit?) runs again
            kept[name] = hit
    todo_names = [n for n in names if n not in kept and n not in stubs]
    graded = {} if fast or not todo_names else {
        e.name: results for e, results in grade(todo_names, folder, public_only=True, seed=0, jobs=2)}
    items = []
    for name in names:
        exercise = EXERCISES[name]
        nb = notebooks.get(name, "??")
        where = f"notebook {nb} ({files[nb]})" if nb in files else f"notebook {nb}"
        todo = (f"{where}: complete {_shown(folder / f'{name}.py')}, then check(\"{name}\") in the notebook "
                f"or `flashlab grade {name}`")
        if fast and name in stubs:
            items.append(Item(nb, "exercise", name, 0, exercise.points, "not started", todo))
            continue
        if fast:
            hit = cache.get(name, {})
            if hit.get("digest") and hit["digest"] == _digest(folder / f"{name}.py"):
                items.append(Item(nb, "exercise", name, hit["earned"], exercise.points,
                                  f"{hit['status']} (cached {hit['time']})", todo))
            else:
                items.append(Item(nb, "exercise", name, None, exercise.points,
                                  _stub_state(folder / f"{name}.py", exercise), todo))
            continue
        if name in kept:
            items.append(Item(nb, "exercise", name, kept[name]["earned"], exercise.points, kept[name]["status"],
                              todo))
            continue
        if name in stubs:
            items.append(Item(nb, "exercise", name, 0, exercise.points, "not started", todo))
            continue
        earned, status = _standing(graded[name].values())
        items.append(Item(nb, "exercise", name, earned, exercise.points, status, todo))
    if not fast:
        _save_cache(folder, items, key, {name: hit["time"] for name, hit in kept.items() if "time" in hit})
    return items


def _selftest_items(record: dict, files: dict) -> list[Item]:
    from flashlab.selftest import POINTS, QUESTIONS, is_right, scored_answer

    items = []
    for nb in sorted({q.notebook for q in QUESTIONS}):
        questions = [q for q in QUESTIONS if q.notebook == nb]
        right, wrong, open_ = [], [], []
        for q in questions:
            entry = record["answers"].get(q.qid)
            first = scored_answer(entry) if isinstance(entry, dict) else None
            if first is None:
                open_.append(q.qid)
            else:
                (right if _safe_is_right(is_right, q, first) else wrong).append(q.qid)
        wrong_first = f"{len(wrong)} wrong at the first answer ({', '.join(wrong)})" if wrong else ""
        if len(right) == len(questions):
            status = "done"
        elif not right and not wrong:
            status = "not started"
        elif not open_:
            status = f"answered, {wrong_first}"  # finished: a later answer earns nothing
        else:
            status = ", ".join(s for s in (f"{len(open_)} unanswered", wrong_first) if s)
        first = open_[:1] or [questions[0].qid]
        where = f"notebook {nb} ({files[nb]})" if nb in files else f"notebook {nb}"
        todo = f"{where}, self-test at the end: answer(\"{first[0]}\", ...) under the question"
        items.append(Item(nb, "self-test", f"self-test {nb}", len(right) * POINTS, len(questions) * POINTS,
                          status, todo))
    return items


def _safe_is_right(is_right, q, value) -> bool:
    try:
        return is_right(q, value)
    except Exception:  # noqa: BLE001  a hand-edited answers file may hold anything
        return False


def _percent(entry) -> str:
    """A recorded prediction's relative error as a percentage ("?" where a hand-edited file holds no number)."""
    error = entry.get("rel_error", 0) if isinstance(entry, dict) else None
    return f"{error:.0%}" if type(error) in (int, float) and math.isfinite(error) else "?"


@dataclass
class Progress:
    """The progress table; ``str()`` or the notebook shows it as text."""

    folder: str
    graded: bool
    items: list
    predictions: dict

    @property
    def next(self) -> Item | None:
        """The first unfinished item in course order (exercises of a notebook before its self-test)."""
        return next((i for i in self.items if not _done(i.status)), None)

    def totals(self) -> dict:
        out = {}
        for kind in ("exercise", "self-test"):
            items = [i for i in self.items if i.kind == kind]
            earned = None if any(i.earned is None for i in items) else sum(i.earned for i in items)
            out[kind] = (earned, sum(i.possible for i in items))
        return out

    def __str__(self) -> str:
        from flashlab.selftest_bank import PREDICTIONS

        width = max([24] + [len(i.name) for i in self.items])  # ex12_triton_online_softmax: 26
        how = ("exercises: public cases graded (files unchanged since their last graded run keep its result; "
               "hidden cases: `flashlab grade`)" if self.graded else
               "exercises: not graded now (--fast): the last graded run's results where a file is unchanged, "
               "else only read, to tell a stub from an edited file")
        lines = [f"flashlab progress: {self.folder}", how,
                 "self-tests: the first answer to each question, recorded by answer(...) in selftest_answers.json, "
                 "graded again now (answer shows the right one after any attempt, so later ones earn nothing)", "",
                 f"{'nb':<3} {'item':<{width}} {'points':>10}  status"]
        for i in self.items:
            points = f"{'?' if i.earned is None else f'{i.earned:g}'}/{i.possible:g}"
            lines.append(f"{i.notebook:<3} {i.name:<{width}} {points:>10}  {i.status}")
        totals = self.totals()
        lines.append("")
        for kind, label in (("exercise", "exercises"), ("self-test", "self-tests")):
            earned, possible = totals[kind]
            lines.append(f"{label + ':':<12} {'?' if earned is None else f'{earned:g}'}/{possible:g} points")
        made = [k for k in self.predictions if k in {p.key for p in PREDICTIONS}]
        lines.append(f"{'predictions:':<12} {len(made)} of {len(PREDICTIONS)} made (not scored)"
                     + "".join(f"; {k}: {_percent(self.predictions[k])} off" for k in made))
        nxt = self.next
        lines += ["", "next: " + (f"{nxt.name}, {nxt.todo}" if nxt else "everything is done. Well done.")]
        from flashlab.course import wrap_prose

        return wrap_prose("\n".join(lines))

    __repr__ = __str__

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def to_dict(self) -> dict:
        nxt = self.next
        return dict(folder=self.folder, graded=self.graded, items=[asdict(i) for i in self.items],
                    totals={k: list(v) for k, v in self.totals().items()}, predictions=self.predictions,
                    next=None if nxt is None else asdict(nxt))


def progress(exercises_dir=None, fast: bool = False) -> Progress:
    """The learner's progress (see the module docstring for where the points come from).

    exercises_dir: the learner's folder (default: flashlab.grading.find_exercises_dir()).
    fast: do not grade the exercises (no child processes); read them only.
    """
    from flashlab.grading import find_exercises_dir
    from flashlab.selftest import recorded

    folder = find_exercises_dir(exercises_dir)
    record = recorded(folder)
    files = _notebook_files(folder)
    notebooks = notebook_of_exercises()
    items = _exercise_items(folder, fast, notebooks, files) + _selftest_items(record, files)
    order = {"exercise": 0, "self-test": 1}
    items.sort(key=lambda i: (i.notebook, order[i.kind]))  # stable: exercises keep the registry's order
    return Progress(str(folder), not fast, items, record["predictions"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="flashlab progress", description=(
        "Exercises and self-tests with points earned/possible, and what to do next. Exercises are graded "
        "on their public cases only, those changed since the last run; self-tests come from the answers recorded in the notebooks."))
    parser.add_argument("--exercises-dir", metavar="DIR", help="the folder of your exercises (default: found "
                        "as `flashlab grade` finds it)")
    parser.add_argument("--fast", action="store_true", help="do not grade the exercises: cached results of "
                        "unchanged files, else only tell stubs from edited files")
    parser.add_argument("--json", action="store_true", help="print the table as JSON")
    args = parser.parse_args(argv)
    try:
        result = progress(args.exercises_dir, fast=args.fast)
    except ValueError as exc:
        print(f"flashlab progress: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result.to_dict(), indent=1) if args.json else result)
    return 0
