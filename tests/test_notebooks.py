"""The course notebooks: committed clean, equal to their sources, and executing top to bottom on CPU.

Each notebook runs in the ``flashlab`` kernel with ``TRITON_INTERPRET=1`` and the graded cells
pointed at ``solutions/`` (``FLASHLAB_EXERCISES_DIR``), so every check passes; any error fails
the test. Execution times are written to ``artifacts/notebook_times.json``. On a GPU machine,
``FLASHLAB_NOTEBOOKS_ON_GPU=1`` runs the notebooks' GPU paths instead (GPU sizes, compiled Triton).

Every test reads a notebook as git holds it (the staged version, :func:`committed_text`), so a
learner who ran the notebooks in place never fails them; after ``python notebooks/_build.py``,
``git add notebooks/`` before running them.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
ARTIFACTS = REPO / "artifacts"
PATHS = sorted(NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
COURSE_BUDGET_S = 15 * 60  # the whole course executes in under 15 minutes on 2 cores
NOTEBOOK_BUDGET_S = 150  # one notebook; most take well under a minute on CPU
GPU_NOTEBOOK_BUDGET_S = 600  # on a GPU, notebook 08 re-runs a reduced benchmark (minutes)
TIMES: dict[str, float] = {}


def _load_builder():
    spec = importlib.util.spec_from_file_location("notebook_build", NOTEBOOKS / "_build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def committed_text(path: Path, repo: Path = REPO) -> str:
    """The notebook as git holds it: its staged (index) version inside a git checkout, else the file.

    A learner who runs a notebook in place (JupyterLab autosaves its outputs into the working
    copy) changes the file, not what is committed, so these tests read the index: they still
    guard every commit, and a learner's tree never fails them. A notebook git does not track
    yet (a new one) is read from the file."""
    rel = path.resolve().relative_to(repo.resolve()).as_posix()
    try:
        out = subprocess.run(["git", "show", f":{rel}"], cwd=repo, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return path.read_text(encoding="utf-8")
    return out.stdout.decode("utf-8")


def cells_with_outputs(nb) -> list[str]:
    """Ids of the code cells that carry outputs or an execution count."""
    return [c.id for c in nb.cells if c.cell_type == "code" and (c.outputs or c.execution_count is not None)]


def test_every_arc_step_has_one_notebook():
    numbers = [p.name[:2] for p in PATHS]
    assert numbers == [f"{i:02d}" for i in range(11)], f"expected notebooks 00..10, found {numbers}"


def test_committed_notebooks_equal_a_fresh_build_of_their_sources():
    builder = _load_builder()
    built = {s.stem for s in builder.sources()}
    committed = {p.stem for p in PATHS}
    assert built == committed, f"sources without notebook or notebooks without source: {built ^ committed}"
    for source in builder.sources():
        target = NOTEBOOKS / f"{source.stem}.ipynb"
        built = builder.render(source)
        if committed_text(target) != built:
            staged = "" if target.read_text(encoding="utf-8") != built else " (the file is rebuilt: git add it)"
            raise AssertionError(f"{target.name} as staged in git differs from notebooks/_src/{source.name}; "
                                 f"run python notebooks/_build.py and git add notebooks/{target.name}{staged}")


@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_is_committed_without_outputs_in_the_flashlab_kernel(path):
    import nbformat

    nb = nbformat.reads(committed_text(path), as_version=4)
    nbformat.validate(nb)
    assert nb.nbformat == 4
    assert nb.metadata.kernelspec.name == "flashlab", f"{path.name}: kernel {nb.metadata.kernelspec.name!r}"
    dirty = cells_with_outputs(nb)
    assert not dirty, f"{path.name} is staged with outputs in cells {dirty}; clear them (python notebooks/_build.py)"
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    assert "Self-test" in text and "Summary" in text, f"{path.name} lacks its self-test questions or summary"


def test_every_check_cell_imports_check_itself():
    """A learner runs a check cell on its own (after a kernel restart, or skipping ahead): the cell
    must not depend on an earlier cell's import."""
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and any(line.startswith("check(") for line in source.splitlines()):
                assert "from flashlab.grading import check" in source, (path.name, source)


def test_every_cell_that_shows_the_library_once_solved_runs_on_its_own():
    """The cell after a check that prints the library's version (course.source_once_solved) is run
    right after the check, often alone: every name it reads is imported or defined in the cell."""
    import ast
    import builtins

    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] != "code" or "source_once_solved(" not in source:
                continue
            tree = ast.parse(source)
            bound = {alias.asname or alias.name.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
            bound |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
            read = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
            missing = sorted(read - bound - set(dir(builtins)))
            assert not missing, f"{path.name}: a source_once_solved cell reads {missing} from earlier cells:\n{source}"


def test_no_markdown_line_starts_with_a_comparison():
    """A wrapped line that starts with ">=" renders as a block quote, one with "<=" as broken HTML."""
    import re

    import nbformat

    bad = []
    for path in PATHS:
        nb = nbformat.reads(committed_text(path), as_version=4)
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                bad += [f"{path.name}: {line.strip()!r}" for line in cell.source.splitlines()
                        if re.match(r"\s*(>=|<=|>\s|<\s)", line)]
    assert not bad, "reword these markdown lines so they do not start with a comparison:\n" + "\n".join(bad)


def _untracked_files() -> set[str]:
    """Untracked, not ignored files where a notebook could write: notebooks/ (its working
    directory) and the top level of the repository. (Not the whole tree, where other work may
    create files while the test runs.)"""
    try:
        out = subprocess.run(["git", "ls-files", "--others", "--exclude-standard"], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return set()
    return {p for p in out.splitlines() if p.startswith("notebooks/") or "/" not in p}


@pytest.mark.notebooks
@pytest.mark.parametrize("path", PATHS, ids=[p.stem for p in PATHS])
def test_notebook_executes_top_to_bottom_on_cpu(path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    budget = NOTEBOOK_BUDGET_S
    if os.environ.get("FLASHLAB_NOTEBOOKS_ON_GPU") == "1":  # on a GPU machine: GPU sizes, compiled Triton
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
        monkeypatch.delenv("FLASHLAB_DEVICE", raising=False)
        budget = GPU_NOTEBOOK_BUDGET_S
    else:  # CI and laptops: CPU sizes, Triton's interpreter
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        monkeypatch.setenv("FLASHLAB_DEVICE", "cpu")
    monkeypatch.setenv("FLASHLAB_EXERCISES_DIR", str(REPO / "solutions"))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    before = _untracked_files()
    mtime = path.stat().st_mtime
    nb = nbformat.reads(committed_text(path), as_version=4)
    client = NotebookClient(nb, kernel_name="flashlab", timeout=budget,
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    start = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as error:
        pytest.fail(f"{path.name} raised while executing:\n{error}")
    finally:
        elapsed = time.perf_counter() - start
        TIMES[path.stem] = elapsed
        ARTIFACTS.mkdir(exist_ok=True)
        with open(ARTIFACTS / "notebook_times.json", "w") as f:
            json.dump({"seconds": TIMES, "total_s": sum(TIMES.values())}, f, indent=1)
        print(f"{path.name}: {elapsed:.1f} s")
    created = _untracked_files() - before
    assert not created, f"{path.name} wrote files into the repository: {sorted(created)} (use artifacts/)"
    assert path.stat().st_mtime == mtime, f"executing {path.name} modified the committed notebook"
    assert elapsed < budget, f"{path.name} took {elapsed:.0f} s, budget {budget} s"


@pytest.mark.notebooks
def test_whole_course_executes_within_fifteen_minutes():
    if os.environ.get("FLASHLAB_NOTEBOOKS_ON_GPU") == "1":
        pytest.skip("the 15-minute budget is for the CPU run (2 cores); the GPU run re-times benchmarks")
    if len(TIMES) < len(PATHS):
        pytest.skip("needs every notebook executed in this session (run the whole file)")
    total = sum(TIMES.values())
    assert total < COURSE_BUDGET_S, f"the course took {total:.0f} s on this machine, budget {COURSE_BUDGET_S} s"


def test_a_learners_outputs_in_the_working_copy_do_not_fail_the_committed_notebook_checks(tmp_path):
    """In a git checkout: outputs saved into the working copy are invisible to the checks; staged
    outputs are caught; a file git does not track yet is read as it is."""
    import nbformat

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    try:
        git("init", "-q")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git is not available")
    git("config", "user.email", "t@example.com")
    git("config", "user.name", "t")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1", id="c1")])
    path = tmp_path / "00_x.ipynb"
    nbformat.write(nb, path)
    git("add", "00_x.ipynb")
    git("commit", "-qm", "clean")
    run = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1", id="c1", execution_count=1,
                                                                     outputs=[nbformat.v4.new_output(
                                                                         "execute_result", {"text/plain": "2"},
                                                                         execution_count=1)])])
    nbformat.write(run, path)  # what JupyterLab's autosave does
    assert cells_with_outputs(nbformat.read(path, as_version=4)) == ["c1"]
    assert cells_with_outputs(nbformat.reads(committed_text(path, tmp_path), as_version=4)) == []
    git("add", "00_x.ipynb")  # staging the outputs is what the check must catch
    assert cells_with_outputs(nbformat.reads(committed_text(path, tmp_path), as_version=4)) == ["c1"]
    new = tmp_path / "01_new.ipynb"
    nbformat.write(run, new)
    assert cells_with_outputs(nbformat.reads(committed_text(new, tmp_path), as_version=4)) == ["c1"]


# -- flashlab.course: the helpers every notebook starts with ---------------------------------------

def test_course_setup_switches_triton_to_the_interpreter_before_import_without_gpu(tmp_path):
    code = ("import os, sys\n"
            "os.environ.pop('TRITON_INTERPRET', None)\n"
            "from flashlab import course\n"
            "env = course.setup(seed=3, verbose=False)\n"
            "assert 'triton' not in sys.modules or os.environ['TRITON_INTERPRET'] == '1'\n"
            "print(env.device, env.triton_mode, os.environ.get('TRITON_INTERPRET'), env.pick(cpu='small', gpu='big'))\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["FLASHLAB_DEVICE"] = "cpu"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    device, mode, interpret, size = out.stdout.split()
    assert (device, interpret, size) == ("cpu", "1", "small"), out.stdout
    assert mode in ("interpreter", "missing"), f"Triton mode {mode!r} on the CPU path"


def test_course_setup_rejects_a_bad_seed():
    from flashlab import course

    with pytest.raises(ValueError, match="seed"):
        course.setup(seed=-1, verbose=False)


def test_course_load_results_reads_every_json_file_and_is_empty_without_any(tmp_path, monkeypatch):
    from flashlab import course

    monkeypatch.setenv("FLASHLAB_RESULTS_DIR", str(tmp_path / "missing"))
    assert course.load_results() == {}
    monkeypatch.setenv("FLASHLAB_RESULTS_DIR", str(tmp_path))
    payload = {"rows": [{"n": 512, "value": 1.5}]}
    (tmp_path / "bench_x.json").write_text(json.dumps(payload))
    (tmp_path / "notes.txt").write_text("not a result")
    assert course.load_results() == {"bench_x": payload}
    assert course.load_results("other*.json") == {}
    with pytest.raises(ValueError, match="pattern"):
        course.load_results("")


def test_course_source_prints_the_marked_part_of_a_library_function():
    import flashlab
    from flashlab import course

    part = course.source(flashlab.tiled_attention, start="for b in range", stop="return _outputs")
    assert part.lstrip().startswith("for b in range") and "return _outputs" not in part
    assert "online_update" in part
    with pytest.raises(ValueError, match="start="):
        course.source(flashlab.tiled_attention, start="no such marker")


def test_course_source_once_solved_shows_the_library_code_only_after_the_exercise_passes(tmp_path):
    import shutil

    import flashlab
    from flashlab import course

    marks = dict(start="for b in range", stop="return _outputs")
    shown = course.source_once_solved("ex03_tiled_forward", flashlab.tiled_attention,
                                      exercises_dir=REPO / "solutions", **marks)
    assert shown == course.source(flashlab.tiled_attention, **marks)
    both = course.source_once_solved("ex03_tiled_forward", (flashlab.tiled_attention, *marks.values()),
                                     (flashlab.online_update, "with np.errstate", None),
                                     exercises_dir=REPO / "solutions")
    assert both == shown + "\n\n" + course.source(flashlab.online_update, "with np.errstate"), both
    stub = course.source_once_solved("ex03_tiled_forward", flashlab.tiled_attention,
                                     exercises_dir=REPO / "exercises", **marks)
    assert "for b in range" not in stub and "ex03_tiled_forward.py passes its public checks" in stub
    wrong = tmp_path / "ex03_tiled_forward.py"  # the solution with the running output never rescaled
    shutil.copy(REPO / "solutions" / "ex03_tiled_forward.py", wrong)
    text = wrong.read_text()
    assert "alpha[..., None] * acc" in text
    wrong.write_text(text.replace("alpha[..., None] * acc", "acc"))
    assert "for b in range" not in course.source_once_solved("ex03_tiled_forward", flashlab.tiled_attention,
                                                             exercises_dir=tmp_path, **marks)
    with pytest.raises(ValueError, match="function"):
        course.source_once_solved("ex03_tiled_forward")


def test_course_show_refuses_what_is_not_a_figure():
    from flashlab import course

    with pytest.raises(TypeError, match="fig="):
        course.show("not a figure")


def test_course_show_saves_the_figure_where_ipython_is_missing(tmp_path, monkeypatch, capsys):
    # notebooks/_src/*.py run as plain scripts on a machine without IPython (the H200 has none)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from flashlab import course

    monkeypatch.setenv("FLASHLAB_ARTIFACTS_DIR", str(tmp_path))
    monkeypatch.setitem(sys.modules, "IPython.display", None)  # import fails as if not installed
    for _ in range(2):
        fig, ax = plt.subplots()
        ax.plot([0, 1], [1, 0])
        course.show(fig)
    saved = sorted((tmp_path / "figures").glob("figure-*.png"))
    assert [p.name for p in saved] == ["figure-000.png", "figure-001.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in saved)
    assert "saved" in capsys.readouterr().out
    assert not plt.get_fignums(), "show() left a figure open"


def test_course_speedup_agrees_with_the_ratios_the_benchmark_recorded():
    """course.speedup recomputes, from the times, the ratios bench_attention.py wrote beside them."""
    from flashlab import course

    bench = course.load_results("bench_attention.json").get("bench_attention")
    if bench is None:
        pytest.skip("no committed benchmarks/results/bench_attention.json")
    # the benchmark rounds speed ratios to 3 decimals and naive/flash time ratios to 2
    pairs = {"flashlab/sdpa_flash:fwd": ("flashlab", "sdpa_flash", "fwd", 5.01e-4),
             "flashlab/sdpa_flash:fwdbwd": ("flashlab", "sdpa_flash", "fwdbwd", 5.01e-4),
             "flashlab/sdpa_cudnn:fwd": ("flashlab", "sdpa_cudnn", "fwd", 5.01e-4),
             "naive_time/flashlab_time:fwd": ("flashlab", "naive", "fwd", 5.01e-3)}
    checked = 0
    for row in bench["rows"]:
        for key, (impl, baseline, mode, rounding) in pairs.items():
            if key in row.get("ratios", {}):
                got = course.speedup(row, impl, baseline, mode)
                assert got == pytest.approx(row["ratios"][key], abs=rounding), (key, row["n"], row["d"], got)
                checked += 1
    assert checked >= len(bench["rows"]), f"only {checked} recorded ratios found to compare with"


def test_course_speedup_is_none_for_an_untimed_variant_and_rejects_bad_arguments():
    from flashlab import course

    row = {"results": {"a": {"fwd_ms": 2.0}, "b": {"status": "oom"}}}
    assert course.speedup(row, "a", "b") is None
    assert course.speedup(row, "a", "missing") is None
    with pytest.raises(ValueError, match="mode="):
        course.speedup(row, "a", "b", mode="bwd")
    with pytest.raises(TypeError, match="row="):
        course.speedup([1, 2], "a", "b")


def test_course_run_benchmark_refuses_under_the_interpreter(monkeypatch):
    from flashlab import course

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(RuntimeError, match="cannot run the attention benchmark here: TRITON_INTERPRET"):
        course.run_benchmark("attention", ["--seq-lens", 1024], "bench_attention_live")
    with pytest.raises(ValueError, match="which="):
        course.run_benchmark("ncu", [], "x")
    with pytest.raises(ValueError, match="name="):
        course.run_benchmark("memory", [], "../results/bench_memory")


def test_notebook_08_gpu_branch_plots_a_reduced_live_run(tmp_path, monkeypatch):
    """Notebook 08 with a GPU re-runs a reduced benchmark (bf16, N in {1024, 8192}) and plots that.

    No GPU here: `course.setup` is told there is one and `course.run_benchmark` returns the
    committed rows of the live run's shape, so the plotting and ratio code of the GPU branch runs
    on fewer rows than the committed file has, as it will on a learner's GPU.
    """
    import dataclasses
    import runpy

    import matplotlib

    matplotlib.use("Agg")
    from flashlab import course

    results = course.load_results()
    if "bench_attention" not in results or "bench_memory" not in results:
        pytest.skip("needs the committed benchmark results")
    real_setup = course.setup
    calls = []

    def gpu_setup(*args, **kwargs):
        return dataclasses.replace(real_setup(*args, **kwargs), device="cuda", gpu_name="simulated GPU")

    def live_run(which, args, name):
        calls.append((which, [str(a) for a in args]))
        data = json.loads(json.dumps(results["bench_" + which]))  # a copy
        keep = {int(a) for a in args if str(a).isdigit()}
        data["rows"] = [r for r in data["rows"] if r["n"] in keep and r.get("dtype", "bfloat16") == "bfloat16"]
        assert data["rows"], f"no committed {which} rows for N in {sorted(keep)}"
        return data

    monkeypatch.setattr(course, "setup", gpu_setup)
    monkeypatch.setattr(course, "run_benchmark", live_run)
    monkeypatch.setenv("FLASHLAB_ARTIFACTS_DIR", str(tmp_path))
    monkeypatch.chdir(NOTEBOOKS)
    monkeypatch.setitem(sys.modules, "IPython.display", None)  # figures are saved to tmp_path
    runpy.run_path(str(NOTEBOOKS / "_src" / "08_performance.py"), run_name="__main__")
    assert [c[0] for c in calls] == ["attention", "memory"]
    assert len(list((tmp_path / "figures").glob("figure-*.png"))) >= 3


def test_printed_prose_is_wrapped_at_spaces_and_tables_are_left_alone():
    """JupyterLab breaks a long printed line anywhere, inside words too: the library wraps its
    long sentences at spaces (continued two columns in) and leaves column-aligned rows alone."""
    from flashlab import course, decode_results

    words = [f"word{i}" for i in range(60)]
    wrapped = course.wrap_prose("  " + " ".join(words), width=50).splitlines()
    assert len(wrapped) > 1 and all(len(line) <= 50 for line in wrapped), wrapped
    assert wrapped[0].startswith("  word0") and all(line.startswith("    word") for line in wrapped[1:])
    assert " ".join(" ".join(wrapped).split()) == " ".join(words)  # nothing lost, no word cut
    row = "  B   H Hkv " + "  ".join(f"{i:>6}" for i in range(30))
    assert course.wrap_prose(row, width=50) == row
    summary = decode_results.results_summary()
    assert all(len(line) <= 100 for line in summary.splitlines()), summary
