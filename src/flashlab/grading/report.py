"""The grading report: text in a terminal, HTML in Jupyter, a dict for ``--json``.

Counts are honest: a part whose public checks pass but whose hidden checks have not run is not
"passed", checks that did not run (after a timeout or crash) are "not yet run", never passed, and
"8 of 10 checks pass" is shown beside the points (which are all or nothing per part).

Hints of a failing part. A case may point at the hint that speaks to what it probes
(``Case.hint``); when the first failing case does, that hint is "the hint for this check", shown
first and labelled with its number. ``hint=N`` shows hints 1 to N and the hint for this check
(``hint=0``: none). Without a level, a failing part shows the hint for this check, else hint 1, and
none where the grader named a known mistake (a hint may be about something else, and the name
already says what to do). :meth:`Report.next_hint` adds the lowest-numbered hint not yet shown,
so every hint is reached in order whichever one came first.
``gradescope()`` gives Gradescope's results.json.
"""
from __future__ import annotations

import html
import re

MARKS = {"passed": "PASS", "failed": "FAIL", "not attempted": "TODO", "public passed": "PART"}
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with control characters (a terminal's escape sequences, carriage returns) shown as
    \\xNN: what the learner's code printed or raised cannot redraw the report in a terminal."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def counts_line(r: dict) -> str:
    """e.g. '8 of 10 checks passed (public 3 of 3; hidden 5 of 7, seed 7)'."""
    (pp, pt), (hp, ht) = r["public"], r["hidden"]
    if r["status"] == "not attempted":
        if r.get("kind") in ("choice", "number"):
            return "not attempted yet (no answer given)"
        return "not attempted yet (the stub still raises NotImplementedError)"
    failure = r.get("failure") or {}
    if pt == 0 and not ht:
        return "not graded (function missing)" if failure.get("kind") == "missing" else "not graded"
    text = f"{pp + hp} of {_plural(pt + ht, 'check')} passed"
    if r.get("kind") in ("choice", "number"):
        return text
    detail = [f"public {pp} of {pt}"]
    if ht:
        detail.append(f"hidden {hp} of {ht}, seed {r['seed']}")
    elif r["status"] == "public passed" or not r.get("hidden_run"):
        detail.append("hidden checks not yet run")
    not_run = r.get("not_run", 0)
    if not_run:
        detail.append(f"{not_run} not yet run")
    need = "; the points need every check" if r["status"] == "failed" and pp + hp else ""
    return f"{text} ({'; '.join(detail)}){need}"


class Report:
    """Results of grading one or more exercises (see :func:`flashlab.grading.check`)."""

    def __init__(self, graded: list, hint: int | None = None, shell: bool = False):
        self.graded = graded  # [(Exercise, {part: result dict})]
        self.hint = hint  # None: the default level (1, or 0 under a named mistake)
        self.more = 0  # levels added by next_hint()
        self.shell = shell  # hint footers name the command-line option instead of check()

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
        """Show one more hint for the failing parts, the lowest-numbered one not yet shown (returns
        the report, for display)."""
        self.more += 1
        return self

    def gradescope(self) -> dict:
        """Gradescope's autograder results (results.json): one test per part, points as graded here."""
        from flashlab.grading.classroom import PACK_MARK

        withheld = ("failed a check of your instructor's test pack: its inputs and values are not shown (the pack's "
                    "cases stay unseen); the public checks and the hints still apply")
        tests = []
        for exercise, results in self.graded:
            for r in results.values():
                lines = self._failure_lines(r)
                if PACK_MARK in str((r.get("failure") or {}).get("case", "")):
                    lines = [withheld] + [x for x in lines if x.startswith("also failed") and PACK_MARK not in x]
                else:
                    lines = [x if PACK_MARK not in x else "also failed: a check of your instructor's test pack"
                             for x in lines]
                lines = [counts_line(r)] + lines + r["notes"][:3] + self._hints(r)
                tests.append(dict(name=f"{exercise.name}: {r['function']} ({r['title']})", score=r["earned"],
                                  max_score=r["points"], output="\n".join(lines), visibility="visible"))
        return dict(score=self.score, max_score=self.total, tests=tests,
                    output=f"score: {self.score}/{self.total} points", visibility="visible")

    def to_dict(self) -> dict:
        """``--json``: "hint" is the report's hint level (:meth:`hint_level`: the level asked for, else 1),
        not which hints a part shows: each part's "hints_shown" lists those numbers, in the order shown
        (a part's pointed hint, "hint 2 of 3, for this check", can show at the default level 1)."""
        return dict(score=self.score, total=self.total, passed=self.passed, hint=self.hint_level(),
                    exercises=[dict(name=e.name, title=e.title, score=sum(r["earned"] for r in rs.values()),
                                    total=e.points, parts=[dict(r, hints_shown=self.displayed_hints(r))
                                                           for r in rs.values()]) for e, rs in self.graded])

    # -- text
    def hint_level(self, r: dict | None = None) -> int:
        """The report's hint level (``--json``'s "hint"): the level asked for, else 1, or 0 where the
        failure of part ``r`` names a known mistake; plus one per :meth:`next_hint`. Which hints a part
        shows, the hint for its failing check included: :meth:`shown_hints`."""
        named = r is not None and bool((r.get("failure") or {}).get("mistake"))
        return (self.hint if self.hint is not None else 0 if named else 1) + self.more

    @staticmethod
    def check_hint(r: dict) -> int | None:
        """The number of the hint the first failing check points at (``Case.hint``), or None."""
        number = (r.get("failure") or {}).get("hint")
        return number if type(number) is int and 1 <= number <= len(r["hints"]) else None

    def shown_hints(self, r: dict) -> list[int]:
        """The numbers of the hints shown for a failing part ``r``, in the order shown: the hint for
        the failing check first, then the rest in order (see the module docstring)."""
        pointed, count = self.check_hint(r), len(r["hints"])
        if self.hint is not None:
            shown = set(range(1, min(self.hint, count) + 1)) | ({pointed} if pointed and self.hint > 0 else set())
        elif (r.get("failure") or {}).get("mistake"):
            shown = set()
        else:
            shown = {pointed or 1} if count else set()
        for _ in range(self.more):  # next_hint(): the lowest-numbered hint not shown yet
            missing = [n for n in range(1, count + 1) if n not in shown]
            if missing:
                shown.add(missing[0])
        return sorted(shown, key=lambda n: (n != pointed, n))

    def displayed_hints(self, r: dict) -> list[int]:
        """The numbers of the hints the report shows for part ``r``, in the order shown (``--json``'s
        "hints_shown" of each part): :meth:`shown_hints` for a failing part, and for a part not
        attempted yet only when a level was asked for; none for a part that passed."""
        return self.shown_hints(r) if self._shows_hints(r) else []

    def _shows_hints(self, r: dict) -> bool:
        asked = self.hint is not None or self.more > 0
        return bool(r["hints"]) and (r["status"] == "failed" or r["status"] == "not attempted" and asked)

    def _hints(self, r: dict) -> list[str]:
        """The part's hints (:meth:`displayed_hints`), then how to see the next one."""
        if not self._shows_hints(r):
            return []
        shown, pointed, count = self.shown_hints(r), self.check_hint(r), len(r["hints"])
        lines = [f"hint {n} of {count}, for this check: {r['hints'][n - 1]}" if n == pointed
                 else f"hint {n}: {r['hints'][n - 1]}" for n in shown]
        missing = [n for n in range(1, count + 1) if n not in shown]
        if missing:
            more = missing[0]
            how = (f"flashlab grade {r['exercise']} --hint {more}" if self.shell
                   else f"check(\"{r['exercise']}\", hint={more})")
            other = "another hint" if pointed and more < pointed else "hint"  # not a step past the one shown
            lines.append(f"({other} {more} of {count}: {how})")
        return lines

    @staticmethod
    def _failure_lines(r: dict) -> list[str]:
        f = r.get("failure")
        if not f:
            return []
        where = f" ({f['group']} check)" if f.get("group") else ""
        lines = ([f"failed on: {f['case']}{where}"] if f.get("case") else []) + [f"problem: {f['message']}"]
        if f.get("where"):
            lines.append(f"at {f['where']}")
        if f.get("group") == "public":
            lines.append("this check (public, the same on every run): "
                         + (f.get("why") or "compare with the exercise's docstring"))
        elif f.get("why"):
            lines.append(f"this check: {f['why']}")
        if f.get("inputs"):
            lines.append("inputs: " + ", ".join(f"{k}={v}" for k, v in f["inputs"].items()))
        if f.get("traceback"):
            trace = f["traceback"].rstrip().splitlines()
            if len(trace) > 1 and f["message"].startswith("raised ") and trace[-1] and \
                    f["message"][len("raised "):].startswith(trace[-1][:80]):
                trace = trace[:-1]  # the error itself is the problem line above
            lines.append("traceback (last lines):\n" + "\n".join(trace))
        if f.get("output"):
            lines.append("printed: " + f["output"][:300].rstrip())
        others = r.get("failures", [])
        repeats = [t for t in others if t.split(": ", 1)[-1].startswith(("the same ", "looks like the same"))]
        others = [t for t in others if t not in repeats]  # another cause: each shown, up to three
        for other in others[:3]:
            lines.append("also failed: " + other)
        if len(others) > 3:
            lines.append(f"... and {len(others) - 3} more failed checks with other causes (each in the JSON "
                         f"report: flashlab grade {r.get('exercise', '')} --json)")
        if repeats:
            names = [t.split(": ", 1)[0] for t in repeats]
            lines.append(f"also failed the same way: {_plural(len(repeats), 'more check')} ("
                         + "; ".join(names[:3]) + ("; ..." if len(names) > 3 else "") + ")")
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
                    out.append("         " + printable(line).replace("\n", "\n         "))
        out.append(self.score_line())
        return "\n".join(out)

    def score_line(self) -> str:
        """'score: 5/5 points', or what stands in the way: failing parts, or hidden checks not run
        (a public-only run gives no points, however many public checks pass)."""
        line = f"score: {self.score}/{self.total} points"
        if self.passed:
            return line
        states = [r["status"] for r in self.results]
        public = states.count("public passed")
        if public and public + states.count("passed") == len(states):
            names = " ".join(dict.fromkeys(r["exercise"] for r in self.results))
            how = (f"flashlab grade {names}" if self.shell
                   else ", ".join(f'check("{n}")' for n in names.split()))
            return (f"{line}: public checks only ({public} of {_plural(len(states), 'part')} pass theirs); "
                    f"the points come from the hidden checks: {how}")
        return f"{line} (not all checks passed)"

    __repr__ = __str__

    STATUS_ORDER = ("passed", "public passed", "failed", "not attempted")

    @staticmethod
    def _number(x) -> str:
        """Points as written: 3, 0.25, 11 (11.0 loses its .0)."""
        return f"{x:g}" if isinstance(x, float) else str(x)

    @classmethod
    def status_counts(cls, results: dict) -> str:
        """How many parts have each status: "1 passed, 1 failed, 42 not attempted"."""
        statuses = [r["status"] for r in results.values()]
        order = list(cls.STATUS_ORDER) + sorted(set(statuses) - set(cls.STATUS_ORDER))
        return ", ".join(f"{statuses.count(s)} {s}" for s in order if s in statuses)

    def table(self) -> str:
        """One line per exercise: the CLI's score table (points earned/possible in one right-aligned
        column, then how many parts have each status)."""
        lines = []
        for exercise, results in self.graded:
            earned = sum(r["earned"] for r in results.values())
            lines.append((exercise.name, f"{self._number(earned)}/{self._number(exercise.points)}",
                          self.status_counts(results)))
        lines.append(("total", f"{self._number(self.score)}/{self._number(self.total)}", ""))
        width = max(len("points"), *(len(points) for _, points, _ in lines))
        rows = [f"{'exercise':<26} {'points':>{width}}  status"]
        rows += [f"{name:<26} {points:>{width}}  {status}".rstrip() for name, points, status in lines]
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
                # wrap at spaces: JupyterLab's output style breaks a pre's lines anywhere, inside words too
                detail = (f"<pre style='white-space:pre-wrap;word-break:normal;overflow-wrap:anywhere;margin:2px 0'>"
                          f"{html.escape(chr(10).join(details))}</pre>" if details else "")
                rows.append(
                    f"<tr><td style='color:{colour.get(r['status'], 'black')};font-weight:bold'>"
                    f"{MARKS.get(r['status'], r['status'])}</td><td><code>{html.escape(r['function'])}</code> "
                    f"{r['earned']}/{r['points']}</td><td style='text-align:left'>"
                    f"{html.escape(counts_line(r))}{detail}</td></tr>")
        rows.append(f"<tr><th colspan='3' style='text-align:left'>{html.escape(self.score_line())}</th></tr>")
        return "<table class='flashlab-report'>" + "".join(rows) + "</table>"
