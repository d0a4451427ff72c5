"""Graded self-tests and "predict, then check" cells, for the notebooks and the grader.

In a notebook, under a question::

    from flashlab.selftest import answer, predict
    answer("03.2", "c")                   # grades at once, shows right/wrong and the explanation
    predict("fa1_vs_fa2_bytes", 2.0)      # your guess; the course's value, both and the relative error

Both record into ``selftest_answers.json`` in the learner's exercises folder
(:func:`flashlab.grading.find_exercises_dir`), which ``exercises/selftest.py`` reads back so that
``flashlab grade selftest`` grades the same answers, and ``flashlab progress`` lists them.
Multiple choice takes one letter ("b", "B", "(b)", "b."); numbers must be within 1% of the value
flashlab computes. Nothing here needs a GPU.

The score counts each question's first answer: :func:`answer` shows the right answer and why after
every attempt, so a later attempt is for understanding and earns nothing. The record keeps the
first answer (``first_answer``, ``first_correct``) beside the latest (``answer``, ``correct``).

The right letters are stored hashed (:func:`flashlab.grading.spec.answer_hash`), not secret: anyone
can hash the few letters and compare. That is why each question is worth a quarter point (POINTS),
where an exercise part is worth 1-4 points.
The questions themselves are data, in :mod:`flashlab.selftest_bank`.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from flashlab.selftest_bank import BY_ID, PREDICTIONS_BY_KEY, QUESTIONS, Prediction, Question

ANSWERS_FILE = "selftest_answers.json"
EXERCISE = "selftest"  # the grader's exercise id, and exercises/selftest.py
POINTS = 0.25  # per question: a quarter of the smallest exercise part (answers cannot be hidden offline)
_LETTER = re.compile(r"^\(?\s*([a-zA-Z])\s*[).]?$")

__all__ = ["ANSWERS_FILE", "EXERCISE", "QUESTIONS", "answer", "exercises", "parse_letter", "predict",
           "questions_of", "recorded"]


# ----------------------------------------------------------------------------- the grader's view
def exercises() -> dict:
    """{"selftest": Exercise} for the grader's registry: one part per question, worth POINTS."""
    from flashlab.grading.spec import Case, Exercise, Part

    def part(q: Question) -> Part:
        reference = (lambda: q.stored) if q.kind == "choice" else q.compute
        hint = f'Notebook {q.notebook}, self-test: answer("{q.qid}", ...) grades it and shows why.'
        why = f'your first answer to question {q.qid}, recorded by answer("{q.qid}", ...) in notebook {q.notebook}'
        return Part(q.function, f"{q.qid} {q.prompt[:48]}", POINTS, reference,
                    lambda rng: [Case(f"question {q.qid}", {}, why=why)], kind=q.kind, hints=(hint,))

    return {EXERCISE: Exercise(EXERCISE, "self-test questions of notebooks 01-10 (first answers)",
                               tuple(part(q) for q in QUESTIONS))}


def questions_of(notebook: str) -> list[Question]:
    """The questions of one notebook ("03"), in order."""
    return [q for q in QUESTIONS if q.notebook == notebook]


def question(qid: str) -> Question:
    if not isinstance(qid, str) or qid not in BY_ID:
        raise ValueError(f"question={qid!r} is not a self-test question; expected one of {sorted(BY_ID)}")
    return BY_ID[qid]


# ----------------------------------------------------------------------------- reading answers
def parse_letter(value, letters: str = "abcd") -> str:
    """The one letter in "b", "B", "(b)", "b." (lower case); ValueError for anything else."""
    match = _LETTER.match(value.strip()) if isinstance(value, str) else None
    if match is None or match.group(1).lower() not in letters:
        raise ValueError(f"answer={value!r}: answer with one letter, {letters[0]} to {letters[-1]} "
                         f"(e.g. \"{letters[1]}\")")
    return match.group(1).lower()


def _parse_number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{what}={value!r}: answer with a number, e.g. 12.5")
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{what}={value!r}: answer with a number, e.g. 12.5") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"{what}={value!r}: answer with a finite number")
    return number


def is_right(q: Question, value) -> bool:
    """Grade a parsed answer the way the grader does (flashlab.grading.checks.compare)."""
    from flashlab.grading.checks import compare

    part = exercises()[EXERCISE].parts[QUESTIONS.index(q)]
    return compare(part, value, part.reference()) is None


def right_letter(q: Question) -> str:
    """The right letter of a multiple-choice question, found by hashing each letter (hashes hide nothing)."""
    from flashlab.grading.spec import answer_hash

    return next(letter for letter in q.letters if answer_hash(q.function, letter) == q.stored)


# ----------------------------------------------------------------------------- the record
def answers_path(exercises_dir=None) -> Path:
    from flashlab.grading import find_exercises_dir

    return find_exercises_dir(exercises_dir) / ANSWERS_FILE


def recorded(exercises_dir=None) -> dict:
    """{"answers": {qid: {...}}, "predictions": {key: {...}}} from the learner's folder (empty if none)."""
    path = answers_path(exercises_dir)
    data = {}
    if path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path} is not valid JSON ({exc}); delete it to start the self-tests afresh") from None
    return {"answers": dict(data.get("answers", {})), "predictions": dict(data.get("predictions", {}))}


def _save(exercises_dir, section: str, key: str, entry: dict) -> Path:
    path = answers_path(exercises_dir)
    data = recorded(exercises_dir)
    data[section][key] = entry
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".selftest_", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)  # never a half-written file
    return path


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass(frozen=True)
class Verdict:
    """What :func:`answer` or :func:`predict` found; shown as text in a notebook."""

    key: str
    text: str
    correct: bool | None = None  # None: nothing answered yet
    recorded_in: str | None = None

    def __repr__(self) -> str:
        return self.text

    def _repr_pretty_(self, p, cycle) -> None:  # IPython: the text, not a dataclass repr
        p.text(self.text)


def _format(value: float) -> str:
    return f"{value:,.4g}" if abs(value) < 1e6 else f"{value:,.0f}"


def describe(q: Question) -> str:
    """The question as text: prompt, then the choices (a) ... or the unit of the number asked for."""
    lines = [f"{q.qid}  {q.prompt}"]
    lines += [f"  ({letter}) {choice}" for letter, choice in zip(q.letters, q.choices)]
    if q.kind == "number":
        lines.append(f"  (a number{', in ' + q.unit if q.unit and q.unit != 'x' else ''}; within 1%)")
    return "\n".join(lines)


def answer(qid: str, value, *, exercises_dir=None) -> Verdict:
    """Grade the answer ``value`` to self-test question ``qid`` ("03.2") and record it.

    Multiple choice: one letter. Numeric: a number within 1% of flashlab's value. ``value=None``
    shows the question and records nothing. The right answer and the explanation are shown after
    every attempt, so only the first answer counts for points (:func:`scored_answer`).
    """
    q = question(qid)
    if value is None:
        return Verdict(qid, describe(q) + f'\nNot answered yet: replace None with your '
                       f'{"letter" if q.kind == "choice" else "number"}.')
    given = parse_letter(value, q.letters) if q.kind == "choice" else _parse_number(value, "answer")
    correct = is_right(q, given)
    previous = recorded(exercises_dir)["answers"].get(qid, {})
    attempts = int(previous.get("attempts", 0)) + 1
    first = scored_answer(previous) if previous else given
    first_correct = previous.get("first_correct", correct) if previous else correct
    path = _save(exercises_dir, "answers", qid, dict(answer=given, correct=correct, attempts=attempts,
                                                     first_answer=first, first_correct=first_correct,
                                                     time=_now()))
    if q.kind == "choice":
        solution = f"({right_letter(q)}) {q.choices[q.letters.index(right_letter(q))]}"
    else:
        solution = f"{_format(q.compute())} {q.unit}".rstrip() + f"  (computed by {q.source})"
    if attempts == 1:
        head = ("Right: a quarter point." if correct else
                f"Not right (you answered {given!r}): no point, and this first answer is the one scored.")
    else:
        points = "it earned a quarter point" if first_correct else "it earned no point"
        head = (f"{'Right' if correct else f'Not right (you answered {given!r})'}, attempt {attempts}: "
                f"the score keeps your first answer, {first!r}; {points}.")
    text = f"{qid}: {head}\nAnswer: {solution}\nWhy: {q.why()}\nRecorded in {path}"
    return Verdict(qid, text, correct, str(path))


def scored_answer(entry: dict):
    """The answer of a recorded entry that the score counts: the first one (``first_answer``; a
    record written before first answers were kept has only ``answer``)."""
    return entry.get("first_answer", entry.get("answer"))


def predict(key: str, value, *, exercises_dir=None) -> Verdict:
    """Compare your guess ``value`` with the number the course computes, and record both.

    Shows your value, the actual one (from flashlab or a committed results file), the relative
    error and whether it is within the prediction's tolerance. ``value=None`` shows the question.
    """
    if not isinstance(key, str) or key not in PREDICTIONS_BY_KEY:
        raise ValueError(f"key={key!r} is not a prediction; expected one of {sorted(PREDICTIONS_BY_KEY)}")
    p: Prediction = PREDICTIONS_BY_KEY[key]
    unit = f" {p.unit}" if p.unit else ""
    if value is None:
        kind = "a ratio" if p.unit == "x" else (p.unit or "a number")
        return Verdict(key, f"Predict: {p.prompt}.\nReplace None with your number ({kind}); "
                       f"within {p.tolerance:.0%} counts.")
    guess = _parse_number(value, "value")
    actual = float(p.actual())
    rel = abs(guess - actual) / abs(actual)
    within = rel <= p.tolerance
    path = _save(exercises_dir, "predictions", key, dict(predicted=guess, actual=actual, rel_error=rel,
                                                         within=within, time=_now()))
    text = (f"{p.prompt}\n  your prediction {_format(guess)}{unit}\n  actual          {_format(actual)}{unit}"
            f"   ({p.source})\n  relative error  {rel:.1%}: "
            f"{'within' if within else 'outside'} the {p.tolerance:.0%} tolerance"
            + ("" if within else f"\nWhy it is {_format(actual)}{unit}: the cells after this one compute it and "
               f"explain it (read them before changing your model)")
            + f"\nRecorded in {path}")
    return Verdict(key, text, within, str(path))
