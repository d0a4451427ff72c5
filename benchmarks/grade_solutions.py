"""Grade the reference solutions several times with fresh hidden seeds; print what ran where.

    python benchmarks/grade_solutions.py [ROUNDS] [JOBS] [MAX_SECONDS]

For each round: the seed, the score, the wall time, and the device each exercise's child used; at
the end, every hidden case label of the Triton exercises that ran, with how often it
passed. Used for benchmarks/results/grade_solutions_h200.txt (the GPU acceptance run).
"""
import sys
import time
from collections import Counter

from flashlab.grading import EXERCISES
from flashlab.grading.checks import grade
from flashlab.grading.report import Report


def main(rounds: int = 5, jobs: int = 4, max_s: int = 10**6) -> int:
    triton = Counter()
    ok = True
    began, last = time.perf_counter(), 0.0
    for i in range(rounds):
        start = time.perf_counter()
        if start - began + last > max_s:
            print(f"stopped after {i} rounds: another would pass {max_s} s")
            break
        graded = grade(list(EXERCISES), solutions=True, jobs=jobs)
        report = Report(graded)
        seed = report.results[0]["seed"]
        devices = sorted({f"{e.name[:4]}:{r.get('device', '?')}" for e, rs in graded for r in rs.values()
                          if e.needs_triton})
        print(f"round {i + 1}: seed {seed} score {report.score}/{report.total} passed={report.passed} "
              f"{time.perf_counter() - start:.1f} s; Triton exercises on {', '.join(devices)}", flush=True)
        last = time.perf_counter() - start
        if not report.passed:
            ok = False
            print(report)
        for exercise, results in graded:
            if exercise.needs_triton:
                for r in results.values():
                    for group, label, passed in r.get("cases", []):
                        triton[(exercise.name, group, label.split(" ")[0] if group == "public" else
                                " ".join(w for w in label.split() if not w[:2] in ("Nq", "Nk") and not w[:1] == "n")
                                , passed)] += 1
    print("\nTriton cases that ran (exercise, group, case kind without random sizes, passed): count")
    for key, count in sorted(triton.items()):
        print(f"  {key}: {count}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(*(int(a) for a in sys.argv[1:])))
