"""Write the answer key of the notebooks' self-tests and the quiz: ``python instructor/answer_key.py``.

It rewrites ``instructor/answer_key.md`` (``--print``: to standard output instead). This script lives in
the instructor pack, which a student release leaves out. The answers themselves ship with the course as
hashes of the right letter: this script recovers them by hashing every choice, which anyone can do, so
they are hidden from a glance and not secret; weigh the quiz and self-tests low in a graded class
(``pack.py``'s WEIGHTS).
"""
from __future__ import annotations

import sys
from pathlib import Path

from flashlab.grading.registry import EXERCISES

KEY = Path(__file__).resolve().parent / "answer_key.md"


def answer_key() -> str:
    """Markdown: the right answer and the explanation of every self-test question and quiz item.

    The letters are recovered from their stored hashes by trying each choice, which is exactly
    why the course says the answers are hidden from a glance and not secret.
    """
    from flashlab.grading.spec import answer_hash
    from flashlab.selftest_bank import QUESTIONS

    lines = ["# Answer key: the notebooks' self-tests and the quiz", "",
             "Written by `python instructor/answer_key.py` (instructor pack only; numbers computed by "
             "flashlab).", ""]
    for q in QUESTIONS:
        if q.compute is not None:
            answer = f"{q.compute():.6g}{' ' + q.unit if q.unit else ''} (within 1%; computed by `{q.source}`)"
        else:
            letters = "abcdefgh"[: len(q.choices)]
            right = [c for c in letters if answer_hash(q.function, c) == q.stored]
            answer = ", ".join(f"({c}) {q.choices[letters.index(c)]}" for c in right) or "(no choice matches)"
        lines += [f"**{q.qid}** {q.prompt}", "", f"- answer: {answer}", f"- why: {q.why()}", ""]
    quiz = EXERCISES["ex11_quiz"]
    lines += ["## Exercise 11 (quiz)", ""]
    for part in quiz.parts:
        stored = part.reference()
        if part.kind == "choice":
            right = [c for c in "abcd" if answer_hash(part.function, c) == stored]
            lines.append(f"- {part.function} ({part.title}): {', '.join(right) or '(no letter matches)'}")
        else:
            lines.append(f"- {part.function} ({part.title}): {stored:.6g} (within 1%)")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--print"]:
        print(answer_key(), end="")
    else:
        KEY.write_text(answer_key(), encoding="utf-8")
        print(f"wrote {KEY}")
