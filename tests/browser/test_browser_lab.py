"""The explorer widget in a real JupyterLab, driven through Debian's Chromium with Playwright.

Starts ``jupyter lab`` (this venv, 127.0.0.1, a random free port, a token, server root = a temp
dir holding a copy of tests/data/explorer.ipynb), opens the notebook, runs every cell from the
Run menu, waits for the widget's first measurement, changes the batch size and clicks *Measure*,
then checks that the widget redrew (new status line, new image) and that no cell shows an error.
The screenshot is kept in test-artifacts/. Skipped only when Chromium or Playwright is missing.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "tests" / "data" / "explorer.ipynb"
VERDICTS = ROOT / "tests" / "data" / "verdicts.ipynb"
BUDGET = ROOT / "tests" / "data" / "budget.ipynb"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = next((p for p in ("/usr/bin/chromium", "/usr/bin/chromium-browser") if os.path.exists(p)),
                None)
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-quic", "--disable-dev-shm-usage"]

pytestmark = pytest.mark.skipif(CHROMIUM is None,
                                reason="Debian's chromium is not installed (make browser)")
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright (python) is not installed")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, token: str, method: str = "GET", timeout: float = 2.0):
    req = urllib.request.Request(url, method=method, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        body = r.read()
        return json.loads(body) if body else None


@pytest.fixture
def lab(tmp_path):
    """A running JupyterLab serving a copy of the test notebook: yields (base url, token)."""
    root = tmp_path / "root"
    root.mkdir()
    for nb in (NOTEBOOK, VERDICTS, BUDGET):
        shutil.copy(nb, root / nb.name)
    port, token = _free_port(), os.urandom(16).hex()
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_CURRENT_TEST", "NOGRADLAB_LEDGER", "NOGRADLAB_INTERACTIVE")}
    env.update(JUPYTER_RUNTIME_DIR=str(tmp_path / "runtime"),
               JUPYTERLAB_SETTINGS_DIR=str(tmp_path / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(tmp_path / "workspaces"),
               JUPYTER_CONFIG_DIR=str(tmp_path / "config"))
    # no news or update checks: nothing goes out to the network
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    jupyter = Path(sys.executable).with_name("jupyter")
    log = open(tmp_path / "lab.log", "wb")
    proc = subprocess.Popen(
        [str(jupyter), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         "--port-retries=0", "--allow-root", f"--ServerApp.root_dir={root}",
         f"--IdentityProvider.token={token}", "--LabApp.news_url=",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                raise RuntimeError("jupyter lab exited:\n" + (tmp_path / "lab.log").read_text())
            try:
                _get(f"{base}/api/status", token)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("jupyter lab did not answer within 30 s:\n"
                                       + (tmp_path / "lab.log").read_text()) from None
                time.sleep(0.25)
        yield base, token
    finally:
        try:  # shut kernels and server down cleanly, then make sure nothing is left
            _get(f"{base}/api/shutdown", token, method="POST")
            proc.wait(timeout=10)
        except Exception:  # noqa: BLE001
            pass
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def _status(page) -> str:
    return page.locator(".nogradlab-explorer .nogradlab-status").inner_text()


def _image(page) -> str:
    return page.locator(".nogradlab-explorer img").first.get_attribute("src")


def _run_and_interact(page, base, token):
    page.goto(f"{base}/lab/tree/{NOTEBOOK.name}?token={token}")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", state="visible")
    # wait until the frontend has a live kernel (status bar "... | Idle"), then Run > Run All Cells
    page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"\| Idle$")).first.wait_for()
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    # the first code cell's prompt turns from "[ ]:" to "[*]:" (queued/running) or "[1]:"
    page.wait_for_function(
        "() => { const p = document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')[0];"
        " return p && /\\[(\\*|\\d+)\\]/.test(p.textContent); }")

    page.wait_for_selector(".nogradlab-explorer .nogradlab-status:has-text('measurement #1')")
    page.wait_for_selector(".nogradlab-explorer img")
    first_status, first_image = _status(page), _image(page)
    assert "batch 4" in first_status
    page.wait_for_selector(".jp-OutputArea-output:has-text('all cells ran')")

    # change the batch size and press Measure
    batch = page.locator(".nogradlab-explorer .widget-inline-hbox", has_text="batch").locator("input")
    batch.fill("8")
    batch.press("Enter")
    page.locator(".nogradlab-explorer button", has_text="Measure").click()
    page.wait_for_selector(".nogradlab-explorer .nogradlab-status:has-text('measurement #2')")
    page.wait_for_function(
        "src => { const i = document.querySelector('.nogradlab-explorer img');"
        " return i && i.getAttribute('src') !== src; }", arg=first_image)
    second_status, second_image = _status(page), _image(page)
    assert "batch 8" in second_status and second_image != first_image
    table = page.locator(".nogradlab-explorer table").inner_text()
    for mode in ("grad", "no_grad", "inference_mode"):
        assert mode in table
    # no cell shows an error, in the outputs or in the widget's error box
    errors = page.locator(".jp-RenderedText[data-mime-type='application/vnd.jupyter.stderr']",
                          has_text="Traceback")
    assert errors.count() == 0, errors.all_inner_texts()
    assert page.locator(".jp-OutputArea-output .jp-RenderedText", has_text="Error:").count() == 0
    assert page.locator(".nogradlab-error").count() == 0
    return first_status, second_status


def test_explorer_runs_and_redraws_in_jupyterlab(lab):
    base, token = lab
    started = time.monotonic()
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(75_000)  # generous: 2 shared cores may be busy with other work
        shot = ARTIFACTS / "browser_lab.png"
        try:
            statuses = _run_and_interact(page, base, token)
        except BaseException:
            shot = ARTIFACTS / "browser_lab_failure.png"
            raise
        finally:
            page.screenshot(path=str(shot), full_page=True)
            browser.close()
    seconds = time.monotonic() - started
    (ARTIFACTS / "browser_lab.json").write_text(json.dumps(
        {"seconds": round(seconds, 1), "statuses": statuses}, indent=1))
    print(f"browser test: {seconds:.1f} s in the browser")


def _open_and_run_all(page, base, token, name):
    page.goto(f"{base}/lab/tree/{name}?token={token}")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", state="visible")
    page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"\| Idle$")).first.wait_for()
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    page.wait_for_selector(".jp-OutputArea-output:has-text('all cells ran')")


def _browser(p):
    return p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)


def test_verdict_boxes_are_at_most_eight_lines_until_opened(lab):
    """The tallest verdict boxes (C03, C20, C04, C25, C01) in JupyterLab at 1280 px: each is at most
    8 lines of its own text tall (its picture aside) before its details are opened, and no wider than its cell."""
    base, token = lab
    with sync_api.sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(300_000)  # five checks on 2 shared cores
        try:
            _open_and_run_all(page, base, token, VERDICTS.name)
            boxes = page.locator(".jp-OutputArea-output .nogradlab-result")
            assert boxes.count() == 5
            sizes = page.evaluate("""() => [...document.querySelectorAll('.jp-OutputArea-output .nogradlab-result')].map(b => {
                const lh = parseFloat(getComputedStyle(b.firstElementChild).lineHeight);
                const pic = b.querySelector('.picture');  // the verdict display's one picture: not text lines
                const cell = b.closest('.jp-OutputArea-output').getBoundingClientRect().width;
                const h = b.getBoundingClientRect().height - (pic ? pic.getBoundingClientRect().height : 0);
                return {lines: h / lh, width: b.getBoundingClientRect().width,
                        cell: cell, text: b.innerText.slice(0, 60)}; })""")
            for sz in sizes:
                assert sz["lines"] <= 8, sz
                assert sz["width"] <= sz["cell"] + 1, sz
            boxes.nth(1).locator("summary").first.click()  # opened, the details are one click away
            assert "Rule." in boxes.nth(1).inner_text()
        finally:
            page.screenshot(path=str(ARTIFACTS / "browser_verdicts.png"), full_page=True)
            browser.close()


def test_budget_slider_bursts_compute_once_and_never_show_a_stale_result(lab):
    """Four arrow-key presses on the budget slider: the old table is gone at once, the status names
    the new setting, one computation runs for the last value, and it is done within about one
    computation's time of the last press (the first computation's time, measured here, is the yardstick)."""
    base, token = lab
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as p:
        browser = _browser(p)
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(240_000)
        try:
            started = time.monotonic()
            _open_and_run_all(page, base, token, BUDGET.name)
            page.wait_for_selector(".nogradlab-budget-explorer .nogradlab-status:has-text('computation #1')")
            first = time.monotonic() - started  # an upper bound of one computation (it includes the start)
            slider = page.locator(".nogradlab-budget-explorer .widget-slider .ui-slider-handle, "
                                  ".nogradlab-budget-explorer .noUi-handle").first
            slider.focus()
            for _ in range(4):
                page.keyboard.press("ArrowRight")
                page.wait_for_timeout(150)
            last = time.monotonic()
            # at once: no table under the old caption
            page.wait_for_selector(".nogradlab-budget-explorer .nogradlab-pending")
            assert page.locator(".nogradlab-budget-explorer .jp-OutputArea-output table").count() == 0
            page.wait_for_selector(".nogradlab-budget-explorer .nogradlab-status:has-text('computation #2')")
            done = time.monotonic() - last
            status = page.locator(".nogradlab-budget-explorer .nogradlab-status").inner_text()
            readout = page.locator(".nogradlab-budget-explorer .widget-readout").first.inner_text()
            assert f"{float(readout):.2f} GiB" in status, (status, readout)  # the result is the last setting's
            assert done <= first + 5, (done, first)
            page.wait_for_timeout(2000)  # nothing else comes: the stale requests were dropped
            assert "computation #3" not in page.locator(".nogradlab-budget-explorer").inner_text()
        finally:
            page.screenshot(path=str(ARTIFACTS / "browser_budget.png"), full_page=True)
            browser.close()
