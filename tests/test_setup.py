"""The installable course: light import, CLI dispatch, and the doctor's diagnosis."""
import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import flashlab
from flashlab import cli, doctor

HEAVY = ("torch", "triton", "matplotlib", "ipywidgets")
ROOT = Path(__file__).resolve().parents[1]


def test_import_flashlab_needs_only_numpy():
    # Block the heavy packages, then use every NumPy-level public name.
    code = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in {HEAVY!r}:
                    raise ImportError('blocked for this test: ' + name)
        sys.meta_path.insert(0, Block())
        import numpy as np, flashlab
        rng = np.random.default_rng()
        q, k, v = (rng.standard_normal((5, 8)) for _ in range(3))
        o = flashlab.tiled_attention(q, k, v, block_q=2, block_k=3)
        assert np.allclose(o, flashlab.naive_attention(q, k, v))
        leaked = [m for m in sys.modules if m.split('.')[0] in {HEAVY!r}]
        assert not leaked, leaked
        print('ok')
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_unknown_public_name_raises_attribute_error():
    with pytest.raises(AttributeError, match="no_such_thing"):
        flashlab.no_such_thing  # noqa: B018


def test_cli_lists_every_command(capsys):
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    for name in ("doctor", "grade", "traffic", "tiles", "bench", "tour"):
        assert name in text


def test_cli_rejects_unknown_command(capsys):
    assert cli.main(["frobnicate"]) == 2
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_console_script_runs_doctor():
    out = subprocess.run([sys.executable, "-m", "flashlab.cli", "doctor"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    for name in ("numpy", "torch", "triton", "GPU", "Triton"):
        assert name in out.stdout


def test_doctor_flags_triton36_interpreter_with_numpy24(monkeypatch):
    fake = {"numpy": "2.4.1", "triton": "3.6.0", "torch": "2.13.0+cpu",
            "matplotlib": "3.9", "ipywidgets": "8.1", "jupyterlab": "4.2"}
    monkeypatch.setattr(doctor, "_version", fake.get)
    monkeypatch.setattr(doctor, "_gpu_name", lambda: None)
    d = doctor.diagnose()
    assert d.triton_mode == "interpreter"
    assert any("numpy<2.4" in f.fix for f in d.findings if f.level == "warn")  # flashlab repairs it (kernels._mode)


def test_doctor_accepts_the_pinned_combination(monkeypatch):
    fake = {"numpy": "2.3.5", "triton": "3.6.0", "torch": "2.13.0+cpu",
            "matplotlib": "3.9", "ipywidgets": "8.1", "jupyterlab": "4.2"}
    monkeypatch.setattr(doctor, "_version", fake.get)
    monkeypatch.setattr(doctor, "_gpu_name", lambda: None)
    assert doctor.diagnose().ok


def test_doctor_reports_compiled_mode_on_a_gpu(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(doctor, "_gpu_name", lambda: "NVIDIA H200 (sm_90)")
    d = doctor.diagnose()
    assert d.triton_mode == "compiled"
    assert "NVIDIA H200" in doctor.format_text(d)
    assert "v5_gluon_ws" in doctor.format_text(d) and "v4_hopper" in doctor.format_text(d)


def test_doctor_says_which_forward_rungs_run_off_hopper(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(doctor, "_gpu_name", lambda: "NVIDIA A100-SXM4-80GB (sm_80)")
    text = doctor.format_text(doctor.diagnose())
    assert "do not run here" in text and "v3_autotuned" in text


PINNED = {"numpy": "2.3.5", "triton": "3.6.0", "torch": "2.13.0+cpu",
          "matplotlib": "3.9", "ipywidgets": "8.1", "jupyterlab": "4.2"}


def _cpu_machine(monkeypatch, versions=PINNED, torch_requires=(), driver=False):
    monkeypatch.setattr(doctor, "_version", versions.get)
    monkeypatch.setattr(doctor, "_gpu_name", lambda: None)
    monkeypatch.setattr(doctor, "_requires", lambda name: list(torch_requires) if name == "torch" else [])
    monkeypatch.setattr(doctor, "_nvidia_driver", lambda: driver)


def test_doctor_warns_when_triton_differs_from_the_one_torch_pins(monkeypatch):
    _cpu_machine(monkeypatch, torch_requires=["filelock", 'triton==3.5.1; platform_system == "Linux"'])
    warnings = [f for f in doctor.diagnose().findings if f.level == "warn"]
    assert any("triton 3.5.1" in f.text and "triton==3.5.1" in f.fix for f in warnings), warnings
    _cpu_machine(monkeypatch, torch_requires=['triton==3.6.0; platform_system == "Linux"'])
    assert not any("built against" in f.text for f in doctor.diagnose().findings)


def test_doctor_warns_when_a_driver_is_present_but_torch_sees_no_gpu(monkeypatch):
    _cpu_machine(monkeypatch, driver=True)
    d = doctor.diagnose()
    found = [f for f in d.findings if "NVIDIA driver" in f.text]
    assert found and found[0].level == "warn" and "CUDA build of torch" in found[0].fix, d.findings
    _cpu_machine(monkeypatch, driver=False)
    assert not any("NVIDIA driver" in f.text for f in doctor.diagnose().findings)


def test_doctor_warns_when_the_interpreter_is_forced_on_a_gpu(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(doctor, "_gpu_name", lambda: "NVIDIA H200 (sm_90)")
    d = doctor.diagnose()
    assert d.triton_mode == "interpreter"
    assert any(f.level == "warn" and "unset TRITON_INTERPRET" in f.fix for f in d.findings)


def test_doctor_reports_missing_numpy_as_an_error_and_missing_triton_as_a_warning(monkeypatch):
    _cpu_machine(monkeypatch, versions={**PINNED, "numpy": None, "triton": None})
    d = doctor.diagnose()
    assert not d.ok and d.triton_mode == "unavailable"
    levels = {f.text.split()[0]: f.level for f in d.findings if "not installed" in f.text}
    assert levels["numpy"] == "error" and levels["triton"] == "warn", levels


def test_tour_prints_agreement_exact_traffic_and_the_formula_table(capsys):
    from flashlab import tour
    from flashlab.traffic import fa2_forward_traffic, naive_traffic

    assert tour.main(["--d", "128"]) == 0
    out = capsys.readouterr().out
    assert out.count("max |tiled - naive|") == 4 and "(equal)" in out and "DIFFERENT" not in out
    for n in (1024, 4096, 16384, 65536):  # each table row shows the formulas' ratio
        ratio = naive_traffic(n, n, 128).total / fa2_forward_traffic(n, n, 128, block_q=128, block_k=64,
                                                                      stat_itemsize=4).total
        row = next(line for line in out.splitlines() if line.split()[:1] == [str(n)])
        assert row.endswith(f"{ratio:.0f}x"), (row, ratio)
    assert "make lab" in out and "flashlab doctor" in out


def test_tour_fails_loudly_when_tiled_and_naive_disagree(monkeypatch, capsys):
    from flashlab import tour

    monkeypatch.setattr(tour, "agreement", lambda *a: [("FA2 loop order, causal=False", False, 1e-3)])
    assert tour.main([]) == 1
    assert "disagreed" in capsys.readouterr().out


def _make_dry_run(target: str) -> str:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    out = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_readme_opens_with_make_lab_and_make_test_and_the_makefile_has_them():
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```")[1].strip().splitlines()
    assert [line.split("#")[0].strip() for line in first_block[:2]] == ["make lab", "make test"], first_block
    lab = _make_dry_run("lab")
    assert "flashlab workarea" in lab, lab  # prepares work/, the learner's copies
    notebook = re.search(r"cd work && .*jupyter\"? lab .*?(\d\d_\S+\.ipynb)", lab)
    assert notebook and (ROOT / "notebooks" / notebook.group(1)).exists(), lab  # work/ holds its copy
    assert "python -m pytest" in _make_dry_run("test")
    assert "flashlab tour" in _make_dry_run("tour")
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_notebooks_ask_for_the_kernel_that_make_registers():
    kernel = re.search(r"ipykernel install .*--name (\S+)", (ROOT / "Makefile").read_text()).group(1)
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb"))
    assert notebooks
    for path in notebooks:
        spec = json.loads(path.read_text())["metadata"].get("kernelspec", {})
        assert spec.get("name") == kernel, f"{path.name} asks for kernel {spec.get('name')!r}, make registers {kernel!r}"


def test_doctor_says_whether_graded_submissions_are_confined_by_the_kernel(monkeypatch):
    from flashlab import doctor
    from flashlab.grading import confine

    monkeypatch.setattr(confine, "landlock_abi", lambda: 0)
    text = doctor.format_text(doctor.diagnose())
    assert "grading     submissions checked inside Python only" in text and "Linux 5.13" in text
    monkeypatch.setattr(confine, "landlock_abi", lambda: 4)
    monkeypatch.setattr(confine, "available", lambda: True)
    assert "confined by the kernel (Landlock ABI 4" in doctor.format_text(doctor.diagnose())
