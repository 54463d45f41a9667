"""One compact live view of a grid or search instead of Ray Tune's repeated status tables.

    quickstart  117 trained  0 running  0 failed  234/min  round 11, 8/8 slices finished

Members trained (of the total, for a grid, which then adds an ETA), packs (Ray Tune trials) running and failed for
good, members trained per minute since this run started (always that one unit), and the sweep's summary: a search's
round and settled slices, a grid's count of members that generalize OOD. The README's glossary, "The main job", explains each.

On a terminal the line is rewritten in place; elsewhere (CI logs, `ray job logs`) a line is printed when the counts
change (at most every LOG_INTERVAL_S seconds), at least every QUIET_LOG_S seconds, and when the sweep ends. Members are counted from their result.json files under out/trials,
so packs, resumed sweeps and crashed workers all count what is really finished.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable

from ray.tune import ProgressReporter

TTY_INTERVAL_S = 0.5  # refresh of the in-place line on a terminal
LOG_INTERVAL_S = 10.0  # in a log file, at most one line this often
QUIET_LOG_S = 120.0  # and at least one this often, counts changed or not


class ProgressView(ProgressReporter):
    """title: the sweep's name; total: members to train (None for a search, which decides as it goes);
    summary: what the sweep has found so far, one short phrase; refresh: brings out/trials up to date before they are
    counted (a bucket's mirror: storage.out_dir.OutDir.pull_trials)."""

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

    def __getstate__(self) -> dict:
        """Tune pickles its run config (tuner.pkl); summary and refresh are closures over live objects and stay behind."""
        return vars(self) | {"summary": _nothing, "refresh": _none}

    def count_done(self) -> int:
        return sum(1 for _ in self.members_dir.glob("*/result.json")) if self.members_dir.exists() else 0

    def should_report(self, trials, done: bool = False) -> bool:
        interval = TTY_INTERVAL_S if sys.stdout.isatty() else LOG_INTERVAL_S
        return done or time.monotonic() - self.checked >= interval

    def report(self, trials, done: bool, *sys_info: str) -> None:
        """Tune's hook; `trials` are its Tune trials, our packs."""
        self.refresh()
        statuses = [pack.status for pack in trials]
        counts = (self.count_done(), statuses.count("RUNNING"), statuses.count("ERROR"))
        self.checked = time.monotonic()
        tty, quiet = sys.stdout.isatty(), self.checked - self.printed >= QUIET_LOG_S
        if not (tty or done or quiet or counts != self.counts):
            return
        self.printed, self.counts = self.checked, counts
        line = self.line(statuses)
        sys.stdout.write("\r\x1b[2K" + line + ("\n" if done else "") if tty else line + "\n")
        sys.stdout.flush()

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


def _per_minute(rate_per_s: float) -> str:
    """Trainings per minute, one unit whatever the speed, to about two significant digits: two decimals below 1/min
    (one an hour: 0.02/min), one below 100/min (the transformer search trained 144 seeds in 50 min: 2.9/min), none
    from 100/min on (the quickstart's one-step seeds: 234/min)."""
    per_minute = rate_per_s * 60
    return f"{per_minute:.{2 if per_minute < 1 else 1 if per_minute < 100 else 0}f}/min"


def _nothing() -> str:
    return ""


def _none() -> None:
    return None


def _clock(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"
