"""The small pieces every layer shares: atomic writes, reading jsonl and json back, the finished statuses, and the
text form of a distribution in CSV cells.

Readers of an output directory (sweeps, reports, a person's browser) may look at any moment, also while a trial is
being killed, so every file appears whole or not at all: written aside, then renamed over the old one. Two
processes may write the same file (two drivers of one search): each writes aside under its own name, the last rename
wins whole.
"""
from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Callable, IO

import yaml

from trainables.errors import ConfigError

# A member's stopper (trainables/stopper.py; a sweep's verdict rule, sweep/verdicts.py) may end it with these two:
SUCCEEDED = "succeeded"  # passed the threshold at `streak` evaluations in a row, stopped there
VERDICT_KNOWN = "verdict_known"  # stopped (or never started) because its candidate's verdict was decided
FINISHED = ("completed", "early_stopped", "diverged", SUCCEEDED, VERDICT_KNOWN)  # a trial with a result.json
OWN_VERDICT = tuple(s for s in FINISHED if s != VERDICT_KNOWN)  # a finished member whose metrics are its own verdict
FAILED = ("error", "unfinished")  # a grid's member that failed for good, or never finished: `headsweep grid` exits 1
ERROR_FILE = "error.txt"  # in a trial's directory: why its last attempt failed (removed once it finishes)


def atomic_write(path: str | os.PathLike, data: str | bytes | Callable[[IO[bytes]], None]) -> Path:
    """Write `data` (text, bytes, or a function that writes into a binary file) to `path` all at once."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}-{threading.get_ident()}.partial")  # writers never share it
    try:
        with open(partial, "wb") as f:
            if callable(data):
                data(f)
            else:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def claim_out(out: Path, resolved_config: str, *as_written_before: str) -> None:
    """Re-running a verb on the same --out resumes it; another config there would mix two experiments: refused.
    `as_written_before`: the same config as an earlier version wrote it (a value since renamed), which resumes too."""
    if Path(out).exists() and not Path(out).is_dir():
        raise ConfigError("--out", f"{out} is a file, not a directory")
    existing = Path(out) / "config.yaml"
    if existing.exists() and existing.read_text() not in (resolved_config, *as_written_before):
        differ = config_difference(existing.read_text(), resolved_config)
        raise ConfigError("--out", f"{out} holds the results of a different config ({differ}); choose another "
                                   "directory")


def flat(tree: dict, prefix: str = "") -> dict:
    """A nested config as {dotted key: value} (task.lengths.low: 3)."""
    leaves = {}
    for key, value in tree.items():
        leaves |= flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {prefix + key: value}
    return leaves


def config_difference(there: str, here: str, shown: int = 3) -> str:
    """The keys on which two resolved configs (YAML) differ, each with both values: "seed: 0 there, 1 here"."""
    old, new = flat(yaml.safe_load(there) or {}), flat(yaml.safe_load(here) or {})
    missing = object()
    differ = [f"{key}: {old.get(key, 'unset')} there, {new.get(key, 'unset')} here" for key in sorted(old | new)
              if old.get(key, missing) != new.get(key, missing)]
    return "; ".join(differ[:shown]) + (f"; and {len(differ) - shown} more" if len(differ) > shown else "")


def create_out(out: Path, resolved_config: str | None = None) -> None:
    """Create --out (with its config.yaml): the first write of every verb, so a place that cannot be written is bad
    input (one line) with nothing started."""
    if Path(out).exists() and not Path(out).is_dir():
        raise ConfigError("--out", f"{out} is a file, not a directory")
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
        if resolved_config is not None:
            atomic_write(Path(out) / "config.yaml", resolved_config)
    except OSError as e:
        raise ConfigError("--out", f"cannot write {out}: {e.strerror or e}") from None


def write_json(path: str | os.PathLike, data: dict) -> Path:
    return atomic_write(path, json.dumps(data, indent=2))


def read_json(path: str | os.PathLike) -> dict | None:
    """The JSON object in `path`, or None when the file is not there."""
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """The records of a jsonl file ([] when absent); a torn last line (a process killed mid-write) is skipped."""
    path = Path(path)
    records = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def format_distribution(q) -> str:
    """A distribution {value: probability} as one CSV cell, '1:0.500 2:0.500' ('' for none)."""
    return " ".join(f"{k}:{p:.3f}" for k, p in q.items()) if isinstance(q, dict) else ""


def parse_distribution(text) -> dict[int, float] | None:
    """format_distribution's text back to {value: probability} (None for an empty cell)."""
    if not isinstance(text, str) or not text.strip():
        return None
    return {int(k): float(p) for k, p in (pair.split(":") for pair in text.split())}
