"""The autograder: solutions get full marks, stubs score 0, broken submissions get the right message.

Grading runs learner code in child processes (a fresh interpreter per exercise), so these tests
are slow-ish: the solutions of all 11 exercises, the stubs, and one broken module per failure mode.
"""
import ast
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from flashlab.grading import EXERCISES, check
from flashlab.grading.checks import compare
from flashlab.grading.cli import main
from flashlab.grading.registry import Part
from flashlab.tiled import tiled_attention as _library_tiled

REPO = Path(__file__).resolve().parents[1]
BROKEN = Path(__file__).resolve().parent / "broken_submissions"


def _tree_digest(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_solutions_score_full_marks_through_cli_main(capsys):
    rc = main(["--solutions", "--json"])
    report = json.loads(capsys.readouterr().out)
    failed = [(p["exercise"], p["function"], p["failure"]) for e in report["exercises"] for p in e["parts"]
              if p["status"] != "passed"]
    assert failed == [], f"solutions failed: {failed}"
    assert rc == 0 and report["passed"] and report["score"] == report["total"] > 0
    assert {e["name"] for e in report["exercises"]} == set(EXERCISES)
    for e in report["exercises"]:
        for p in e["parts"]:  # every public and hidden check ran and passed: counts are honest
            assert p["public"][0] == p["public"][1] >= 1 and p["hidden"][0] == p["hidden"][1], p


def test_flashlab_grade_command_runs_in_a_fresh_process():
    # The wiring of `flashlab grade` (flashlab.cli -> grading.cli.main) on two NumPy exercises: the
    # full set of solutions goes through the same main() in the test above, so grading all eleven
    # again here (about 30 s on 2 cores, mostly the Triton interpreter) would prove nothing more.
    names = ["ex01_naive", "ex04_causal_tiles"]
    out = subprocess.run([sys.executable, "-m", "flashlab.cli", "grade", *names, "--solutions"], capture_output=True,
                         text=True, cwd=REPO, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    total = sum(EXERCISES[name].points for name in names)
    assert f"{total}/{total}" in out.stdout.splitlines()[-1], out.stdout
    out = subprocess.run([sys.executable, "-m", "flashlab.cli", "grade", *names, "--json",  # the stubs, not a
                          "--exercises-dir", str(REPO / "exercises")], capture_output=True,  # learner's work/
                         text=True, cwd=REPO, timeout=600)
    report = json.loads(out.stdout)  # nothing but the JSON on stdout
    assert out.returncode == 1 and report["score"] == 0 and [e["name"] for e in report["exercises"]] == names


def test_untouched_exercises_score_zero_exit_nonzero_and_stay_unmodified(capsys):
    before = _tree_digest(REPO / "exercises")
    rc = main(["--exercises-dir", str(REPO / "exercises"), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 1 and report["score"] == 0 and not report["passed"]
    statuses = {(p["exercise"], p["function"]): p["status"] for e in report["exercises"] for p in e["parts"]}
    assert set(statuses.values()) == {"not attempted"}, statuses
    assert len(statuses) == sum(len(e.parts) for e in EXERCISES.values())
    assert _tree_digest(REPO / "exercises") == before, "grading changed files under exercises/"


# (broken module, graded as, part, failure kind, words the message must contain)
BROKEN_CASES = [
    ("raises_exception", "ex01_naive", "naive_attention", "exception", "raised IndexError"),
    ("wrong_shape", "ex01_naive", "naive_attention", "shape", "expected (8, 4)"),
    ("wrong_dtype", "ex01_naive", "naive_attention", "dtype", "dtype float64, expected float32"),
    ("nan_output", "ex02_softmax", "safe_softmax", "nan", "NaN at index"),
    ("mutates_input", "ex02_softmax", "safe_softmax", "mutation", "changed its input(s) x in place"),
    ("wrong_values", "ex02_softmax", "online_softmax", "value", "max abs error"),
    ("never_returns", "ex01_naive", "naive_attention", "timeout", "did not return within"),
    ("crashes_process", "ex01_naive", "naive_attention", "crash", "grading process died (exit code 3)"),
    ("import_error", "ex01_naive", "naive_attention", "load", "importing the module failed: ImportError"),
    ("materialises_scores", "ex03_tiled_forward", "tiled_attention", "memory", "never build an Nq x Nk array"),
    ("calls_library", "ex03_tiled_forward", "tiled_attention", "forbidden", "called flashlab.tiled.tiled_attention"),
    ("calls_torch_sdpa", "ex01_naive", "naive_attention", "forbidden", "scaled_dot_product_attention"),
    ("no_causal_skip", "ex03_tiled_forward", "tiled_attention", "nan", "NaN at index"),
    ("kernel_not_launched", "ex06_triton_primer", "vector_add", "launch", "never launched the Triton kernel add_kernel"),
    ("kernel_no_causal_skip", "ex08_kernel_causal", "flash_forward", "nan", "NaN at index"),
    ("calls_library_kernel", "ex08_kernel_causal", "flash_forward", "forbidden",
     "called flashlab.kernels.flash_fwd.forward_v1"),
    ("kernel_replaced_by_torch", "ex07_kernel_inner_loop", "flash_forward", "launch",
     "no Triton kernel flash_fwd_kernel next to flash_forward"),
]


def test_every_broken_submission_has_a_case():
    assert {p.stem for p in BROKEN.glob("*.py")} == {row[0] for row in BROKEN_CASES} | {"prints_flood"}


@pytest.mark.parametrize("module, exercise, part, kind, words", BROKEN_CASES, ids=[r[0] for r in BROKEN_CASES])
def test_broken_submission_is_reported_for_its_check(tmp_path, module, exercise, part, kind, words):
    shutil.copy(BROKEN / f"{module}.py", tmp_path / f"{exercise}.py")
    report = check(exercise, exercises_dir=tmp_path, time_limit_s=2 if module == "never_returns" else None)
    results = report.graded[0][1]
    result = results[part]
    assert result["status"] == "failed" and result["earned"] == 0, result
    assert result["failure"]["kind"] == kind, result["failure"]
    assert words in result["failure"]["message"], result["failure"]["message"]
    text = str(report)
    assert words in text and "FAIL" in text
    if module in ("no_causal_skip", "kernel_no_causal_skip"):
        assert "skips fully masked tiles" in result["failure"]["why"]
    if module in ("never_returns", "crashes_process"):  # the other parts are still graded after it
        assert result["public"] == [0, 3]  # counted, not hidden behind the timeout or crash
        assert results["naive_hbm_bytes"]["status"] == "passed"


def test_printing_floods_are_truncated_and_the_check_still_passes(tmp_path):
    shutil.copy(BROKEN / "prints_flood.py", tmp_path / "ex01_naive.py")
    result = check("ex01_naive", exercises_dir=tmp_path, public_only=True).graded[0][1]["naive_attention"]
    assert result["status"] == "public passed" and result["earned"] == 0  # hidden checks did not run
    assert any("only the first 2,000 were kept" in note for note in result["notes"]), result["notes"]


def test_check_grades_a_function_object_and_honours_the_env_dir(monkeypatch):
    def safe_softmax(x):
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    report = check("ex02_softmax", safe_softmax)
    assert [r["status"] for r in report.results] == ["passed"]
    report = check("ex02_softmax", {"safe_softmax": lambda x: np.exp(x) / np.exp(x).sum(-1, keepdims=True)})
    assert report.results[0]["failure"]["kind"] == "nan"
    monkeypatch.setenv("FLASHLAB_EXERCISES_DIR", str(REPO / "solutions"))
    assert check("ex04_causal_tiles").passed
    monkeypatch.setenv("FLASHLAB_EXERCISES_DIR", str(REPO / "no_such_folder"))
    with pytest.raises(ValueError, match="FLASHLAB_EXERCISES_DIR"):
        check("ex04_causal_tiles")


def _tiled_via_the_library(q, k, v, causal=False, scale=None, block_q=64, block_k=64):
    return _library_tiled(q, k, v, causal=causal, scale=scale, block_q=block_q, block_k=block_k)


def test_notebook_function_calling_a_library_function_bound_before_grading_is_reported():
    # A notebook cell ran `from flashlab.tiled import tiled_attention` before check(): the name is
    # bound to the original in the notebook's globals, which the grading fork inherits.
    result = check("ex03_tiled_forward", _tiled_via_the_library).results[0]
    assert result["status"] == "failed" and result["failure"]["kind"] == "forbidden", result["failure"]
    assert "called flashlab.tiled.tiled_attention" in result["failure"]["message"]


def test_hidden_cases_are_fresh_per_seed_and_public_cases_fixed():
    part = EXERCISES["ex03_tiled_forward"].parts[0]
    a, b = part.hidden(np.random.default_rng(1)), part.hidden(np.random.default_rng(2))
    assert any(x.label != y.label or not np.array_equal(x.kwargs["q"], y.kwargs["q"]) for x, y in zip(a, b))
    p1, p2 = part.public(np.random.default_rng(7)), part.public(np.random.default_rng(7))
    assert all(np.array_equal(x.kwargs["q"], y.kwargs["q"]) for x, y in zip(p1, p2))


def test_hint_levels_unfold_one_at_a_time(tmp_path):
    shutil.copy(BROKEN / "wrong_values.py", tmp_path / "ex02_softmax.py")
    report = check("ex02_softmax", exercises_dir=tmp_path, hint=1, public_only=True)
    hints = EXERCISES["ex02_softmax"].parts[1].hints
    assert hints[0] in str(report) and hints[1] not in str(report)
    assert "not yet run" in str(report)  # honest counts: the checks after the failure did not pass
    report.next_hint()
    assert hints[1] in str(report) and hints[1] in report._repr_html_()


def test_compare_reports_the_worst_element_and_its_index():
    rng = np.random.default_rng()
    ref = rng.standard_normal((5, 7))
    got = ref.copy()
    index = (int(rng.integers(5)), int(rng.integers(7)))
    got[index] += 0.5
    part = Part("f", "f", 1, None, None)
    failure = compare(part, got, ref)
    assert failure["kind"] == "value" and failure["index"] == index and abs(failure["max_error"] - 0.5) < 1e-12
    assert compare(part, got.astype(np.float32), ref)["kind"] == "dtype"
    assert compare(part, ref + 1e-12, ref) is None


def test_unknown_exercise_is_rejected_with_the_valid_ids(capsys):
    with pytest.raises(ValueError, match="ex99.*ex01_naive"):
        check("ex99")
    assert main(["ex99"]) == 2


def test_solutions_do_not_use_flashlab_and_stubs_name_their_exercise():
    for name, exercise in EXERCISES.items():
        solution = (REPO / "solutions" / f"{name}.py").read_text()
        stub = (REPO / "exercises" / f"{name}.py").read_text()
        assert "import flashlab" not in solution and "from flashlab" not in solution, name
        for part in exercise.parts:
            assert f"def {part.function}(" in solution or f"{part.function} = " in solution, (name, part.function)
            assert f"def {part.function}(" in stub or f"{part.function} = None" in stub, (name, part.function)
        if exercise.parts[0].kind not in ("choice", "number"):
            assert f'NotImplementedError("Exercise {name[2:4]}' in stub, name


def test_stubs_keep_the_solution_signatures_and_raise_naming_their_exercise():
    def functions(path: Path) -> dict:
        tree = ast.parse(path.read_text())
        return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}

    for name, exercise in EXERCISES.items():
        stubs, solved = functions(REPO / "exercises" / f"{name}.py"), functions(REPO / "solutions" / f"{name}.py")
        assert set(stubs) == set(solved), (name, set(stubs) ^ set(solved))
        for fname, node in stubs.items():
            assert ast.unparse(node.args) == ast.unparse(solved[fname].args), (name, fname)
        for part in exercise.parts:
            if part.kind in ("choice", "number"):
                continue
            node = stubs[part.function]
            assert ast.get_docstring(node), f"{name}.{part.function} has no docstring"
            raises = [ast.unparse(n.exc) for n in ast.walk(node) if isinstance(n, ast.Raise)]
            assert any(r.startswith(f"NotImplementedError('Exercise {name[2:4]}:") for r in raises), (name, raises)


# Plausible mistakes, made by editing a solution: (exercise, what the mistake is, text, replacement,
# failure kind). Each must fail whatever the hidden seed.
MISTAKES = [
    ("ex01_naive", "softmax without the max subtraction", "p = np.exp(s - m)", "p = np.exp(s)", "nan"),
    ("ex01_naive", "causal mask off by one", "[None, :] > np.arange(nq)[:, None]",
     "[None, :] > np.arange(nq)[:, None] + 1", "value"),
    ("ex02_softmax", "combine without the -inf guard", "alpha = np.where(np.isneginf(m_a), 0.0, np.exp(m_a - m_safe))",
     "alpha = np.exp(m_a - m)", "nan"),
    ("ex03_tiled_forward", "acc not rescaled", "acc = alpha[..., None] * acc + p @", "acc = acc + p @", "value"),
    ("ex03_tiled_forward", "causal skip one tile late", "if causal and k0 > q1 - 1:", "if causal and k0 > q1:", "nan"),
    ("ex03_tiled_forward", "causal skip ignores the ragged last block", "if causal and k0 > q1 - 1:",
     "if causal and k0 > q0 + block_q - 1:", "nan"),
    ("ex04_causal_tiles", ">= instead of >", "return j * block_k > last_row", "return j * block_k >= last_row", "value"),
    ("ex10_tiled_backward", "D from the tile instead of rowsum(dO * O)", "ds = p * (dp - D[..., q0:q1, None])",
     "ds = p * (dp - (p * dp).sum(-1, keepdims=True))", "value"),
    ("ex10_tiled_backward", "no causal tile skipping", "if causal and k0 > q1 - 1:", "if False:", "nan"),
]


@pytest.mark.parametrize("exercise, mistake, old, new, kind", MISTAKES, ids=[m[1] for m in MISTAKES])
def test_plausible_mistake_fails_its_exercise(tmp_path, exercise, mistake, old, new, kind):
    source = (REPO / "solutions" / f"{exercise}.py").read_text()
    assert old in source, "the solution changed: update this mistake"
    (tmp_path / f"{exercise}.py").write_text(source.replace(old, new))
    report = check(exercise, exercises_dir=tmp_path)
    failed = [r for r in report.results if r["status"] != "passed"]
    assert len(failed) == 1 and failed[0]["earned"] == 0 and not report.passed, [r["status"] for r in report.results]
    assert failed[0]["failure"]["kind"] == kind, failed[0]["failure"]


def test_public_only_never_counts_as_passed_and_html_says_so():
    report = check("ex04_causal_tiles", exercises_dir=REPO / "solutions", public_only=True)
    assert {r["status"] for r in report.results} == {"public passed"} and report.score == 0 and not report.passed
    assert "hidden checks not yet run" in str(report) and "PART" in report._repr_html_()
    assert "not all checks passed" in report._repr_html_()
