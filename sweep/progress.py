"""One compact live view of a grid or search instead of Ray Tune's repeated status tables.

    quickstart  117 trained  0 running  0 failed  234/min  round 11, 8/8 slices finished

Each field is explained in the README's glossary ("The main job").

On a terminal the line is rewritten in place. In a Jupyter notebook (hs.grid, hs.search in a cell) it is tqdm's
notebook progress bar with the same line beside it; without ipywidgets, which that bar is drawn with, the line is
rewritten in place in the cell (Jupyter renders a carriage return as a terminal does). Elsewhere (CI logs,
`ray job logs`) a line is printed when the counts change (at most every LOG_INTERVAL_S seconds), at least every
QUIET_LOG_S seconds, and when the sweep ends. Members are counted from their result.json files under out/trials, so
packs, resumed sweeps and crashed workers all count what is really finished.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable

from ray.tune import ProgressReporter

TTY_INTERVAL_S = 0.5  # refresh of the in-place line on a terminal, and of a notebook's bar
LOG_INTERVAL_S = 10.0  # in a log file, at most one line this often
QUIET_LOG_S = 120.0  # and at least one this often, counts changed or not


class ProgressView(ProgressReporter):
    """title: the sweep's name; total: members to train (None for a search, which decides as it goes);
    summary: what the sweep has found so far, one short phrase; refresh: brings out/trials up to date before they are
    counted (a bucket's mirror: storage.out_dir.OutDir.pull_members)."""

    def __init__(self, title: str, out: Path, total: int | None, summary: Callable[[], str] = lambda: "",
                 refresh: Callable[[], None] = lambda: None):
        self.title, self.members_dir, self.total = title, Path(out).resolve() / "trials", total
        self.summary, self.refresh = summary, refresh
        self.setup()

    def setup(self, *args, **kwargs) -> None:
        """Tune calls this when the run starts (also after a restore): the rate counts from here."""
        self.started, self.checked, self.printed = time.monotonic(), 0.0, 0.0
        self.done_at_start = self.count_done()
        self.counts = None  # (members trained, packs running, packs failed) of the last line printed
        self.bar = None  # in a notebook: tqdm's bar, shown at the first report

    def __getstate__(self) -> dict:
        """Tune pickles its run config (tuner.pkl); summary and refresh are closures over live objects, and a notebook's
        bar a widget: they stay behind."""
        return vars(self) | {"summary": _nothing, "refresh": _nothing, "bar": None}

    def count_done(self) -> int:
        return sum(1 for _ in self.members_dir.glob("*/result.json")) if self.members_dir.exists() else 0

    def should_report(self, trials, done: bool = False) -> bool:
        interval = LOG_INTERVAL_S if display_kind() == "log" else TTY_INTERVAL_S
        return done or time.monotonic() - self.checked >= interval

    def report(self, trials, done: bool, *sys_info: str) -> None:
        """Tune's hook; `trials` are its Tune trials, our packs."""
        self.refresh()
        statuses = [pack.status for pack in trials]
        counts = (self.count_done(), statuses.count("RUNNING"), statuses.count("ERROR"))
        self.checked = time.monotonic()
        kind, quiet = display_kind(), self.checked - self.printed >= QUIET_LOG_S
        if not (kind != "log" or done or quiet or counts != self.counts):
            return
        self.printed, self.counts = self.checked, counts
        line = self.line(statuses)
        if kind == "notebook":
            self.show_bar(counts[0], line, done)
            return
        ends = "\n" if done or kind == "log" else ""
        sys.stdout.write({"tty": "\r\x1b[2K", "cell": "\r", "log": ""}[kind] + line + ends)
        sys.stdout.flush()

    def show_bar(self, trained: int, line: str, done: bool) -> None:
        """tqdm's notebook bar: members trained of the total (a search, with no total, shows an 'info' bar), the line
        beside it. Closed when the sweep ends: green, or red where members of a grid did not finish."""
        if self.bar is None:
            from tqdm.notebook import tqdm

            self.bar = tqdm(total=self.total, bar_format="{bar} {desc}", leave=True)
        self.bar.n = trained
        self.bar.set_description_str(line)  # (and redraws)
        if done:
            self.bar.close()
            self.bar = None

    def line(self, statuses: list[str]) -> str:
        """The view's text, from the packs' (Tune trials') statuses and the members' result files."""
        done = self.count_done()
        elapsed = max(time.monotonic() - self.started, 1e-9)
        rate = (done - self.done_at_start) / elapsed
        parts = [self.title, f"{done}/{self.total} trained" if self.total else f"{done} trained",
                 f"{statuses.count('RUNNING')} running", f"{statuses.count('ERROR')} failed",
                 _per_minute(rate)]
        if self.total and rate > 0 and done < self.total:
            parts.append(f"ETA {_clock((self.total - done) / rate)}")
        parts.append(self.summary())
        return "  ".join(p for p in parts if p)


def display_kind() -> str:
    """How the view shows itself in this process: "tty" (a terminal: the line rewritten in place), "notebook" (a
    Jupyter kernel with ipywidgets: tqdm's notebook bar), "cell" (a Jupyter kernel without it: the line rewritten in
    place with a carriage return, which Jupyter renders as a terminal does), or "log" (anything else: a line at a
    time)."""
    if in_jupyter():
        return "notebook" if _has_widgets() else "cell"
    return "tty" if sys.stdout.isatty() else "log"


def in_jupyter() -> bool:
    """Whether this process is a Jupyter kernel (Jupyter notebook or lab, VS Code, Colab), whose stdout is a cell's
    output; an IPython terminal is not. Imports nothing: a kernel has loaded both modules already."""
    ipython, zmqshell = sys.modules.get("IPython"), sys.modules.get("ipykernel.zmqshell")
    return None not in (ipython, zmqshell) and isinstance(ipython.get_ipython(), zmqshell.ZMQInteractiveShell)


def _has_widgets() -> bool:
    """Whether tqdm can draw its notebook bar: it needs ipywidgets (the notebook extra)."""
    try:
        from tqdm.notebook import IProgress
    except ImportError:
        return False
    return IProgress is not None


def _per_minute(rate_per_s: float) -> str:
    """Trainings per minute, one unit whatever the speed, to about two significant digits: two decimals below 1/min
    (one an hour: 0.02/min), one below 100/min (the transformer search trained 144 seeds in 50 min: 2.9/min), none
    from 100/min on (the quickstart's one-step seeds: 234/min)."""
    per_minute = rate_per_s * 60
    return f"{per_minute:.{2 if per_minute < 1 else 1 if per_minute < 100 else 0}f}/min"


def _nothing() -> str:  # an empty summary, and a refresh that does nothing (what it returns is not read)
    return ""


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
