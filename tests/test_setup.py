"""The installable course: light import, CLI dispatch, and the doctor's diagnosis."""
import subprocess
import sys
import textwrap

import pytest

import flashlab
from flashlab import cli, doctor

HEAVY = ("torch", "triton", "matplotlib", "ipywidgets")


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
    assert not d.ok
    assert any("numpy<2.4" in f.fix for f in d.findings if f.level == "error")


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
