"""`flashlab release`: the student version holds no answers and still runs; the Gradescope layout."""
import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from flashlab import release

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    return release.release_student(tmp_path_factory.mktemp("student") / "course", root=REPO)


def _code_lines(path: Path) -> set[str]:
    """Normalised code lines of a module, without docstrings, comments and blank lines."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):  # drop docstrings
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) and isinstance(
                getattr(body[0], "value", None), ast.Constant) and isinstance(body[0].value.value, str):
            body[0] = ast.Pass()
    return {" ".join(line.split()) for line in ast.unparse(tree).splitlines() if line.strip()}


def test_student_release_leaves_out_solutions_tests_and_the_instructor_pack(student):
    for left_out in ("solutions", "instructor", "tests", "notebooks/_src", ".ci"):
        assert not (student / left_out).exists(), f"{left_out} is in the student release"
    assert sorted(p.name for p in (student / "exercises").glob("ex*.py")) == \
        sorted(p.name for p in (REPO / "exercises").glob("ex*.py"))
    assert (student / "notebooks" / "01_naive_attention.ipynb").is_file()
    assert "Python" in (student / "RELEASE.md").read_text()


def test_student_release_ships_the_exercise_references_compiled(student):
    package = student / "src" / "flashlab"
    present = [rel for rel in release.WITHHELD if (REPO / "src" / "flashlab" / rel).is_file()]
    assert "tiled.py" in present and "softmax.py" in present
    for rel in present:
        assert not (package / rel).exists(), f"{rel} is shipped as source"
        assert (package / rel).with_suffix(".pyc").is_file(), f"{rel} is missing from the release"


def test_no_solution_line_appears_in_the_student_release(student):
    """Every line a solution adds to its stub (longer than a trivial `return o`) is absent from the
    release's text files; the stated exceptions are the kernel modules Triton must read as source
    (release.kernel_sources) and the hints, whose third level is pseudocode by design."""
    package = student / "src" / "flashlab"
    exempt = {package / rel for rel in [*release.kernel_sources(package), release.HINTS]}
    texts = {p: p.read_text(errors="ignore") for p in student.rglob("*")
             if p.is_file() and p.suffix in (".py", ".ipynb", ".md", ".txt", ".json") and p not in exempt}
    texts = {p: " ".join(t.split()) for p, t in texts.items()}  # whitespace-normalised
    leaked = []
    for solution in sorted((REPO / "solutions").glob("ex*.py")):
        stub = REPO / "exercises" / solution.name
        given = " ".join(stub.read_text().split())  # the stub's own text (its docstring states the interface)
        added = _code_lines(solution) - _code_lines(stub)
        for line in (line for line in added if len(line) >= 30 and line not in given):
            leaked += [f"{solution.name}: {line!r} in {p.relative_to(student)}" for p, t in texts.items() if line in t]
    assert not leaked, "solution lines in the student release:\n" + "\n".join(leaked[:20])


def _run_in(student: Path, code: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(student / "src"))
    env.pop("FLASHLAB_EXERCISES_DIR", None)
    out = subprocess.run([sys.executable, "-c", code], cwd=student, env=env, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_check_grades_in_the_student_release_stub_zero_solution_full(student, tmp_path):
    code = ("import flashlab, flashlab.tiled; from flashlab.grading import check; "
            "print(flashlab.tiled.__file__); r = check('ex01_naive', exercises_dir='{}', seed=1); print(r.score, r.total)")
    lines = _run_in(student, code.format("exercises")).split()
    assert lines[0].endswith("tiled.pyc") and lines[0].startswith(str(student))
    assert lines[1] == "0" and int(lines[2]) > 0
    mine = tmp_path / "exercises"
    shutil.copytree(student / "exercises", mine)
    shutil.copy(REPO / "solutions" / "ex01_naive.py", mine / "ex01_naive.py")
    score, total = _run_in(student, code.format(mine)).split()[1:]
    assert score == total


def test_a_release_run_by_another_python_says_which_python_it_needs(student, tmp_path):
    other = tmp_path / "course"
    shutil.copytree(student, other)
    for compiled in (other / "src" / "flashlab").rglob("*.pyc"):  # as if compiled by another minor version
        data = bytearray(compiled.read_bytes())
        data[0] ^= 0x01
        compiled.write_bytes(bytes(data))
    message = release.compiled_python_mismatch(other / "src" / "flashlab")
    made = (student / "RELEASE.md").read_text().split("with Python ", 1)[1].split()[0].rstrip(".")
    assert message and f"compiled with Python {made}" in message and "python=" in message, message
    assert release.compiled_python_mismatch(student / "src" / "flashlab") is None
    env = dict(os.environ, PYTHONPATH=str(other / "src"))
    out = subprocess.run([sys.executable, "-c", "from flashlab.grading import check"], cwd=other, env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and f"compiled with Python {made}" in out.stderr, out.stderr[-2000:]
    out = subprocess.run([sys.executable, "-m", "flashlab.cli", "doctor"], cwd=other, env=env, capture_output=True,
                         text=True, timeout=300)
    assert f"compiled with Python {made}" in out.stdout and "no known problems" not in out.stdout, out.stdout


@pytest.mark.notebooks
def test_a_student_release_notebook_executes(student, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("PYTHONPATH", str(student / "src"))  # the kernel imports the release's flashlab
    monkeypatch.setenv("FLASHLAB_DEVICE", "cpu")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("MPLBACKEND", "agg")
    path = student / "notebooks" / "02_softmax_decomposed.ipynb"
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, kernel_name="flashlab", timeout=300,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    assert any("flashlab course" in "".join(o.get("text", "") for o in c.get("outputs", []))
               for c in nb.cells if c.cell_type == "code")


def test_gradescope_layout_and_zip(tmp_path):
    out = release.release_gradescope(tmp_path / "gs", root=REPO)
    for name in ("setup.sh", "run_autograder"):
        assert os.access(out / name, os.X_OK), f"{name} is not executable"
    with zipfile.ZipFile(out / "autograder.zip") as z:
        names = set(z.namelist())
    assert {"setup.sh", "run_autograder", "source/pyproject.toml", "source/exercises/ex01_naive.py"} <= names
    assert not any(n.startswith("source/tests/") for n in names)
    script = (out / "run_autograder").read_text()
    assert "--gradescope /autograder/results/results.json" in script and "/autograder/submission" in script


def test_release_refuses_a_folder_that_is_not_empty(tmp_path):
    (tmp_path / "x").write_text("mine")
    with pytest.raises(ValueError, match="DIR="):
        release.release_student(tmp_path, root=REPO)
    assert release.main(["student", str(tmp_path)]) == 2


def test_package_version_matches_pyproject_and_the_changelog():
    import re

    import flashlab

    version = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M).group(1)
    assert flashlab.__version__ == version
    release = version.split(".dev")[0]
    assert f"## {release}" in (REPO / "CHANGELOG.md").read_text(), f"CHANGELOG.md has no section for {release}"
