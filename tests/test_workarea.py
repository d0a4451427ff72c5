"""The learner's work area (flashlab.workarea, `make lab`): copies made once, the learner's files never
overwritten, course updates copied in or reported, and the grader reading the work area's exercises."""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from flashlab import workarea
from flashlab.grading import find_exercises_dir

REPO = Path(__file__).resolve().parents[1]


def _notebook(text: str) -> str:
    return json.dumps({"cells": [{"cell_type": "markdown", "id": "c0", "metadata": {}, "source": text}],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


@pytest.fixture
def course(tmp_path) -> Path:
    """A small stand-in for the repository: two notebooks, their sources, two exercise stubs."""
    repo = tmp_path / "repo"
    (repo / "notebooks" / "_src").mkdir(parents=True)
    (repo / "exercises").mkdir()
    (repo / "solutions").mkdir()
    for name in ("00_orientation", "01_naive_attention"):
        (repo / "notebooks" / f"{name}.ipynb").write_text(_notebook(f"# {name}"))
        (repo / "notebooks" / "_src" / f"{name}.py").write_text("# %%\n")
    (repo / "notebooks" / "_build.py").write_text("")
    (repo / "exercises" / "ex01_naive.py").write_text("def naive_attention():\n    raise NotImplementedError\n")
    (repo / "exercises" / "ex02_softmax.py").write_text("def safe_softmax():\n    raise NotImplementedError\n")
    (repo / "exercises" / "README.md").write_text("# Exercises\n")
    (repo / "solutions" / "ex01_naive.py").write_text("")
    return repo


def test_first_prepare_puts_notebooks_on_top_and_stubs_in_exercises_and_leaves_the_sources_out(course):
    report = workarea.prepare(repo=course)
    work = course / "work"
    assert report.root == work.resolve()
    assert sorted(report.copied) == ["00_orientation.ipynb", "01_naive_attention.ipynb", "exercises/README.md",
                                     "exercises/ex01_naive.py", "exercises/ex02_softmax.py"]
    for rel in report.copied:
        source = course / ("notebooks/" + rel if rel.endswith(".ipynb") else rel)
        if rel.endswith(".ipynb"):  # the same notebook, with the language_info its kernel will report
            copy, original = json.loads((work / rel).read_text()), json.loads(source.read_text())
            assert copy["metadata"].pop("language_info") == workarea.kernel_language_info()
            assert copy == original, rel
        else:
            assert (work / rel).read_bytes() == source.read_bytes(), rel
    assert not (work / "_src").exists() and not (work / "_build.py").exists()
    assert (work / "README.md").is_file(), "the work area explains itself to the learner"
    again = workarea.prepare(repo=course)
    assert (again.copied, again.restored, again.changed_upstream, again.kept_unknown) == ([], [], [], [])
    assert "up to date" in str(again)


def test_prepare_never_overwrites_the_learners_files_and_reports_upstream_changes(course):
    work = course / "work"
    workarea.prepare(repo=course)
    mine = "def naive_attention():\n    return 'my solution'\n"
    (work / "exercises" / "ex01_naive.py").write_text(mine)
    with_outputs = _notebook("# 00 with my outputs")
    (work / "00_orientation.ipynb").write_text(with_outputs)
    # a course update: ex01 and notebook 00 change, notebook 02 is new, ex02 unchanged
    (course / "exercises" / "ex01_naive.py").write_text("def naive_attention(q, k, v):\n    raise NotImplementedError\n")
    (course / "notebooks" / "00_orientation.ipynb").write_text(_notebook("# 00, revised"))
    (course / "notebooks" / "02_softmax_decomposed.ipynb").write_text(_notebook("# 02"))

    report = workarea.prepare(repo=course)
    assert (work / "exercises" / "ex01_naive.py").read_text() == mine
    assert (work / "00_orientation.ipynb").read_text() == with_outputs
    assert report.copied == ["02_softmax_decomposed.ipynb"]
    assert sorted(report.changed_upstream) == ["00_orientation.ipynb", "exercises/ex01_naive.py"]
    assert "exercises/ex01_naive.py" in str(report) and "--fresh" in str(report)
    # the notice stays until the learner takes the new copy
    assert sorted(workarea.prepare(repo=course).changed_upstream) == sorted(report.changed_upstream)


def test_a_copy_the_learner_never_changed_follows_the_course(course):
    work = course / "work"
    workarea.prepare(repo=course)
    untouched = (work / "exercises" / "ex02_softmax.py").read_text()
    revised = untouched + "\n# revised in the course\n"
    (course / "exercises" / "ex02_softmax.py").write_text(revised)
    report = workarea.prepare(repo=course)
    assert report.updated == ["exercises/ex02_softmax.py"] and report.changed_upstream == []
    assert (work / "exercises" / "ex02_softmax.py").read_text() == revised
    assert "you had not changed your copy" in str(report)
    assert workarea.prepare(repo=course).updated == []  # recorded: up to date now


def test_notebook_copies_carry_this_pythons_language_info_and_still_follow_the_course(course):
    """JupyterLab marks a notebook modified on opening it when the kernel's language_info differs
    from the file's: the copies carry this Python's, and an untouched copy still follows the course."""
    import platform

    info = workarea.kernel_language_info()
    assert info["name"] == "python" and info["version"] == platform.python_version()
    assert info["file_extension"] == ".py" and "mimetype" in info
    work = course / "work"
    workarea.prepare(repo=course)
    assert json.loads((work / "01_naive_attention.ipynb").read_text())["metadata"]["language_info"] == info
    (course / "notebooks" / "01_naive_attention.ipynb").write_text(_notebook("# 01, revised"))
    report = workarea.prepare(repo=course)
    assert report.updated == ["01_naive_attention.ipynb"] and report.changed_upstream == []
    copy = json.loads((work / "01_naive_attention.ipynb").read_text())
    assert copy["cells"][0]["source"] == "# 01, revised" and copy["metadata"]["language_info"] == info
    assert workarea.prepare(repo=course).updated == []


def test_a_work_area_made_before_language_info_still_follows_the_course(course):
    """Copies made byte for byte, with a manifest of the course files' digests only."""
    work = course / "work"
    workarea.prepare(repo=course)
    source = course / "notebooks" / "00_orientation.ipynb"
    (work / "00_orientation.ipynb").write_bytes(source.read_bytes())
    manifest = json.loads((work / workarea.MANIFEST).read_text())
    manifest["files"]["00_orientation.ipynb"] = {"sha256": workarea._sha256(source)}
    (work / workarea.MANIFEST).write_text(json.dumps(manifest))
    source.write_text(_notebook("# 00, revised"))
    assert workarea.prepare(repo=course).updated == ["00_orientation.ipynb"]


def test_a_deleted_copy_comes_back_and_fresh_keeps_the_learners_version_beside_the_new_one(course):
    work = course / "work"
    workarea.prepare(repo=course)
    (work / "exercises" / "ex02_softmax.py").unlink()
    assert workarea.prepare(repo=course).restored == ["exercises/ex02_softmax.py"]

    mine = "def naive_attention():\n    return 1\n"
    (work / "exercises" / "ex01_naive.py").write_text(mine)
    (course / "exercises" / "ex01_naive.py").write_text("def naive_attention(q):\n    raise NotImplementedError\n")
    moves = workarea.fresh(["exercises/ex01_naive.py"], repo=course)
    assert [rel for rel, _ in moves] == ["exercises/ex01_naive.py"]
    kept = work / moves[0][1]
    assert re.fullmatch(r"ex01_naive\.\d{8}T\d{6}Z\.py", kept.name), kept.name
    assert kept.read_text() == mine
    assert (work / "exercises" / "ex01_naive.py").read_bytes() == (course / "exercises" / "ex01_naive.py").read_bytes()
    assert workarea.prepare(repo=course).changed_upstream == [], "the fresh copy is recorded as up to date"
    with pytest.raises(ValueError, match="paths: 'exercises/nope.py'"):
        workarea.fresh(["exercises/ex02_softmax.py", "exercises/nope.py"], repo=course)
    assert (work / "exercises" / "ex02_softmax.py").is_file(), "a bad path in the list moved nothing"


def test_a_file_already_there_that_flashlab_did_not_copy_is_left_alone(course):
    work = course / "work"
    (work / "exercises").mkdir(parents=True)
    (work / "exercises" / "ex01_naive.py").write_text("# written before the work area existed\n")
    report = workarea.prepare(repo=course)
    assert report.kept_unknown == ["exercises/ex01_naive.py"]
    assert (work / "exercises" / "ex01_naive.py").read_text() == "# written before the work area existed\n"


def test_prepare_rejects_a_folder_that_is_not_a_checkout_and_a_root_that_is_a_file(tmp_path, course):
    with pytest.raises(ValueError, match="repo="):
        workarea.prepare(root=tmp_path / "w", repo=tmp_path)
    (tmp_path / "afile").write_text("")
    with pytest.raises(ValueError, match="root="):
        workarea.prepare(root=tmp_path / "afile", repo=course)


def test_workarea_command_prepares_and_refreshes(course, tmp_path, capsys):
    work = tmp_path / "elsewhere"
    assert workarea.main(["--repo", str(course), "--dir", str(work)]) == 0
    assert "copied from the course" in capsys.readouterr().out
    assert (work / "exercises" / "ex01_naive.py").is_file()
    assert workarea.main(["--repo", str(course), "--dir", str(work), "--quiet"]) == 0
    assert capsys.readouterr().out == ""
    assert workarea.main(["--repo", str(course), "--dir", str(work), "--fresh", "exercises/ex01_naive.py"]) == 0
    assert "fresh copy" in capsys.readouterr().out
    assert workarea.main(["--repo", str(course), "--dir", str(work), "--fresh", "nope.py"]) == 2
    assert "nope.py" in capsys.readouterr().err


def test_grader_prefers_the_work_area_exercises_from_the_repository_and_its_folders(course, monkeypatch):
    monkeypatch.delenv("FLASHLAB_EXERCISES_DIR", raising=False)
    monkeypatch.chdir(course)
    assert find_exercises_dir() == (course / "exercises").resolve(), "no work area yet: the stubs"
    workarea.prepare(repo=course)
    for where in (course, course / "notebooks", course / "work", course / "work" / "exercises"):
        monkeypatch.chdir(where)
        assert find_exercises_dir() == (course / "work" / "exercises").resolve(), f"from {where}"
    assert find_exercises_dir(solutions=True) == (course / "solutions").resolve()
    assert find_exercises_dir(course / "exercises") == (course / "exercises").resolve()
    monkeypatch.setenv("FLASHLAB_EXERCISES_DIR", str(course / "solutions"))
    assert find_exercises_dir() == (course / "solutions").resolve()


def test_grade_command_grades_the_work_area_by_default(course, monkeypatch, capsys):
    from flashlab.grading import cli

    monkeypatch.delenv("FLASHLAB_EXERCISES_DIR", raising=False)
    workarea.prepare(repo=course)
    monkeypatch.chdir(course)
    # the learner's copy is solved, the course's stub is not: only grading the copy passes
    (course / "work" / "exercises" / "ex01_naive.py").write_text((REPO / "solutions" / "ex01_naive.py").read_text())
    code = cli.main(["ex01_naive", "--seed", "0"])
    assert code == 0, "flashlab grade did not grade work/exercises:\n" + capsys.readouterr().out


def test_make_lab_prepares_the_work_area_and_serves_it_at_notebook_00():
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^lab:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe, "no lab target in the Makefile"
    lines = recipe.group(1).splitlines()
    assert "flashlab workarea" in lines[0], lines
    assert re.search(r"cd work && .*jupyter\"? lab .*\$\(LAB_OPTIONS\)", lines[1]), lines
    options = re.search(r"^LAB_OPTIONS := ((?:.*\\\n)*.*)$", makefile, re.M)
    assert options, "no LAB_OPTIONS in the Makefile"
    assert "--LabApp.default_url=/lab/tree/00_orientation.ipynb" in options.group(1), options.group(1)
    assert "--KernelSpecManager.allowed_kernelspecs=flashlab" in options.group(1), options.group(1)


def test_the_work_area_is_ignored_by_git():
    try:
        out = subprocess.run(["git", "check-ignore", "work/01_naive_attention.ipynb", "work/exercises/ex01_naive.py"],
                             cwd=REPO, capture_output=True, text=True)
    except OSError:
        pytest.skip("git is not installed")
    if out.returncode == 128:
        pytest.skip("not a git checkout")
    assert out.stdout.split() == ["work/01_naive_attention.ipynb", "work/exercises/ex01_naive.py"], out.stderr
