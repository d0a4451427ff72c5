"""The grading report: text in a terminal, HTML in Jupyter, a dict for ``--json``.

Counts are honest: a part whose public checks pass but whose hidden checks have not run is not
"passed", and checks after the first failure are "not yet run", not passed. Hints are shown
for failing parts up to the report's hint level; :meth:`Report.next_hint` raises it by one.
"""
from __future__ import annotations

import html

MARKS = {"passed": "PASS", "failed": "FAIL", "not attempted": "TODO", "public passed": "PART"}


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def counts_line(r: dict) -> str:
    """e.g. '3 of 3 public checks passed; hidden: 1 of 6 passed, 4 not yet run (seed 7)'."""
    (pp, pt), (hp, ht) = r["public"], r["hidden"]
    if r["status"] == "not attempted":
        if r.get("kind") in ("choice", "number"):
            return "not attempted yet (no answer given)"
        return "not attempted yet (the stub still raises NotImplementedError)"
    failure = r.get("failure") or {}
    group = failure.get("group")
    if pt == 0 and not ht:
        return "not graded (function missing)" if failure.get("kind") == "missing" else "not graded"
    parts = [f"{pp} of {_plural(pt, 'public check')} passed"]
    if group == "public":
        rest = pt - pp - 1
        parts[0] += f", check {pp + 1} failed" + (f", {rest} not yet run" if rest else "")
        if ht:
            parts.append(f"{_plural(ht, 'hidden check')} not yet run")
    elif ht:
        hidden = f"hidden: {hp} of {ht} passed"
        if group == "hidden":
            rest = ht - hp - 1
            hidden += f", check {hp + 1} failed" + (f", {rest} not yet run" if rest else "")
        parts.append(hidden + f" (seed {r['seed']})")
    elif r["status"] == "public passed":
        parts.append("hidden checks not yet run")
    return "; ".join(parts)


class Report:
    """Results of grading one or more exercises (see :func:`flashlab.grading.check`)."""

    def __init__(self, graded: list, hint: int = 1):
        self.graded = graded  # [(Exercise, {part: result dict})]
        self.hint = hint

    # -- numbers
    @property
    def results(self) -> list[dict]:
        return [r for _, results in self.graded for r in results.values()]

    @property
    def score(self) -> int:
        return sum(r["earned"] for r in self.results)

    @property
    def total(self) -> int:
        return sum(r["points"] for r in self.results)

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(r["status"] == "passed" for r in self.results)

    def next_hint(self) -> "Report":
        """Show one more hint level for the failing parts (returns the report, for display)."""
        self.hint += 1
        return self

    def to_dict(self) -> dict:
        return dict(score=self.score, total=self.total, passed=self.passed, hint=self.hint,
                    exercises=[dict(name=e.name, title=e.title, score=sum(r["earned"] for r in rs.values()),
                                    total=e.points, parts=list(rs.values())) for e, rs in self.graded])

    # -- text
    def _hints(self, r: dict) -> list[str]:
        if r["status"] != "failed" or not r["hints"]:
            return []
        shown = r["hints"][: self.hint]
        lines = [f"hint {i + 1}: {h}" for i, h in enumerate(shown)]
        if len(shown) < len(r["hints"]):
            lines.append(f"(hint {len(shown) + 1} of {len(r['hints'])}: report.next_hint() or check(..., "
                         f"hint={len(shown) + 1}))")
        return lines

    @staticmethod
    def _failure_lines(r: dict) -> list[str]:
        f = r.get("failure")
        if not f:
            return []
        where = f" ({f['group']} check)" if f.get("group") else ""
        lines = ([f"failed on: {f['case']}{where}"] if f.get("case") else []) + [f"problem: {f['message']}"]
        if f.get("why"):
            lines.append(f"this check: {f['why']}")
        if f.get("inputs"):
            lines.append("inputs: " + ", ".join(f"{k}={v}" for k, v in f["inputs"].items()))
        if f.get("traceback"):
            lines.append("traceback (last lines):\n" + f["traceback"].rstrip())
        if f.get("output"):
            lines.append("printed: " + f["output"][:300].rstrip())
        return lines

    def __str__(self) -> str:
        out = []
        for exercise, results in self.graded:
            earned = sum(r["earned"] for r in results.values())
            out.append(f"{exercise.name}: {exercise.title}  [{earned}/{exercise.points} points]")
            for r in results.values():
                out.append(f"  [{MARKS.get(r['status'], r['status'])}] {r['function']} ({r['earned']}/"
                           f"{r['points']}): {counts_line(r)}")
                for line in self._failure_lines(r) + r["notes"][:3] + self._hints(r):
                    out.append("         " + line.replace("\n", "\n         "))
        out.append(f"score: {self.score}/{self.total} points"
                   + ("" if self.passed else " (not all checks passed)"))
        return "\n".join(out)

    __repr__ = __str__

    def table(self) -> str:
        """One line per exercise: the CLI's score table."""
        rows = [f"{'exercise':<26} {'points':>7}  status"]
        for exercise, results in self.graded:
            earned = sum(r["earned"] for r in results.values())
            states = sorted({r["status"] for r in results.values()})
            rows.append(f"{exercise.name:<26} {earned:>3}/{exercise.points:<3}  {', '.join(states)}")
        rows.append(f"{'total':<26} {self.score:>3}/{self.total:<3}")
        return "\n".join(rows)

    # -- HTML
    def _repr_html_(self) -> str:
        colour = {"passed": "#1a7f37", "failed": "#cf222e", "not attempted": "#9a6700", "public passed": "#9a6700"}
        rows = []
        for exercise, results in self.graded:
            earned = sum(r["earned"] for r in results.values())
            rows.append(f"<tr><th colspan='3' style='text-align:left'>{html.escape(exercise.name)}: "
                        f"{html.escape(exercise.title)} &mdash; {earned}/{exercise.points} points</th></tr>")
            for r in results.values():
                details = self._failure_lines(r) + r["notes"][:3] + self._hints(r)
                detail = (f"<pre style='white-space:pre-wrap;margin:2px 0'>{html.escape(chr(10).join(details))}</pre>"
                          if details else "")
                rows.append(
                    f"<tr><td style='color:{colour.get(r['status'], 'black')};font-weight:bold'>"
                    f"{MARKS.get(r['status'], r['status'])}</td><td><code>{html.escape(r['function'])}</code> "
                    f"{r['earned']}/{r['points']}</td><td style='text-align:left'>"
                    f"{html.escape(counts_line(r))}{detail}</td></tr>")
        rows.append(f"<tr><th colspan='3' style='text-align:left'>score: {self.score}/{self.total} points"
                    f"{'' if self.passed else ' (not all checks passed)'}</th></tr>")
        return "<table class='flashlab-report'>" + "".join(rows) + "</table>"
