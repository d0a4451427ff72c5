"""The course in a real browser: JupyterLab + headless Chromium (Debian ``chromium``) via Playwright.

Starts JupyterLab on a free localhost port with a token, serving a work area prepared in a
temporary folder (``flashlab.workarea``, what ``make lab`` serves; nothing is autosaved into the
repository). Two walks:

- the learner's path through exercise 1: open notebook 01 and ``exercises/ex01_naive.py`` from
  the file browser, write a solution in JupyterLab's editor, save, run the check cell of
  notebook 01 and read the rendered report: every check passes;
- notebook 03: run every cell, find the tile-schedule widget, move its step slider and check
  that the picture changed and that the slider and the picture name the same step.

Screenshots go to ``artifacts/`` (git-ignored) as the test's artifact.

Skips when chromium or playwright is missing, unless ``FLASHLAB_REQUIRE_BROWSER=1`` (CI), in
which case it fails.
"""
from __future__ import annotations

import contextlib
import os
import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
ARTIFACTS = REPO / "artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
NOTEBOOK = "03_tiled_attention.ipynb"
RUN_ALL_TIMEOUT_S = 240


def _missing(reason: str) -> None:
    if os.environ.get("FLASHLAB_REQUIRE_BROWSER") == "1":
        pytest.fail(f"FLASHLAB_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason)


def _jupyter() -> Path:
    return Path(sys.executable).with_name("jupyter")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_server(url: str, proc: subprocess.Popen, log: Path, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"JupyterLab exited with code {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"JupyterLab did not answer {url} within {timeout_s} s:\n{log.read_text()[-3000:]}")


@contextlib.contextmanager
def _running_lab(tmp_path: Path, exercises_dir: Path | None):
    """JupyterLab serving a fresh work area in ``tmp_path/work``; yields (base_url, token, root).

    ``exercises_dir`` is what the notebooks' checks grade (FLASHLAB_EXERCISES_DIR); None leaves
    the grader to find the work area's own ``exercises/``, as on a learner's machine."""
    from flashlab import workarea

    if not _jupyter().exists():
        _missing(f"jupyter is not installed beside {sys.executable}")
    root = workarea.prepare(root=tmp_path / "work", repo=REPO).root
    port, token = _free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k != "FLASHLAB_EXERCISES_DIR"}
    env.update({
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
        "FLASHLAB_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
        "FLASHLAB_DEVICE": "cpu",
        "TRITON_INTERPRET": "1",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    })
    if exercises_dir is not None:
        env["FLASHLAB_EXERCISES_DIR"] = str(exercises_dir)
    log = tmp_path / "jupyterlab.log"
    with open(log, "w") as log_file:
        proc = subprocess.Popen(
            [str(_jupyter()), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
             f"--ServerApp.root_dir={root}", f"--IdentityProvider.token={token}",
             "--ServerApp.port_retries=0", "--LabApp.expose_app_in_browser=True",
             # offline: no extension index, no news or update checks
             "--LabApp.extension_manager=readonly", "--LabApp.news_url=",
             "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
             *(["--allow-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else [])],
            cwd=root, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_server(f"{base}/api/status?token={token}", proc, log)
        yield base, token, root
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def lab(tmp_path):
    """JupyterLab on a work area whose checks grade solutions/; yields (base_url, token, root)."""
    with _running_lab(tmp_path, REPO / "solutions") as running:
        yield running


@pytest.fixture
def learner_lab(tmp_path):
    """JupyterLab on a work area whose checks grade its own exercises/, as ``make lab`` serves it."""
    with _running_lab(tmp_path, None) as running:
        yield running


@pytest.fixture
def browser_page(tmp_path):
    """A fresh headless Chromium page (new user-data-dir)."""
    if not Path(CHROMIUM).exists():
        _missing(f"{CHROMIUM} is missing (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _missing("playwright is not installed (pip install playwright)")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1400, "height": 1000})
        try:
            page = context.pages[0] if context.pages else context.new_page()
            page.set_default_timeout(60_000)
            yield page
        finally:
            context.close()


def _wait_for_idle_kernel(page, timeout_ms: int = 90_000) -> None:
    page.wait_for_function("() => { const w = window.jupyterapp.shell.currentWidget;"
                           " const s = w && w.sessionContext;"
                           " return s && s.session && s.session.kernel && s.session.kernel.status === 'idle'; }",
                           timeout=timeout_ms)


# JavaScript run inside JupyterLab (the app object is exposed by --LabApp.expose_app_in_browser)
_NOTEBOOK_STATE = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  if (!panel || !panel.content || !panel.content.model) return null;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  const cells = panel.content.model.toJSON().cells.filter(c => c.cell_type === 'code');
  return {
    kernel: kernel ? kernel.name : null,
    status: kernel ? kernel.status : null,
    executed: cells.filter(c => c.execution_count !== null).length,
    total: cells.length,
    errors: cells.flatMap(c => (c.outputs || []).filter(o => o.output_type === 'error')
                                   .map(o => o.ename + ': ' + o.evalue + '\\n' + (o.traceback || []).join('\\n'))),
  };
}"""


def _widget_picture(page, widget):
    """(bytes of the widget's picture, its screenshot): the first <img> below the slider's widget box."""
    image = widget.locator("img").first
    image.wait_for(state="visible", timeout=60_000)
    return image.get_attribute("src"), image.screenshot()


def test_tile_schedule_slider_redraws_the_picture_in_jupyterlab(lab, browser_page):
    base, token, _ = lab
    page = browser_page
    ARTIFACTS.mkdir(exist_ok=True)
    page.goto(f"{base}/lab/tree/{NOTEBOOK}?token={token}")
    page.wait_for_function("() => window.jupyterapp && window.jupyterapp.shell.currentWidget "
                           "&& window.jupyterapp.shell.currentWidget.sessionContext", timeout=90_000)
    page.wait_for_function("() => { const s = window.jupyterapp.shell.currentWidget.sessionContext;"
                           " return s.session && s.session.kernel && s.session.kernel.status === 'idle'; }",
                           timeout=90_000)
    state = page.evaluate(_NOTEBOOK_STATE)
    assert state["kernel"] == "flashlab", f"notebook 03 started kernel {state['kernel']!r}, expected 'flashlab'"

    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    deadline = time.monotonic() + RUN_ALL_TIMEOUT_S
    while True:
        state = page.evaluate(_NOTEBOOK_STATE)
        assert not state["errors"], "a cell of notebook 03 raised in JupyterLab:\n" + "\n".join(state["errors"])
        if state["executed"] == state["total"] and state["status"] == "idle":
            break
        if time.monotonic() > deadline:
            page.screenshot(path=str(ARTIFACTS / "browser_notebook03_timeout.png"), full_page=True)
            raise AssertionError(f"notebook 03 did not finish within {RUN_ALL_TIMEOUT_S} s: {state}")
        time.sleep(1)

    # the tile-schedule widget: the widget box that holds a step slider and a picture
    slider = page.locator(".jp-OutputArea-output .widget-slider").first
    slider.wait_for(state="visible", timeout=60_000)
    widget = page.locator(".jp-OutputArea-output").filter(has=page.locator(".widget-slider")).first
    widget.scroll_into_view_if_needed()
    src_before, shot_before = _widget_picture(page, widget)
    widget.screenshot(path=str(ARTIFACTS / "browser_notebook03_widget_before.png"))

    handle = slider.locator(".noUi-handle").first
    handle.focus()
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    page.wait_for_function(
        "([el, before]) => { const img = el.querySelector('img'); return img && img.src !== before; }",
        arg=[widget.element_handle(), src_before], timeout=60_000)
    page.wait_for_timeout(500)  # let the new image finish painting
    readout = widget.locator(".widget-readout").first.inner_text().strip()
    assert readout == "3", f"three steps right of step 0 the slider reads {readout!r}; the picture shows step 3"
    src_after, shot_after = _widget_picture(page, widget)
    widget.screenshot(path=str(ARTIFACTS / "browser_notebook03_widget_after.png"))
    page.screenshot(path=str(ARTIFACTS / "browser_notebook03.png"), full_page=True)

    assert src_after != src_before, "moving the slider did not change the widget's image data"
    assert shot_after != shot_before, "moving the slider did not change the picture on screen"
    state = page.evaluate(_NOTEBOOK_STATE)
    assert not state["errors"], "moving the slider raised:\n" + "\n".join(state["errors"])


LEARNER_BUDGET_S = 60  # the learner's walk, once JupyterLab answers


def test_learner_writes_exercise_1_in_jupyterlab_and_the_notebook_check_passes(learner_lab, browser_page):
    """The learner's path: notebook 01 and exercises/ex01_naive.py opened from the file browser,
    a solution entered in JupyterLab's editor and saved, the check cell run, its report read."""
    base, token, root = learner_lab
    page = browser_page
    ARTIFACTS.mkdir(exist_ok=True)
    start = time.monotonic()
    page.goto(f"{base}/lab?token={token}")
    browser = page.locator(".jp-DirListing-content")
    browser.wait_for(state="visible", timeout=90_000)

    # the file browser at the work area's root: the notebooks and exercises/, not the course sources
    names = set(browser.locator(".jp-DirListing-itemText").all_inner_texts())
    assert {"01_naive_attention.ipynb", "exercises"} <= names, f"file browser shows {sorted(names)}"
    assert not names & {"_src", "_build.py"}, f"the course sources are in the learner's view: {sorted(names)}"
    page.screenshot(path=str(ARTIFACTS / "browser_learner_1_file_browser.png"))

    browser.get_by_text("01_naive_attention.ipynb", exact=True).dblclick()
    page.wait_for_function("() => { const w = window.jupyterapp.shell.currentWidget;"
                           " return w && w.context && w.context.path === '01_naive_attention.ipynb'; }")
    _wait_for_idle_kernel(page)

    # exercises/ex01_naive.py from the file browser, into JupyterLab's editor
    browser.get_by_text("exercises", exact=True).dblclick()
    browser.get_by_text("ex01_naive.py", exact=True).dblclick()
    page.wait_for_function("() => { const w = window.jupyterapp.shell.currentWidget;"
                           " return w && w.context && w.context.path === 'exercises/ex01_naive.py'; }")
    editor = page.locator(".jp-FileEditor .cm-content").last
    editor.wait_for(state="visible")
    assert "NotImplementedError" in editor.inner_text(), "the editor does not show the exercise stub"
    solution = (REPO / "solutions" / "ex01_naive.py").read_text(encoding="utf-8")
    editor.click()
    page.keyboard.press("Control+a")
    page.keyboard.insert_text(solution)  # what a paste does: the text arrives in one input event
    page.keyboard.press("Control+s")
    saved = root / "exercises" / "ex01_naive.py"
    deadline = time.monotonic() + 20
    while saved.read_text(encoding="utf-8") != solution and time.monotonic() < deadline:
        time.sleep(0.2)
    assert saved.read_text(encoding="utf-8") == solution, "saving in JupyterLab did not write the typed solution"
    page.screenshot(path=str(ARTIFACTS / "browser_learner_2_editor.png"))

    # back to notebook 01: run the check cell (it imports what it needs), as Shift+Enter would
    page.locator(".lm-TabBar-tab").filter(has_text="01_naive_attention.ipynb").click()
    page.wait_for_function("() => window.jupyterapp.shell.currentWidget.context.path === '01_naive_attention.ipynb'")
    check_cell = page.locator(".jp-CodeCell").filter(has_text='check("ex01_naive")').first
    check_cell.scroll_into_view_if_needed()
    check_cell.locator(".jp-InputPrompt").click()  # select the cell (command mode)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-cell')")
    report = check_cell.locator(".jp-OutputArea-output")
    report.filter(has_text="score").first.wait_for(state="visible", timeout=90_000)
    _wait_for_idle_kernel(page)
    check_cell.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "browser_learner_3_check_passed.png"))

    state = page.evaluate(_NOTEBOOK_STATE)
    assert not state["errors"], "a cell of notebook 01 raised:\n" + "\n".join(state["errors"])
    text = report.first.inner_text()
    score = re.search(r"score:\s*(\d+)\s*/\s*(\d+)", text)
    assert score, f"no score in the rendered report:\n{text}"
    assert int(score.group(1)) == int(score.group(2)) > 0 and "not all checks passed" not in text, (
        f"the learner's saved solution did not pass the notebook's check:\n{text}")
    elapsed = time.monotonic() - start
    assert elapsed < LEARNER_BUDGET_S, f"the walk took {elapsed:.0f} s, budget {LEARNER_BUDGET_S} s"
