"""Grading a class: the instructor's test pack, a batch of submissions to CSV, the answer key."""
import csv
import json
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from flashlab.grading import classroom
from flashlab.grading.registry import EXERCISES

REPO = Path(__file__).resolve().parents[1]
PACK = REPO / "instructor"


def test_pack_adds_cases_and_weights_only_while_in_use():
    before = EXERCISES["ex03_tiled_forward"]
    with classroom.using_pack(PACK) as changed:
        part = EXERCISES["ex03_tiled_forward"].parts[0]
        assert part.points == 6 and "ex03_tiled_forward" in changed
        import numpy as np

        own = len(before.parts[0].hidden(np.random.default_rng(0)))
        labels = [c.label for c in part.hidden(np.random.default_rng(0))]
        assert len(labels) == own + 2 and all(label.endswith(classroom.PACK_MARK) for label in labels[own:])
        assert EXERCISES["ex11_quiz"].parts[0].points == 0.5
    assert EXERCISES["ex03_tiled_forward"] is before  # restored


def test_pack_errors_name_what_is_wrong(tmp_path):
    (tmp_path / "pack.py").write_text("CASES = {'ex99_nothing': {}}\n")
    with pytest.raises(ValueError, match="ex99_nothing"):
        classroom.load_pack(tmp_path)
    (tmp_path / "pack.py").write_text("WEIGHTS = {'ex01_naive': {'no_such_part': 1}}\n")
    with pytest.raises(ValueError, match="no_such_part"):
        classroom.load_pack(tmp_path)
    (tmp_path / "pack.py").write_text("WEIGHTS = {'ex01_naive': {'naive_attention': -1}}\n")
    with pytest.raises(ValueError, match="must be a number"):
        classroom.load_pack(tmp_path)
    with pytest.raises(ValueError, match="no pack.py"):
        classroom.load_pack(tmp_path / "missing")


def test_batch_grades_each_student_folder_into_one_csv(tmp_path):
    subs = tmp_path / "class"
    solution = (REPO / "solutions" / "ex01_naive.py").read_text()
    bodies = {
        "s01_correct": solution,
        "s02_wrong": solution.replace("return", "return 0 *", 1),  # the first return: wrong values
        "s03_crashes": "raise RuntimeError('broken at import')\n",
        "s04_calls_library": ("from flashlab.reference import naive_attention as _ref\n"
                              "def naive_attention(q, k, v, causal=False, scale=None):\n"
                              "    return _ref(q, k, v, causal=causal, scale=scale)\n"),
    }
    for student, body in bodies.items():
        (subs / student).mkdir(parents=True)
        (subs / student / "ex01_naive.py").write_text(body)
    (subs / "__MACOSX" / "s01_correct").mkdir(parents=True)  # an archive's metadata: not a student
    (subs / "s05_zipped.zip").write_bytes(b"PK")  # a file: not graded, and said so
    out = subprocess.run([sys.executable, "-m", "flashlab.cli", "grade", "ex01_naive", "--batch", str(subs),
                          "--csv", str(tmp_path / "scores.csv"), "--seed", "5", "--tests", str(PACK)],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "[4/4] s04_calls_library" in out.stderr  # progress while grading
    rows = {r["student"]: r for r in csv.DictReader(open(tmp_path / "scores.csv"))}
    assert list(rows) == list(bodies)
    assert rows["s01_correct"]["ex01_naive"] == "3" and rows["s01_correct"]["passed"] == "True"
    assert all(rows[s]["passed"] == "False" for s in ("s02_wrong", "s03_crashes", "s04_calls_library"))
    assert rows["s03_crashes"]["total"] == "0" and rows["s01_correct"]["seed"] == "5"
    assert float(rows["s04_calls_library"]["ex01_naive"]) <= 1  # naive_attention's 2 points not earned
    assert rows["s01_correct"]["why_points_were_lost"] == "" and rows["s01_correct"]["pack"] == str(PACK)
    assert "broken at import" in rows["s03_crashes"]["why_points_were_lost"]
    assert "wrong" in rows["s02_wrong"]["why_points_were_lost"] or "expected" in rows["s02_wrong"]["why_points_were_lost"]
    assert "s05_zipped.zip (a file, not a folder" in out.stdout and "__MACOSX (a hidden or metadata" in out.stdout
    assert "nothing earned; ex01_naive: importing the module failed" in out.stdout, out.stdout


def test_a_public_only_batch_counts_public_checks(tmp_path):
    subs = tmp_path / "class"
    for student, body in (("a", (REPO / "solutions" / "ex01_naive.py").read_text()), ("b", "")):
        (subs / student).mkdir(parents=True)
        (subs / student / "ex01_naive.py").write_text(body)
    out = subprocess.run([sys.executable, "-m", "flashlab.cli", "grade", "ex01_naive", "--batch", str(subs),
                          "--csv", str(tmp_path / "scores.csv"), "--public-only"],
                         capture_output=True, text=True, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {r["student"]: r for r in csv.DictReader(open(tmp_path / "scores.csv"))}
    checks = {student: row["ex01_naive"].split("/") for student, row in rows.items()}
    assert checks["a"][0] == checks["a"][1] != "0" and checks["b"][0] == "0", checks
    assert rows["a"]["seed"] == "public cases only" and "public cases only" in out.stdout, out.stdout


def test_gradescope_withholds_the_inputs_of_a_pack_case(tmp_path):
    # the byte count in int32: right on every course case, wrong where the pack's sizes pass 2**31
    solution = (REPO / "solutions" / "ex01_naive.py").read_text()
    (tmp_path / "ex01_naive.py").write_text(solution.replace("    return elements * itemsize",
                                                             "    return int(np.int32(elements) * itemsize)"))
    target = tmp_path / "results.json"
    from flashlab.grading import cli

    cli.main(["ex01_naive", "--exercises-dir", str(tmp_path), "--seed", "3", "--tests", str(PACK),
              "--gradescope", str(target)])
    tests = {t["name"].split(" ")[1]: t for t in json.loads(target.read_text())["tests"]}
    part = tests["naive_hbm_bytes"]
    assert part["score"] == 0 and "instructor's test pack: its inputs and values are not shown" in part["output"]
    assert "131072" not in part["output"] and classroom.PACK_MARK not in part["output"], part["output"]
    assert tests["naive_attention"]["score"] == tests["naive_attention"]["max_score"]


def test_csv_without_batch_is_refused():
    from flashlab.grading import cli

    assert cli.main(["--csv", "x.csv"]) == 2


def _answer_key_script():
    spec = importlib.util.spec_from_file_location("answer_key", PACK / "answer_key.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_answer_key_is_current_and_complete():
    key = _answer_key_script().answer_key()
    assert (PACK / "answer_key.md").read_text() == key, "run: python instructor/answer_key.py"
    assert "no choice matches" not in key and "no letter matches" not in key
    from flashlab.selftest_bank import QUESTIONS

    assert all(f"**{q.qid}**" in key for q in QUESTIONS)
    assert not hasattr(classroom, "answer_key")  # the library a student release ships does not print it
