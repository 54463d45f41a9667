"""The local HTML report in a real browser: Debian's headless Chromium opens report.html, which must load every
image, log no console error and not render blank.

Chromium is driven over the DevTools protocol (websocket-client): console messages, uncaught exceptions and failed
loads arrive as events, so nothing depends on the wording of Chromium's stderr. `make test` installs the package
(tests/install_debian_packages.sh); without /usr/bin/chromium these tests skip.
"""
from __future__ import annotations

import base64
import io
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests import warm_cli
from tests.conftest import CONFIGS


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-extensions",
                  "--remote-debugging-port=0", "--remote-allow-origins=*", "--hide-scrollbars"]
# Bounds on a hang, not on speed: on 2 cores beside three busy test workers Chromium once took over 30 s to open
# its DevTools port (2026-12-01, `make test TEST_WORKERS=3`).
START_TIMEOUT_S = 120
LOAD_TIMEOUT_S = 60
WINDOW = (1280, 1600)


class Browser:
    """One headless Chromium with a fresh profile, and a DevTools websocket on its first page."""

    def __init__(self):
        import websocket  # websocket-client

        self.profile = Path(tempfile.mkdtemp(prefix="hs-chromium-"))
        self.log = open(self.profile / "stderr.log", "wb")
        self.process = subprocess.Popen(
            [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", f"--window-size={WINDOW[0]},{WINDOW[1]}",
             "about:blank"],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        port = self._devtools_port()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as response:
            pages = [t for t in json.load(response) if t["type"] == "page"]
        self.socket = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=LOAD_TIMEOUT_S)
        self.next_id, self.events = 0, []
        for domain in ("Page", "Runtime", "Log"):
            self.call(f"{domain}.enable")

    def _devtools_port(self) -> int:
        """Chromium writes the port it picked to DevToolsActivePort in the profile."""
        deadline = time.monotonic() + START_TIMEOUT_S
        marker = self.profile / "DevToolsActivePort"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.process.returncode}: {self.stderr()[-2000:]}")
            if marker.exists() and marker.read_text().strip():
                return int(marker.read_text().splitlines()[0])
            time.sleep(0.1)
        raise RuntimeError(f"chromium opened no DevTools port in {START_TIMEOUT_S} s: {self.stderr()[-2000:]}")

    def stderr(self) -> str:
        return (self.profile / "stderr.log").read_text(errors="replace")

    def call(self, method: str, **params) -> dict:
        """Send a command and wait for its answer; events that arrive meanwhile are kept in self.events."""
        self.next_id += 1
        self.socket.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]
            self.events.append(message)

    def wait_for(self, event: str) -> None:
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while not any(e.get("method") == event for e in self.events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {event} within {LOAD_TIMEOUT_S} s")
            self.events.append(json.loads(self.socket.recv()))

    def open(self, path: Path) -> None:
        self.events.clear()
        self.call("Page.navigate", url=path.resolve().as_uri())
        self.wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"]["value"]

    def screenshot(self, full_page: bool = False) -> bytes:
        params = {"format": "png"}
        if full_page:
            size = self.call("Page.getLayoutMetrics")["cssContentSize"]
            params |= {"captureBeyondViewport": True,
                       "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}}
        return base64.b64decode(self.call("Page.captureScreenshot", **params)["data"])

    def errors(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions, and errors Chromium logged (e.g. failed loads)."""
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "warning", "assert"):
                found.append(f"console.{params['type']}: " + " ".join(str(a.get("value", a.get("description")))
                                                                       for a in params.get("args", [])))
            elif method == "Runtime.exceptionThrown":
                found.append("uncaught: " + params["exceptionDetails"].get("text", ""))
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                found.append(f"log {params['entry']['level']}: {params['entry']['text']}")
        return found

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except Exception:
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)  # its own session: only the processes this test started
            self.process.wait(timeout=10)
        self.socket.close()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


def not_blank(png: bytes) -> bool:
    """Text and figures, not a white (or one-colour) page: many colours and a fair share of non-white pixels."""
    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), dtype=np.int64)
    colours = np.unique(image[..., 0] << 16 | image[..., 1] << 8 | image[..., 2])
    ink = (image.min(axis=2) < 200).mean()
    return len(colours) > 100 and ink > 0.03


def headsweep(*args) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    return warm_cli.run(list(map(str, args)), env, timeout=300)


@pytest.fixture(scope="module")
def train_report(tmp_path_factory) -> Path:
    """A transformer train dir (attention patterns included) and its rebuilt report."""
    out = tmp_path_factory.mktemp("browser") / "train"
    proc = headsweep("train", CONFIGS / "debug.yaml", "optim.max_steps=100", "--out", out)
    assert proc.returncode == 0, proc.stderr
    proc = headsweep("report", out)
    assert proc.returncode == 0, proc.stderr
    return out / "report.html"


@pytest.fixture(scope="module")
def grid_report(tmp_path_factory) -> Path:
    """A grid output dir made by the grid's own writers from real one-step trainings (no Ray: the grid itself is
    tested in tests/integration), and its rebuilt report."""
    from sweep import grid, packing, space
    from sweep.storage.out_dir import OutDir
    from trainables import config
    from trainables.io import atomic_write
    from trainables.logger import member_logger
    from trainables.train import save, train

    out = tmp_path_factory.mktemp("browser") / "grid"
    base, sweep, points = space.load_sweep(CONFIGS / "debug_grid.yaml", ["sweep.seeds=[0]"])
    members = packing.members(points, OutDir(out))
    for member in members:
        cfg = config.with_point(config.to_dict(base), member["point"])
        trial = Path(member["dir"])
        trial.mkdir(parents=True)
        (trial / "config.yaml").write_text(config.to_yaml(cfg))
        with member_logger(cfg, trial) as logger:
            result = train(cfg, logger)
        save(result, trial)
    (out / "config.yaml").write_text(config.to_yaml(base, sweep=sweep))
    atomic_write(out / "results.csv", grid.collect(members, {}).to_csv(index=False))
    proc = headsweep("report", out)
    assert proc.returncode == 0, proc.stderr
    return out / "report.html"


@pytest.fixture(scope="module")
def search_report(tmp_path_factory) -> Path:
    """A threshold search's output dir: the real search loop and tables over the fake executor of the unit tests
    (each point's result.json written at once from its real data/* measures), and the report the verb builds."""
    from dashboards import report
    from sweep.search import loop, tables
    from sweep.search import studies as search_studies
    from sweep.storage.out_dir import OutDir
    from sweep.search.config import load_search
    from tests.unit.conftest import R_NEEDED, fake_executor
    from trainables import config

    out = tmp_path_factory.mktemp("browser") / "search"
    out.mkdir()
    base, search = load_search(CONFIGS / "debug_search.yaml", [])
    all_slices = search_studies.slices(base, search, base.name)
    (out / "config.yaml").write_text(config.to_yaml(base, search=search))
    storage = search_studies.storage_for(None, out.resolve())
    opened = {sl.study_name: search_studies.open_study(sl, search, storage) for sl in all_slices}
    with pytest.MonkeyPatch.context() as patch:
        fake_executor(patch, lambda point, m: 1.0 if m["data/max_sum_ratio"] <= R_NEEDED else 0.5)
        loop.run(base, search, all_slices, opened, OutDir(out), extend=0)
    tables.write(out, base, search, opened, all_slices)
    return report.build(out)


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip("no chromium: `bash tests/install_debian_packages.sh` (what `make test` runs) installs it")
    opened = Browser()
    try:
        yield opened
    finally:
        opened.close()


def test_train_report_holds_curves_and_every_attention_figure(train_report):
    page = train_report.read_text()
    assert "headsweep train: debug" in page and "Learning curves (metrics.jsonl)" in page
    for key in ("attention/query_L0H0", "attention/query_L1H0", "attention/pattern_L0H0", "attention/pattern_L1H0",
                "ood/acc_by_pair"):
        assert f"<figcaption>{key}</figcaption>" in page
    assert "<script" not in page


def test_grid_report_holds_diagram_gallery_and_results(grid_report):
    page = grid_report.read_text()
    for heading in ("Phase diagram: mean ood/acc over seeds", "Final metrics against data/max_sum_ratio",
                    "Attention gallery: 4 of 4 members", "Results (one row per member)"):
        assert heading in page
    assert (grid_report.parent / "phase_diagram.png").exists()  # written beside results.csv by the same builder
    assert "<script" not in page


def test_search_report_holds_the_answer_traces_and_threshold(search_report):
    page = search_report.read_text()
    for heading in ("Minimal diversity for OOD generalization (min_diversity.csv)", "Search traces",
                    "Measured threshold: data/max_sum_ratio at diversity*", "Results (one row per member)"):
        assert heading in page
    assert "<script" not in page


@pytest.mark.parametrize("report, figures", [("train_report", 5), ("grid_report", 5), ("search_report", 2)])
def test_report_renders_in_headless_chromium(browser, report, figures, request, tmp_path):
    path = request.getfixturevalue(report)
    browser.open(path)
    images, broken = browser.evaluate(
        "[document.images.length, Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0).length]")
    screenshot = browser.screenshot()
    (tmp_path / f"{report}.png").write_bytes(screenshot)  # for a person to look at: pytest's tmp dir
    (tmp_path / f"{report}_full.png").write_bytes(browser.screenshot(full_page=True))
    assert browser.errors() == []
    assert images >= figures and broken == 0, f"{broken} of {images} images did not load"
    assert browser.evaluate("document.title").startswith("headsweep ")
    assert not_blank(screenshot), f"blank page: see {tmp_path / f'{report}.png'}"


def test_the_search_reports_answer_table_speaks_the_terminals_names_and_fits_a_laptop_window(browser, search_report):
    """The answer table says K*_q [interval] as the terminal does (the CSV's diversity_star columns are folded away
    below it) and fits the 1280 px window: no column scrolls off to the right."""
    browser.open(search_report)
    fits = browser.evaluate(
        "(() => { const wraps = Array.from(document.querySelectorAll('.table-wrap'));"
        " const w = wraps.find(w => w.querySelector('thead') && w.querySelector('thead').textContent"
        ".includes('K*_q [interval]')); if (!w) return 'no answer table';"
        " return [w.scrollWidth, w.clientWidth, w.closest('details') === null]; })()")
    assert fits != "no answer table"
    scroll, visible, shown = fits
    assert shown and scroll <= visible, f"the answer table is {scroll} px wide in a {visible} px box"
    page = search_report.read_text()
    assert page.index("K*_q [interval]") < page.index("<summary>Every column of min_diversity.csv</summary>") \
        < page.index("<th>diversity_star_low</th>")


def test_the_blank_check_can_fail():
    white = io.BytesIO()
    Image.new("RGB", (200, 100), "white").save(white, format="PNG")
    assert not not_blank(white.getvalue())
