"""The course in a real browser: JupyterLab + headless Chromium (Debian ``chromium``) via Playwright.

Starts JupyterLab on a free localhost port with a token, serving a temporary copy of the
notebooks (so nothing is autosaved into the repository), opens notebook 03, runs every cell,
finds the tile-schedule widget, moves its step slider and checks that the picture changed.
Screenshots go to ``artifacts/`` (git-ignored) as the test's artifact.

Skips when chromium or playwright is missing, unless ``FLASHLAB_REQUIRE_BROWSER=1`` (CI), in
which case it fails.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"
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


@pytest.fixture
def lab(tmp_path):
    """A running JupyterLab serving a copy of the notebooks; yields (base_url, token)."""
    if not _jupyter().exists():
        _missing(f"jupyter is not installed beside {sys.executable}")
    root = tmp_path / "root"
    shutil.copytree(NOTEBOOKS, root, ignore=shutil.ignore_patterns("_src", "_build.py", ".ipynb_checkpoints"))
    port, token = _free_port(), secrets.token_hex(16)
    env = dict(os.environ)
    env.update({
        "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
        "FLASHLAB_EXERCISES_DIR": str(REPO / "solutions"),
        "FLASHLAB_ARTIFACTS_DIR": str(tmp_path / "artifacts"),
        "FLASHLAB_DEVICE": "cpu",
        "TRITON_INTERPRET": "1",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
    })
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
        yield base, token
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
    base, token = lab
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
    src_after, shot_after = _widget_picture(page, widget)
    widget.screenshot(path=str(ARTIFACTS / "browser_notebook03_widget_after.png"))
    page.screenshot(path=str(ARTIFACTS / "browser_notebook03.png"), full_page=True)

    assert src_after != src_before, "moving the slider did not change the widget's image data"
    assert shot_after != shot_before, "moving the slider did not change the picture on screen"
    state = page.evaluate(_NOTEBOOK_STATE)
    assert not state["errors"], "moving the slider raised:\n" + "\n".join(state["errors"])
