"""``flashlab grade [NAMES...] [--exercises-dir DIR | --solutions | --batch DIR] [--json]
[--gradescope FILE] [--csv FILE] [--tests DIR]``.

Grades the named exercises (all by default), prints a score table (or JSON) and returns 0 only
when every check of every selected exercise passed. ``--batch`` grades one folder per student
(named by the student's id) with one hidden seed for all, shows progress, and writes ``--csv``;
``--tests`` adds an instructor's test pack (cases and weights, :mod:`flashlab.grading.classroom`).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from flashlab.grading.registry import EXERCISES


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flashlab grade", description="Grade the course exercises.")
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"exercise ids (default: all): {', '.join(EXERCISES)}")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--exercises-dir", metavar="DIR", help="folder of the modules to grade")
    source.add_argument("--solutions", action="store_true", help="grade the reference solutions")
    source.add_argument("--batch", metavar="DIR", help="grade a class: one folder per student in DIR")
    parser.add_argument("--csv", metavar="FILE", help="with --batch: write one row per student to FILE")
    parser.add_argument("--tests", metavar="DIR", help="an instructor's test pack: DIR/pack.py (CASES, WEIGHTS)")
    parser.add_argument("--json", action="store_true", help="print the full results as JSON")
    parser.add_argument("--gradescope", metavar="FILE", help="also write Gradescope's results.json to FILE")
    parser.add_argument("--hint", type=int, default=None,
                        help="hint levels to show for failing parts: hints 1 to N, and the hint for the failing check "
                             "if it has one (default: that hint, else hint 1; none under a named mistake)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the hidden cases (default: fresh)")
    parser.add_argument("--public-only", action="store_true",
                        help="run only the public cases: no points; exit status 0 when they all pass")
    parser.add_argument("-j", "--jobs", type=int, default=2, help="exercises graded at the same time")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each part's details")
    return parser


def main(argv: list[str] | None = None) -> int:
    from flashlab.grading.checks import grade
    from flashlab.grading.classroom import using_pack
    from flashlab.grading.report import Report

    from flashlab.grading.sandbox import hide_our_descriptors

    args = _parser().parse_args(argv)
    hide_our_descriptors()  # the learner's process cannot write into our stdout through /proc
    unknown = [n for n in args.names if n not in EXERCISES]
    if unknown:
        print(f"flashlab grade: unknown exercise(s) {unknown}; expected some of {list(EXERCISES)}", file=sys.stderr)
        return 2
    if args.csv and not args.batch:
        print("flashlab grade: --csv needs --batch DIR (one folder per student)", file=sys.stderr)
        return 2
    if args.batch and (args.gradescope or args.json):
        print("flashlab grade: --batch writes --csv; --gradescope and --json grade one submission", file=sys.stderr)
        return 2
    try:
        with using_pack(args.tests):
            if args.batch:
                return _batch(args)
            graded = grade(args.names or list(EXERCISES), args.exercises_dir, args.solutions, args.seed,
                           args.public_only, jobs=args.jobs)
    except ValueError as exc:
        print(f"flashlab grade: {exc}", file=sys.stderr)
        return 2
    report = Report(graded, hint=args.hint, shell=True)
    if args.gradescope:
        with open(args.gradescope, "w") as f:
            json.dump(report.gradescope(), f, indent=1)
    try:
        if args.json:
            print(json.dumps(report.to_dict(), indent=1, default=str))
        else:
            if args.verbose or not report.passed:
                print(report)
                print()
            print(report.table())
        sys.stdout.flush()
    except BrokenPipeError:  # the output piped into `head` or a pager that quit: not an error of the grade
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    public_passed = args.public_only and bool(report.results) and all(
        r["status"] in ("passed", "public passed") for r in report.results)
    return 0 if report.passed or public_passed else 1


def _batch(args) -> int:
    """--batch: every student folder graded with one seed; a score line each; the CSV."""
    import secrets

    from flashlab.grading.classroom import grade_batch, not_students, public_checks, why_points_were_lost, write_csv
    from flashlab.grading.report import Report

    seed = secrets.randbelow(2**31) if args.seed is None else args.seed
    batch = grade_batch(args.batch, args.names or list(EXERCISES), seed, jobs=args.jobs,
                        public_only=args.public_only)
    if args.csv:
        write_csv(args.csv, batch, seed, pack=args.tests, public_only=args.public_only)
    for student, graded in batch:
        if args.public_only:
            passed, total = (sum(x) for x in zip(*(public_checks(rs) for _, rs in graded)))
            print(f"{student:<24} {passed:>4}/{total} public checks passed")
            continue
        report = Report(graded)
        print(f"{student:<24} {report.score:>7g}/{report.total:g}")
        if report.score == 0 and report.total:
            print(f"{'':<24} nothing earned; {why_points_were_lost(graded).split(' | ')[0]}")
    skipped = not_students(args.batch)
    print(f"{len(batch)} submissions graded " + ("on the public cases only" if args.public_only else
                                                 f"with hidden seed {seed}")
          + (f" and the test pack {args.tests}" if args.tests else "")
          + (f"; wrote {args.csv}" if args.csv else "")
          + (f"; not graded: {'; '.join(skipped)}" if skipped else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
