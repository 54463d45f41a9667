"""Logger fan-out: the training loop talks to one Logger, which forwards every record to its sinks.

JsonlSink is the source of truth (always on, one flushed line per evaluation, so a crash loses at most the record in
flight); other sinks (W&B, Ray Tune) mirror it.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np


@dataclass
class LoggingConfig:
    """Where a trial's records go besides metrics.jsonl (which is always written)."""

    media_every: int = 0  # also log attention maps and matrices every this many evaluations; 0: only at the end


class Sink(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """Appends {"step": s, **metrics} as one JSON line per call; NaN and inf are written as null."""

    def __init__(self, path: str | Path):
        self.file = open(path, "a", encoding="utf-8")

    def log(self, metrics: dict[str, float], step: int) -> None:
        record = {"step": step} | {k: (v if math.isfinite(v) else None) for k, v in metrics.items()}
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class Logger:
    """Forwards to every sink; with none it does nothing, so library callers need not care about logging.

    Besides scalar records, sinks may implement `log_media(arrays, step)` (attention maps, matrices: the arrays of
    attention.npz) and `summary(metrics)` (a trial's final result); sinks without them skip those calls.
    """

    def __init__(self, *sinks: Sink):
        self.sinks = list(sinks)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for sink in self.sinks:
            sink.log(metrics, step)

    def log_media(self, arrays: dict[str, np.ndarray], step: int) -> None:
        for sink in self.sinks:
            if hasattr(sink, "log_media"):
                sink.log_media(arrays, step)

    def summary(self, metrics: dict[str, float | str]) -> None:
        for sink in self.sinks:
            if hasattr(sink, "summary"):
                sink.summary(metrics)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()

    def __enter__(self) -> "Logger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def trial_logger(cfg, out_dir: Path, *extra: Sink) -> Logger:
    """The logger of one trial: metrics.jsonl in out_dir (the source of truth), then any extra sinks."""
    return Logger(JsonlSink(Path(out_dir) / "metrics.jsonl"), *extra)
