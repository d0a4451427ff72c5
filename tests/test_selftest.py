"""Self-tests, predictions, ``flashlab progress`` and ``flashlab bench --mine`` (no GPU needed).

The numeric answers are checked against first-principles formulas written here, the multiple-choice
answers against what the library says where it can tell (equal FLOPs, equal causal bytes, ...);
answering, predicting and progress run on a copy of the exercise stubs in a temporary folder.
"""
from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from flashlab import bench, selftest
from flashlab.grading import EXERCISES, check
from flashlab.progress import progress
from flashlab.selftest_bank import BY_ID, PREDICTIONS, QUESTIONS

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def folder(tmp_path):
    """A fresh exercises folder: the stubs, as a learner gets them."""
    for path in (REPO / "exercises").glob("*.py"):
        shutil.copy(path, tmp_path / path.name)
    return tmp_path


# ----------------------------------------------------------------------------- the question bank
# Each numeric answer, derived by hand from the question's wording (not through flashlab).
def _flash_accesses_by_hand(n, d, m):
    """FA1 with the paper's blocks (Bc = M / 4d key rows): O, l, m initialised, then per key block
    K_j, V_j read, Q, O, l, m read and O, l, m written (elements)."""
    bc = m // (4 * d)
    return n * d + 2 * n + (n // bc) * (2 * bc * d + 3 * n * d + 4 * n)


BY_HAND = {
    "01.2": lambda: 4 * 8192**2 * 2 / 2**20,
    "02.1": lambda: float(np.log(np.float64(np.finfo(np.float32).max))),
    "02.2": lambda: 2 * math.exp(3 - 5) + 1,
    "03.3": lambda: 1000 - 15 * 64,
    "03.4": lambda: sum(range(1, 17)),
    "04.1": lambda: (4 * 16384 * 64 + 4 * 16384**2) / _flash_accesses_by_hand(16384, 64, 65536),
    "05.1": lambda: math.ceil(1000 / 256),
    "06.3": lambda: (10 * 128 + 127) // 128 + 1,  # the block's last row, 1407, sees key blocks 0..10
    "06.5": lambda: math.ceil(1000 / 64) * 2 * 8,
    "07.2": lambda: 16384 * 4 / 1024,
    "07.3": lambda: len(("S = Q K^T", "dV += P^T dO", "dP = dO V^T", "dQ += dS K", "dK += dS^T Q")),
    "07.5": lambda: (2 + 5) / 2,
    "08.1": lambda: 132 / 16,
    "09.2": lambda: 4 * 4096 * 128 / (2 * (128 + 2 * 4096 * 128 + 128) + 4),  # Q, K, V, O fp16; lse fp32
    "10.1": lambda: 2 * 8 - 1,  # last rank: 7 shards in full and half its own (7.5); first: half its own
}


@pytest.mark.parametrize("qid", [q.qid for q in QUESTIONS if q.kind == "number"])
def test_numeric_answer_equals_the_hand_derivation(qid):
    q = BY_ID[qid]
    value = q.compute()
    assert qid in BY_HAND or qid == "08.3", f"{qid} is numeric but has no hand derivation in this test"
    if qid == "08.3":  # a measured number: the results file's measured bytes over its model's
        row = next(r for r in json.loads((REPO / "benchmarks/results/ncu_traffic.json").read_text())["rows"]
                   if r["variant"] == "naive" and r["n"] == 4096)
        assert value == pytest.approx((row["dram_read_bytes"] + row["dram_write_bytes"])
                                      / (row["model"]["naive"]["read"] + row["model"]["naive"]["write"]))
    else:
        assert value == pytest.approx(BY_HAND[qid](), rel=1e-9), f"{qid}: {q.source} gives {value}"


def test_every_choice_question_stores_exactly_one_of_its_letters():
    from flashlab.grading.spec import answer_hash

    for q in QUESTIONS:
        if q.kind == "choice":
            matches = [c for c in q.letters if answer_hash(q.function, c) == q.stored]
            assert len(matches) == 1, f"{q.qid}: stored hash matches {matches} of {q.letters}"
            assert len(q.choices) >= 3 and q.explanation


def _right_choice(qid: str) -> str:
    q = BY_ID[qid]
    return q.choices[q.letters.index(selftest.right_letter(q))]


def test_choice_answers_agree_with_the_library_where_it_can_tell():
    from flashlab import flops, hardware, softmax, traffic

    # 01.3: causal does not change naive bytes
    assert traffic.naive_traffic(512, 512, 64, causal=True) == traffic.naive_traffic(512, 512, 64)
    assert "still materialised" in _right_choice("01.3")
    # 01.4: below the ridge point
    intensity = flops.attention_flops(4096, 4096, 128) / traffic.naive_traffic(4096, 4096, 128).total
    assert intensity < hardware.H200_MEASURED.ridge_point and _right_choice("01.4").startswith("below")
    # 02.4: a fully masked row's state
    m, l = softmax.softmax_state(np.full((1, 4), -np.inf))
    assert np.isneginf(m).all() and (l == 0).all() and "m = -inf, l = 0" in _right_choice("02.4")
    # 02.5: online equals safe softmax to rounding
    x = np.random.default_rng(0).standard_normal((3, 50))
    assert np.abs(softmax.online_softmax(x, 7) - softmax.safe_softmax(x)).max() < 1e-12
    assert _right_choice("02.5").startswith("yes")
    # 03.1: FA2 reads Q once, K once per query block
    by = traffic.fa2_forward_traffic(256, 256, 64, block_q=64, block_k=64).by_tensor
    assert by[("Q", "read")] == 256 * 64 * 2 and by[("K", "read")] == 4 * 256 * 64 * 2
    assert _right_choice("03.1") == "Q_i once; K_j once per query block"
    # 03.2: FA1 round-trips O, l, m; FA2 never reads them
    fa1 = traffic.fa1_forward_traffic(256, 256, 64).by_tensor
    assert all((t, "read") in fa1 and (t, "read") not in by for t in ("O", "l", "m"))
    assert _right_choice("03.2").startswith("O_i, l_i and m_i")
    # 04.4: same FLOPs, tiled or naive
    assert flops.attention_flops(1000, 700, 64) == flops.attention_flops(1000, 700, 64, block_q=64, block_k=32)
    assert _right_choice("04.4") == "the same"


def test_solutions_file_answers_every_question_correctly():
    names = {}
    exec((REPO / "solutions" / "selftest.py").read_text(), names)  # noqa: S102  our own solution file
    for q in QUESTIONS:
        assert selftest.is_right(q, names[q.function]), f"solutions/selftest.py {q.function} = {names[q.function]!r}"


def test_selftest_is_one_registered_exercise_worth_a_quarter_point_per_question():
    exercise = EXERCISES[selftest.EXERCISE]
    assert [p.function for p in exercise.parts] == [q.function for q in QUESTIONS]
    assert all(p.points == selftest.POINTS for p in exercise.parts) and selftest.POINTS < 1
    assert {q.notebook for q in QUESTIONS} == {f"{i:02d}" for i in range(1, 11)}
    assert all(len(selftest.questions_of(f"{i:02d}")) >= 3 for i in range(1, 11))


def test_notebooks_show_every_question_and_prediction_with_its_cell():
    def normalised(text: str) -> str:
        return re.sub(r"\s+", " ", re.sub(r"(?m)^# ?", "", text))

    for q in QUESTIONS:
        source = next((REPO / "notebooks" / "_src").glob(f"{q.notebook}_*.py")).read_text()
        assert f'answer("{q.qid}", None)' in source, q.qid
        assert q.prompt in normalised(source), f"notebook {q.notebook} does not show {q.qid}'s prompt"
        for choice in q.choices:
            assert choice in normalised(source), (q.qid, choice)
    for p in PREDICTIONS:
        source = next((REPO / "notebooks" / "_src").glob(f"{p.notebook}_*.py")).read_text()
        assert f'predict("{p.key}", None)' in source, p.key


# ----------------------------------------------------------------------------- answering
def test_the_answer_to_04_1_shows_both_counts_it_compares(folder):
    standard = 4 * 16384 * 64 + 4 * 16384**2  # elements, Algorithm 0
    flash = _flash_accesses_by_hand(16384, 64, 65536)  # elements, Algorithm 1 with the paper's blocks
    text = str(selftest.answer("04.1", "5", exercises_dir=folder))
    assert f"standard attention makes {standard:,} accesses" in text, text
    assert f"FlashAttention {flash:,}" in text and f"{standard / flash:.2f}x fewer" in text, text
    assert f"{standard * 2 / 2**30:.2f} GiB" in text and f"{flash * 2 / 2**30:.2f} GiB" in text, "fp16 bytes too"


@pytest.mark.parametrize("given", ["b", "B", "(b)", "b.", " (B) "])
def test_one_letter_is_accepted_in_common_spellings(given):
    assert selftest.parse_letter(given) == "b"


@pytest.mark.parametrize("given", ["bb", "e", "", "b)c", "1", 2, None, "the second"])
def test_anything_but_one_letter_is_refused_with_a_message(given):
    with pytest.raises(ValueError, match="answer with one letter"):
        selftest.parse_letter(given)


def test_answer_grades_at_once_records_and_the_grader_sees_it(folder):
    q = BY_ID["03.2"]
    wrong = next(c for c in q.letters if c != selftest.right_letter(q))
    verdict = selftest.answer("03.2", wrong.upper() + ".", exercises_dir=folder)
    assert verdict.correct is False and "Not right" in str(verdict) and q.explanation in str(verdict)
    assert "first answer is the one scored" in str(verdict)
    verdict = selftest.answer("03.2", f"({selftest.right_letter(q)})", exercises_dir=folder)
    assert verdict.correct is True and str(verdict).startswith("03.2: Right, attempt 2") and q.explanation in str(verdict)
    assert f"keeps your first answer, {wrong.lower()!r}; it earned no point" in str(verdict), str(verdict)
    number = BY_ID["01.2"].compute()
    assert str(selftest.answer("01.2", str(number * 1.005), exercises_dir=folder)).startswith("01.2: Right: a quarter")
    record = json.loads((folder / selftest.ANSWERS_FILE).read_text())["answers"]
    assert record["03.2"]["attempts"] == 2 and record["03.2"]["first_correct"] is False
    assert record["03.2"]["answer"] == selftest.right_letter(q) and record["03.2"]["first_answer"] == wrong.lower()
    assert record["01.2"]["correct"] is True
    report = check(selftest.EXERCISE, exercises_dir=folder)
    earned = {r["function"]: r["earned"] for r in report.results}
    assert earned["q01_2"] == selftest.POINTS and earned["q03_2"] == 0, "the score counts first answers"
    assert sum(earned.values()) == selftest.POINTS, "only the answered questions earn points"


def test_progress_scores_first_answers_and_a_fully_answered_self_test_is_finished(folder):
    for path in folder.glob("ex*.py"):
        path.unlink()
    for q in selftest.questions_of("10"):
        right = q.compute() if q.kind == "number" else selftest.right_letter(q)
        if q.qid == "10.2":
            selftest.answer(q.qid, next(c for c in q.letters if c != right), exercises_dir=folder)
        selftest.answer(q.qid, right, exercises_dir=folder)
    item = {i.name: i for i in progress(folder, fast=True).items}["self-test 10"]
    assert item.earned == 2 * selftest.POINTS and item.possible == 3 * selftest.POINTS
    assert item.status == "answered, 1 wrong at the first answer (10.2)", item.status
    result = progress(folder, fast=True)
    assert result.next.name != "self-test 10" and "first answer to each question" in str(result)


def test_progress_names_the_work_areas_notebook_copies_and_fits_every_name(tmp_path):
    exercises = tmp_path / "exercises"
    exercises.mkdir()
    for path in (REPO / "exercises").glob("*.py"):
        shutil.copy(path, exercises / path.name)
    (tmp_path / "01_naive_attention.ipynb").write_text("{}")  # the learner's copy, as `make lab` serves it
    result = progress(exercises, fast=True)
    assert str(tmp_path / "01_naive_attention.ipynb") in result.next.todo, result.next.todo
    assert str(exercises / "ex01_naive.py") in result.next.todo
    rows = [line for line in str(result).splitlines() if re.match(r"^\d\d ", line)]
    assert any("ex12_triton_online_softmax " in row for row in rows)
    ends = {row.index("/") + len(row.split("/")[1].split()[0]) for row in rows}
    assert len(ends) == 1, "the points column is aligned on every row:\n" + "\n".join(rows)


def test_answer_none_shows_the_question_and_records_nothing(folder):
    verdict = selftest.answer("01.1", None, exercises_dir=folder)
    assert verdict.correct is None and BY_ID["01.1"].prompt in str(verdict) and "(c)" in str(verdict)
    assert not (folder / selftest.ANSWERS_FILE).exists()


def test_bad_answers_name_the_problem(folder):
    with pytest.raises(ValueError, match="answer with a number"):
        selftest.answer("01.2", "lots", exercises_dir=folder)
    with pytest.raises(ValueError, match="one letter, a to d"):
        selftest.answer("01.1", "e", exercises_dir=folder)
    with pytest.raises(ValueError, match="99.9"):
        selftest.answer("99.9", "a", exercises_dir=folder)


# ----------------------------------------------------------------------------- predictions
def test_every_prediction_computes_without_a_gpu():
    for p in PREDICTIONS:
        value = p.actual()
        assert math.isfinite(value) and value > 0, p.key
        assert 0 < p.tolerance < 1


def test_prediction_is_compared_within_its_tolerance_and_recorded(folder):
    p = PREDICTIONS[0]
    actual = p.actual()
    near = selftest.predict(p.key, actual * (1 + p.tolerance / 2), exercises_dir=folder)
    assert near.correct is True and "within" in str(near) and f"{p.tolerance / 2:.1%}" in str(near)
    far = selftest.predict(p.key, actual * 3, exercises_dir=folder)
    assert far.correct is False and "outside" in str(far) and "200.0%" in str(far)
    assert "the cells after this one compute it and explain it" in str(far), "a miss points to the explanation"
    assert "cells after this one" not in str(near)
    entry = json.loads((folder / selftest.ANSWERS_FILE).read_text())["predictions"][p.key]
    assert entry["predicted"] == pytest.approx(actual * 3) and entry["actual"] == pytest.approx(actual)
    assert entry["within"] is False and entry["rel_error"] == pytest.approx(2.0)
    assert selftest.predict(p.key, None, exercises_dir=folder).correct is None
    with pytest.raises(ValueError, match="not a prediction"):
        selftest.predict("no_such_number", 1.0, exercises_dir=folder)


# ----------------------------------------------------------------------------- progress
def test_progress_on_a_fresh_folder_starts_at_exercise_01(folder):
    result = progress(folder, fast=True)
    text = str(result)
    assert {i.status for i in result.items} == {"not started"}
    assert result.next.name == "ex01_naive" and "notebook 01" in result.next.todo
    assert 'check("ex01_naive")' in text and "self-tests:  0/" in text
    assert [i.notebook for i in result.items] == sorted(i.notebook for i in result.items)
    assert {i.name for i in result.items if i.kind == "exercise"} == set(EXERCISES) - {selftest.EXERCISE}


def test_progress_counts_a_right_answer_and_uses_the_last_graded_run(folder):
    for path in folder.glob("ex*.py"):  # grade quickly: only exercise 01, the solved one, is there
        path.unlink()
    shutil.copy(REPO / "solutions" / "ex01_naive.py", folder / "ex01_naive.py")
    selftest.answer("01.1", selftest.right_letter(BY_ID["01.1"]), exercises_dir=folder)
    graded = progress(folder)
    by_name = {i.name: i for i in graded.items}
    assert by_name["ex01_naive"].status == "done (public cases)" and by_name["ex01_naive"].earned == 3
    assert by_name["self-test 01"].earned == selftest.POINTS and "3 unanswered" in by_name["self-test 01"].status
    assert graded.next.name == "self-test 01" and 'answer("01.2"' in graded.next.todo
    cached = {i.name: i for i in progress(folder, fast=True).items}
    assert cached["ex01_naive"].earned == 3 and "cached" in cached["ex01_naive"].status
    (folder / "ex01_naive.py").write_text((folder / "ex01_naive.py").read_text() + "\n# edited\n")
    assert {i.name: i for i in progress(folder, fast=True).items}["ex01_naive"].earned is None


def test_progress_grades_only_the_files_changed_since_its_last_run(folder, monkeypatch):
    import flashlab.grading as grading

    shutil.copy(REPO / "solutions" / "ex01_naive.py", folder / "ex01_naive.py")
    (folder / "ex02_softmax.py").write_text("def safe_softmax(x):\n    return x\n")  # edited, failing
    calls, real = [], grading.grade
    monkeypatch.setattr(grading, "grade", lambda names, *a, **k: calls.append(list(names)) or real(names, *a, **k))
    first = {i.name: i for i in progress(folder).items}
    assert calls == [["ex01_naive", "ex02_softmax"]], "the course's untouched stubs are not run"
    assert first["ex01_naive"].status == "done (public cases)" and first["ex03_tiled_forward"].status == "not started"
    assert first["ex02_softmax"].status.startswith("in progress") and first["ex03_tiled_forward"].earned == 0
    second = {i.name: i for i in progress(folder).items}
    assert calls[1:] == [["ex02_softmax"]], "a done, unchanged file keeps its result; a failing one runs again"
    assert second["ex01_naive"].earned == 3 and second["ex01_naive"].status == "done (public cases)"
    (folder / "ex01_naive.py").write_text((folder / "ex01_naive.py").read_text() + "\n# edited\n")
    progress(folder)
    assert calls[2:] == [["ex01_naive", "ex02_softmax"]], "an edited file is graded again"


def test_progress_believes_no_more_of_its_cache_than_a_graded_run_writes(folder):
    """The cache is the learner's own file: a red team's forged entries showed untouched stubs as
    999/3 done. Points follow the status and never pass the exercise's; entries of another form are
    ignored; the course's untouched stub is not started whatever the cache says."""
    from flashlab.progress import CACHE_FILE, _digest, grader_key

    def entry(name, earned, status, stamp="2026-01-01 00:00 UTC"):
        return dict(digest=_digest(folder / f"{name}.py"), grader=grader_key(), earned=earned, status=status,
                    time=stamp)

    forged = {name: entry(name, 999, "done") for name in EXERCISES if name != selftest.EXERCISE}
    (folder / CACHE_FILE).write_text(json.dumps(forged))
    for fast in (True, False):  # untouched stubs: nothing is graded, nothing is believed
        result = progress(folder, fast=fast)
        assert {(i.earned, i.status) for i in result.items if i.kind == "exercise"} == {(0, "not started")}, fast
    for name in ("ex01_naive", "ex03_tiled_forward", "ex05_traffic", "ex06_triton_primer", "ex09_backward_pieces"):
        (folder / f"{name}.py").write_text((folder / f"{name}.py").read_text() + "\n# edited\n")
    forged.update(ex01_naive=entry("ex01_naive", 999, "done"),
                  ex03_tiled_forward=entry("ex03_tiled_forward", 999, "in progress (tiled_attention to do)"),
                  ex09_backward_pieces=entry("ex09_backward_pieces", 999, "in progress (softmax_backward to do)"),
                  ex05_traffic=entry("ex05_traffic", 2, "done\x1b[2J"),  # not a status progress writes
                  ex06_triton_primer=entry("ex06_triton_primer", "999", "done"))  # points that are not a number
    (folder / CACHE_FILE).write_text(json.dumps(forged))
    (folder / "selftest_answers.json").write_text(json.dumps(dict(answers={}, predictions={
        PREDICTIONS[0].key: dict(predicted=1.0, rel_error="999")})))
    result = progress(folder, fast=True)
    by_name = {i.name: i for i in result.items}
    assert (by_name["ex01_naive"].earned, by_name["ex01_naive"].status) == (3, "done (cached 2026-01-01 00:00 UTC)")
    assert by_name["ex03_tiled_forward"].earned == 0 and by_name["ex09_backward_pieces"].earned == 1
    for name in ("ex05_traffic", "ex06_triton_primer"):  # ignored: the file is only read
        assert by_name[name].earned is None and "cached" not in by_name[name].status, by_name[name]
    assert all(i.earned is None or 0 <= i.earned <= i.possible for i in result.items)
    assert f"{PREDICTIONS[0].key}: ? off" in str(result)
    (folder / CACHE_FILE).write_text("[1, 2]")  # not a cache at all
    assert progress(folder, fast=True).totals()["exercise"][0] is None  # the edited files: only read


def test_progress_cli_prints_json(folder, capsys):
    from flashlab.cli import main

    assert main(["progress", "--exercises-dir", str(folder), "--fast", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["next"]["name"] == "ex01_naive" and out["totals"]["self-test"][0] == 0


# ----------------------------------------------------------------------------- bench --mine
def test_bench_mine_without_a_gpu_says_so_and_exits_cleanly(capsys, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert bench.main(["--mine"]) == 2
    err = capsys.readouterr().err
    assert "refusing to time" in err and "Traceback" not in err
    assert "not timing here" in bench.mine()


def test_bench_mine_picks_a_full_kernel_by_its_signature(tmp_path):
    (tmp_path / "ex07_kernel_inner_loop.py").write_text("def flash_forward(q, k, v):\n    return q\n")
    name, fn = bench.find_mine(tmp_path)
    assert name == "ex07_kernel_inner_loop"
    (tmp_path / "ex12_full_kernel.py").write_text(
        "def flash_forward(q, k, v, causal=False, scale=None):\n    return v\n")
    name, fn = bench.find_mine(tmp_path)
    assert name == "ex12_full_kernel" and fn(1, 2, 3) == 3
    with pytest.raises(ValueError, match="no_such"):
        bench.find_mine(tmp_path, module="no_such")


def test_bench_mine_table_shows_times_speed_and_a_wrong_result():
    rows = [dict(shape=(2, 16, 8192, 64), ms={"mine": 2.0, "v0_grid_bh": 4.0, "sdpa": 1.0}, mine_err=1e-3,
                 sdpa_err=1e-3, ok=True),
            dict(shape=(4, 16, 4096, 64), ms={"mine": 1.0, "v0_grid_bh": None, "sdpa": 0.5}, mine_err=0.5,
                 sdpa_err=1e-3, ok=False)]
    table = bench.mine_table(rows, "ex07_kernel_inner_loop")
    lines = table.splitlines()
    assert "ex07_kernel_inner_loop" in lines[0] and "v0_grid_bh" in lines[1]
    assert "2,16,8192,64" in lines[2] and "0.50x" in lines[2] and lines[2].endswith("ok")
    tflops = 4 * 2 * 16 * 8192**2 * 64 / 2e-3 / 1e12
    assert f"{tflops:.1f}" in lines[2] and "WRONG" in lines[3]


def test_a_check_of_the_learners_file_counts_in_progress_fast(folder):
    shutil.copy(REPO / "solutions" / "ex02_softmax.py", folder / "ex02_softmax.py")
    assert check("ex02_softmax", exercises_dir=folder, seed=3).passed
    item = {i.name: i for i in progress(folder, fast=True).items}["ex02_softmax"]
    assert item.earned == item.possible and item.status.startswith("done (cached "), item.status
    (folder / "ex02_softmax.py").write_text((folder / "ex02_softmax.py").read_text() + "\n# edited\n")
    assert {i.name: i for i in progress(folder, fast=True).items}["ex02_softmax"].earned is None
    cache = REPO / "solutions" / ".flashlab_progress.json"
    before = cache.exists() and cache.read_bytes()
    assert check("ex02_softmax", exercises_dir=REPO / "solutions", seed=3).passed
    assert (cache.exists() and cache.read_bytes()) == before, "a check of the course's answers is not remembered"
