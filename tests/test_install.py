"""Installing the course, and what depends on the installed versions.

* ``-m install`` tests ask pip what ``pip install ".[test]"`` chooses on a machine that knows only
  the public package index (pip's configuration and local wheel folders switched off): on Linux,
  the triton torch itself requires; on macOS (no triton wheels), the NumPy course without triton.
  They read metadata only (``--dry-run --report``; PEP 658 metadata files, or HTTP range requests
  into the wheel) and stop pip if it starts to download a whole large wheel. Deselect them with
  ``-m "not install"``; without network they skip, except in CI (``CI=true``), where they fail.
* The other tests need no network: the repair of triton 3.6's interpreter for numpy >= 2.4
  (``flashlab.kernels._mode``) and the doctor's version checks.
"""
import os
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from packaging.requirements import Requirement

from flashlab import doctor

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _requirements(extra: str) -> list[Requirement]:
    """pyproject.toml's dependencies plus one extra's, with ``flashlab[...]`` self-references expanded."""
    project = _pyproject()["project"]
    out, todo, seen = [Requirement(r) for r in project["dependencies"]], [extra], set()
    while todo:
        name = todo.pop()
        seen.add(name)
        for req in map(Requirement, project["optional-dependencies"][name]):
            if req.name == project["name"]:
                todo += [e for e in req.extras if e not in seen]
            else:
                out.append(req)
    return out


def test_environment_yml_asks_for_what_pyproject_asks_for():
    text = (ROOT / "environment.yml").read_text().split("\ndependencies:", 1)[1]
    entries = [line.split("#")[0].strip()[2:] for line in text.splitlines() if re.match(r"\s+- ", line)]
    entries = [re.sub(r"^([\w.-]+)=(?=\d)", r"\1==", e) for e in entries]  # conda's numpy=2.3.5
    listed = {Requirement(e).name: Requirement(e) for e in entries
              if e and not e.startswith(("python=", "-e")) and e not in ("pip", "pip:")}
    wanted = {r.name: r for r in _requirements("test")}
    assert sorted(listed) == sorted(wanted), f"environment.yml lists {sorted(listed)}, pyproject {sorted(wanted)}"
    for name, req in wanted.items():
        got = listed[name]
        assert (got.specifier, str(got.marker or "")) == (req.specifier, str(req.marker or "")), \
            f"environment.yml asks for {got}, pyproject.toml for {req}"


# -- what pip resolves from the public index alone (metadata only) -------------------------------

INDEX = "https://pypi.org/simple"
WHOLE_WHEEL_MB = 20  # pip downloading a wheel larger than this means it is not reading metadata only
RESOLVE_TIMEOUT_S = 600
MACOS = {  # the marker environment of CPython 3.11 on an Apple-silicon Mac
    "implementation_name": "cpython", "implementation_version": "3.11.0", "os_name": "posix",
    "platform_machine": "arm64", "platform_python_implementation": "CPython", "platform_release": "23.0.0",
    "platform_system": "Darwin", "platform_version": "", "python_full_version": "3.11.0",
    "python_version": "3.11", "sys_platform": "darwin",
}
# pip evaluates environment markers for the interpreter running it even with --platform, so the
# macOS resolution runs pip with packaging's marker environment replaced by MACOS.
PIP_AS_MACOS = """
import json, sys
from pip._vendor.packaging import markers
env = json.loads(sys.argv[1])
markers.default_environment = lambda: dict(env)
from pip._internal.cli.main import main
sys.exit(main(sys.argv[2:]))
"""


def _index_reachable_or_skip() -> None:
    import urllib.request

    try:
        urllib.request.urlopen(f"{INDEX}/pip/", timeout=15).close()
    except OSError as err:
        reason = f"the public package index {INDEX} is unreachable ({err})"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{reason}; in CI (CI={os.environ['CI']}) the install check must run, not skip")
        pytest.skip(reason)


def _public_index_env(empty: Path) -> dict:
    """This environment without pip's configuration, local wheel folders or other indexes."""
    keep = ("PIP_CERT", "PIP_CLIENT_CERT", "PIP_DEFAULT_TIMEOUT", "PIP_RETRIES")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in keep}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS=str(empty), PIP_DISABLE_PIP_VERSION_CHECK="1")
    return env


def _start(args: list[str], env: dict, log: Path):
    import subprocess

    with open(log, "w") as out:
        return subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=log.parent)


def _whole_wheel_downloads(log: Path) -> list[str]:
    """pip's 'Downloading name.whl (N MB)' lines for wheels over WHOLE_WHEEL_MB (metadata files excluded)."""
    big = []
    for match in re.finditer(r"Downloading (\S+) \(([\d.]+) (kB|MB|GB)\)", log.read_text(errors="replace")):
        size_mb = float(match.group(2)) * {"kB": 1e-3, "MB": 1.0, "GB": 1e3}[match.group(3)]
        if not match.group(1).endswith(".metadata") and size_mb > WHOLE_WHEEL_MB:
            big.append(match.group(0))
    return big


@pytest.fixture(scope="module")
def resolutions(tmp_path_factory):
    """Run both dry-run resolutions at once; {name: (report or None, pip's output, seconds)}."""
    import json
    import shutil
    import subprocess
    import time
    import venv

    _index_reachable_or_skip()
    tmp = tmp_path_factory.mktemp("install")
    (tmp / "empty").mkdir()
    env = _public_index_env(tmp / "empty")
    project = tmp / "flashlab"  # a copy, so building its metadata writes nothing into the checkout
    project.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, project / name)
    shutil.copytree(ROOT / "src", project / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    venv.create(tmp / "venv", with_pip=False)  # fresh: nothing installed; this pip resolves for it
    fresh = tmp / "venv" / "bin" / "python"
    # range requests into the wheel where the index offers no metadata file (when this pip has the feature)
    probe = subprocess.run([sys.executable, "-m", "pip", "install", "--use-feature=fast-deps", "--help"],
                           capture_output=True, text=True)
    lazy = ["--use-feature=fast-deps"] if probe.returncode == 0 else []
    common = ["install", "--dry-run", "--ignore-installed", "--no-cache-dir", "--index-url", INDEX, *lazy]
    macos_reqs = [f"{r.name}{'[' + ','.join(sorted(r.extras)) + ']' if r.extras else ''}{r.specifier}"
                  for r in _requirements("test") if r.marker is None or r.marker.evaluate(dict(MACOS, extra=""))]
    commands = {
        "linux": [sys.executable, "-m", "pip", "--python", str(fresh), *common,
                  "--report", str(tmp / "linux.json"), f"{project}[test]"],
        "macos": [sys.executable, "-c", PIP_AS_MACOS, json.dumps(MACOS), *common,
                  "--report", str(tmp / "macos.json"), "--platform", "macosx_14_0_arm64", "--python-version", "3.11",
                  "--implementation", "cp", "--abi", "cp311", "--only-binary=:all:", *macos_reqs],
    }
    if sys.platform != "linux":
        del commands["linux"]  # resolving for Linux from another OS would need the same marker trick
    start = time.perf_counter()
    running = {name: _start(cmd, env, tmp / f"{name}.log") for name, cmd in commands.items()}
    seconds = {}
    try:
        while len(seconds) < len(running):
            time.sleep(0.5)
            for name, proc in running.items():
                big = _whole_wheel_downloads(tmp / f"{name}.log")
                assert not big, (f"pip ({name}) started downloading whole wheels ({big}): the index served neither "
                                 "metadata files nor range requests; stopped")
                if name not in seconds and proc.poll() is not None:
                    seconds[name] = time.perf_counter() - start
            assert time.perf_counter() - start < RESOLVE_TIMEOUT_S, f"pip took over {RESOLVE_TIMEOUT_S} s to resolve"
    finally:
        for proc in running.values():
            if proc.poll() is None:
                proc.kill()
    out = {}
    for name, proc in running.items():
        report = tmp / f"{name}.json"
        text = (tmp / f"{name}.log").read_text(errors="replace")
        out[name] = (json.loads(report.read_text()) if proc.returncode == 0 else None, text[-3000:], seconds[name])
    return out


def _chosen(report: dict) -> dict:
    return {item["metadata"]["name"].lower(): item for item in report["install"]}


@pytest.mark.install
@pytest.mark.skipif(sys.platform != "linux", reason="resolves for the Linux machine it runs on")
def test_public_index_resolves_the_course_with_the_triton_torch_requires(resolutions):
    from packaging.version import Version

    report, log, seconds = resolutions["linux"]
    assert report is not None, f'pip install --dry-run ".[test]" failed on the public index ({seconds:.0f} s):\n{log}'
    chosen = _chosen(report)
    assert {"flashlab", "numpy", "torch", "triton"} <= set(chosen), sorted(chosen)
    torch, triton = chosen["torch"]["metadata"], chosen["triton"]["metadata"]
    pins = [Requirement(line) for line in torch.get("requires_dist", [])]
    pins = [r for r in pins if r.name == "triton" and (r.marker is None or r.marker.evaluate(report["environment"]))]
    assert len(pins) == 1, f"torch {torch['version']} should require one triton on Linux; it requires {pins}"
    assert Version(triton["version"]) in pins[0].specifier, \
        f"pip chose triton {triton['version']} but torch {torch['version']} requires {pins[0]}"
    # the doctor's table and range agree with what a fresh install gets
    assert doctor.torch_triton_findings(torch["version"], triton["version"], str(pins[0].specifier)) == []
    assert doctor.torch_triton_findings(torch["version"], triton["version"]) == []
    print(f"linux: torch {torch['version']}, triton {triton['version']}, numpy {chosen['numpy']['metadata']['version']}"
          f", {len(chosen)} distributions, resolved in {seconds:.0f} s")


@pytest.mark.install
def test_macos_resolves_the_numpy_course_without_triton(resolutions):
    report, log, seconds = resolutions["macos"]
    assert report is not None, f"pip could not resolve the course for macOS arm64 ({seconds:.0f} s):\n{log}"
    chosen = _chosen(report)
    assert "triton" not in chosen and {"numpy", "torch", "matplotlib", "jupyterlab"} <= set(chosen), sorted(chosen)
    files = [item["download_info"]["url"].rsplit("/", 1)[-1] for item in chosen.values()]
    foreign = [f for f in files if not (f.endswith("-any.whl") or "macosx" in f)]
    assert not foreign, f"wheels for another platform in the macOS resolution: {foreign}"
    print(f"macos: torch {chosen['torch']['metadata']['version']}, numpy {chosen['numpy']['metadata']['version']}, "
          f"{len(chosen)} distributions, resolved in {seconds:.0f} s")


@pytest.mark.parametrize("ci, outcome", [("true", pytest.fail.Exception), ("", pytest.skip.Exception)])
def test_unreachable_index_fails_in_ci_and_skips_elsewhere(monkeypatch, ci, outcome):
    import urllib.request

    def offline(*args, **kwargs):
        raise OSError("Network is unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="pypi.org/simple is unreachable"):
        _index_reachable_or_skip()


# -- triton < 3.7's interpreter with numpy >= 2.4 ------------------------------------------------

def _simulate_triton36_index(monkeypatch):
    """Make the installed interpreter convert blocks to int the way triton 3.6.0's does: int(array)."""
    from flashlab.kernels import _mode

    _mode.triton()
    from triton.runtime import interpreter

    current = interpreter._patch_lang_tensor

    def triton36(tensor, scope):
        current(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", triton36)
    return interpreter


def _run_loop_with_tensor_bound():
    """A kernel whose loop bound is a tensor (as the course's causal loops are): sum of x[:n]."""
    import torch
    import triton.language as tl

    from flashlab.kernels import _mode

    triton = _mode.triton()

    @triton.jit
    def prefix_sum(X, N, Out, BLOCK: tl.constexpr):
        hi = tl.minimum(tl.load(N), 64)  # a 1-element block, not a Python int
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, hi, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            acc += tl.load(X + offs, mask=offs < hi, other=0.0)
        tl.store(Out, tl.sum(acc, axis=0))

    x = torch.randn(64, generator=torch.Generator().manual_seed(0))
    n, out = torch.tensor([37], dtype=torch.int32), torch.empty(1)
    prefix_sum[(1,)](x, n, out, BLOCK=8)
    return out.item(), x[:37].sum().item()


@pytest.mark.interpreter
def test_triton36_interpreter_is_repaired_for_numpy_24(monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    from flashlab.kernels import _mode

    if not _mode.is_interpreter():
        pytest.skip("Triton is compiled for a GPU here; the repair concerns its CPU interpreter")
    interpreter = _simulate_triton36_index(monkeypatch)
    if _mode.release(np.__version__) >= (2, 4):  # the failure being repaired, shown first
        with pytest.raises(Exception, match="only 0-dimensional arrays"):
            _run_loop_with_tensor_bound()
    _mode._repair_interpreter_index("3.6.0")
    got, want = _run_loop_with_tensor_bound()
    assert abs(got - want) <= 1e-5 * max(1.0, abs(want)), f"repaired loop summed {got}, expected {want}"
    repaired = interpreter._patch_lang_tensor
    _mode._repair_interpreter_index("3.6.0")  # idempotent: no second wrapper
    assert interpreter._patch_lang_tensor is repaired


def test_an_interpreter_flashlab_cannot_repair_is_refused_with_the_fix(monkeypatch):
    pytest.importorskip("triton")
    from triton.runtime import interpreter

    from flashlab.kernels import _mode

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", lambda tensor: None, raising=False)  # another layout
    monkeypatch.setattr(np, "__version__", "2.4.6")
    with pytest.raises(RuntimeError, match=r'triton 3\.5\.1.*numpy 2\.4\.6.*pip install "numpy<2\.4"'):
        _mode._repair_interpreter_index("3.5.1")
    _mode._repair_interpreter_index("3.7.1")  # triton 3.7 converts correctly: left alone


# -- the doctor's version checks (pure functions of version strings) -----------------------------

@pytest.mark.parametrize("torch, triton", [
    ("2.11.0", "3.6.0"),  # the H200's pair
    ("2.12.0", "3.7.0"), ("2.12.1", "3.7.1"),
    ("2.13.0+cpu", "3.7.1"),  # CI's pair: a CPU build that names no triton, judged by the table
])
def test_doctor_accepts_the_pairs_pytorch_ships(torch, triton):
    assert doctor.torch_triton_findings(torch, triton) == []


@pytest.mark.parametrize("torch, triton, shipped", [
    ("2.13.0+cpu", "3.6.0", "3.7.1"), ("2.11.0", "3.7.1", "3.6.0"), ("2.12.0", "3.7.1", "3.7.0"),
])
def test_doctor_flags_a_pair_pytorch_does_not_ship_with_the_fix(torch, triton, shipped):
    (finding,) = doctor.torch_triton_findings(torch, triton)
    assert finding.level == "warn" and f"triton {shipped}" in finding.text, finding
    assert finding.fix == f'pip install "triton=={shipped}"', finding


def test_doctor_prefers_torchs_own_triton_requirement_over_the_table():
    assert doctor.torch_triton_findings("2.13.0", "3.6.0", torch_requires="==3.6.0") == []
    (finding,) = doctor.torch_triton_findings("2.13.0", "3.7.1", torch_requires="==3.6.0")
    assert "built against triton 3.6.0" in finding.text and 'pip install "triton==3.6.0"' in finding.fix


def test_doctor_reads_compatible_release_requirements():
    # torch 2.14's wheels require triton~=3.8.0 (>= 3.8.0, == 3.8.*), not one exact release
    assert doctor._satisfies("3.8.2", "~=3.8.0") and not doctor._satisfies("3.9.0", "~=3.8.0")
    assert not doctor._satisfies("3.7.1", "~=3.8.0") and doctor._satisfies("3.7.1", "==3.7.1")
    texts = [f.text for f in doctor.torch_triton_findings("2.14.1", "3.7.1")]
    assert any("triton~=3.8.0" in t for t in texts) and any("outside" in t for t in texts), texts


@pytest.mark.parametrize("torch, inside", [("2.10.0", False), ("2.11.0", True), ("2.13.0+cu130", True),
                                           ("2.14.0", False), ("3.0.0", False)])
def test_doctor_flags_a_torch_outside_the_tested_range(torch, inside):
    outside = [f for f in doctor.torch_triton_findings(torch, None) if "outside" in f.text]
    assert (not outside) == inside, outside
    assert all(f.fix == f'pip install "{doctor.TORCH_RANGE}"' for f in outside)


@pytest.mark.parametrize("triton, numpy, interpreter, flagged", [
    ("3.6.0", "2.4.6", True, True), ("3.6.0", "2.4.0rc1", True, True),
    ("3.6.0", "2.3.5", True, False),  # the measured working pair
    ("3.6.0", "2.4.6", False, False),  # compiled for a GPU: numpy never meets the interpreter
    ("3.7.1", "2.4.6", True, False), ("3.7.1", "2.5.1", True, False),
])
def test_doctor_flags_triton36_interpreter_with_numpy24_and_names_the_fix(triton, numpy, interpreter, flagged):
    found = doctor.interpreter_numpy_findings(triton, numpy, interpreter)
    assert bool(found) == flagged, found
    assert all('pip install "numpy<2.4"' in f.fix and f"numpy {numpy}" in f.text for f in found)


def test_doctor_prints_the_flashlab_version_and_the_pair(monkeypatch):
    versions = {"flashlab": "0.2.0", "numpy": "2.4.6", "torch": "2.13.0+cpu", "triton": "3.7.1",
                "matplotlib": "3.9", "ipywidgets": "8.1", "jupyterlab": "4.2"}
    monkeypatch.setattr(doctor, "_version", versions.get)
    monkeypatch.setattr(doctor, "_gpu_name", lambda: None)
    monkeypatch.setattr(doctor, "_requires", lambda name: [])
    text = doctor.format_text(doctor.diagnose())
    assert text.splitlines()[0].split() == ["flashlab", "0.2.0"], text
    assert "torch 2.13.0+cpu / triton 3.7.1 (PyTorch ships 2.13.0 with triton 3.7.1)" in text, text
