"""Experiment directory -> one DataFrame row per member: swept keys, final metrics, status, error, seconds.

result.json files written by the trainable are the source of truth; Tune only adds the error of members that never
finished.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from sweep.space import point_id

FIRST_COLUMNS = ["trial", "status", "error", "seconds"]


def collect(members: list[dict], errors: dict[str, str]) -> pd.DataFrame:
    """members as given to Tune; errors maps point ids to the error of trials that failed for good."""
    rows = []
    for member in members:
        point, result_file = member["point"], Path(member["dir"]) / "result.json"
        trial = point_id(point)
        if result_file.exists():
            row = {"trial": trial, "error": ""} | json.loads(result_file.read_text())
        else:
            row = {"trial": trial, "status": "error" if trial in errors else "unfinished", "error": errors.get(trial, "")}
        rows.append(point | row)
    frame = pd.DataFrame(rows)
    keys = list(members[0]["point"]) if members else []
    return frame[keys + FIRST_COLUMNS + [c for c in frame.columns if c not in keys + FIRST_COLUMNS]]


def read_result(point: dict, out: Path) -> dict | None:
    """The result.json of the trial of `point` under out/trials, or None if it never finished."""
    path = out / "trials" / point_id(point) / "result.json"
    return json.loads(path.read_text()) if path.exists() else None


def tune_errors(grid) -> dict[str, str]:
    """point id -> the last line of the error of every Tune trial that ended in error."""
    errors = {}
    for result in grid:
        if result.error is not None:
            errors[result.config["trial"]] = (str(result.error).strip().splitlines() or ["error"])[-1][:500]
    return errors


def write_csv(frame: pd.DataFrame, path: Path) -> None:
    partial = path.with_name(path.name + ".partial")
    frame.to_csv(partial, index=False)
    os.replace(partial, path)
