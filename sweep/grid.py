"""`headsweep grid`: every point of the config's sweep section as one member, members packed into Ray Tune trials
(packing.py), then results.csv (one row per member: swept keys, member id, status, error, seconds, final metrics)
and the report.

Each member's result.json is the source of truth; Tune only adds the error of packs that never finished.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from dashboards import report
from sweep import cluster, packing, preflight, space, tuner
from sweep.storage.out_dir import OutDir
from trainables import config
from trainables.io import atomic_write, claim_out, create_out, read_json
from trainables.tasks import task_of, view_of

# (a results.csv written before `member` existed names it `trial`: report.results reads either)
FIRST_COLUMNS = ["member", "status", "error", "seconds"]


def run(base: config.Config, sweep: space.SweepConfig, points: list[dict], out_arg: str,
        address: str | None) -> tuple[OutDir, pd.DataFrame]:
    """Run (or resume) the grid of a loaded config (space.load_sweep) into `out_arg` (a directory or an s3:// place:
    storage/out_dir.py); the output place and the results (results.csv's frame). What the CLI and headsweep.grid
    both call. Bad input raises ConfigError before anything is written; an interrupt (KeyboardInterrupt) propagates once
    what finished is written (results.csv, the report), and running again on the same place resumes."""
    resolved = config.to_yaml(base, sweep=sweep)
    out = OutDir.open(out_arg)
    claim_out(out.local, resolved, *config.to_yaml_as_written_before(base, sweep=sweep))
    cluster.refuse_gpus_a_local_ray_lacks(sweep.resources, address)
    cluster.connect(address)
    cluster.check_resources(sweep.resources)
    packs = tuner.grid_plan(base, sweep, points, out, verdict=space.verdict_rule(base, sweep))
    preflight.check_storage(out)

    create_out(out.local, resolved)
    errors = {}
    train = lambda: errors.update(tuner.run(base, sweep, packs, out, summary=lambda: _generalized(out.local)))
    return out, cluster.run_then_write(train, lambda: write_results(out, points, errors),
                                       lambda frame: summary(base, sweep, frame, out, so_far=True))


def summary(base: config.Config, sweep: space.SweepConfig, frame: pd.DataFrame, out: OutDir,
            so_far: bool = False) -> str:
    """What `headsweep grid` prints at the end: the members' table (swept keys, the task's headline, status) and their
    count by status, with where the files are; `so_far`: of a grid stopped before its end."""
    keys = [axis.key for axis in sweep.axes] + ["seed"]
    shown = keys + [c for c in (*view_of(task_of(base)).headline, "status") if c in frame.columns]
    table = frame[shown].rename(columns=lambda c: c.rsplit(".", 1)[-1] if c in keys else c).to_string(index=False)
    counts = frame["status"].value_counts().to_dict()
    heading = "stopped: the table so far ('unfinished': a member that had not finished)\n" if so_far else ""
    return (heading + table + "\n" + f"{len(frame)} members: "
            + ", ".join(f"{n} {status}" for status, n in counts.items()) + f"  [{out}/results.csv, {out}/report.html]"
            + (f" (local copy: {out.local})" if out.mirror else ""))


def write_results(out: OutDir, points: list[dict], errors: dict[str, str]) -> pd.DataFrame:
    """results.csv and the report, from the members' files (pulled first from a bucket, and pushed back); the
    results' frame."""
    out.pull_members()
    frame = collect(packing.members(points, OutDir(out.local)), errors)
    atomic_write(out.local / "results.csv", frame.to_csv(index=False))
    report.build(out.local)
    out.sync()
    return frame


def _generalized(out: Path) -> str:
    """For the progress view: how many finished members generalize OOD so far (their ood/success)."""
    results = [read_json(path) for path in (out / "trials").glob("*/result.json")]
    return f"{sum(r.get('ood/success') == 1.0 for r in results)} generalize OOD" if results else ""


def collect(members: list[dict], errors: dict[str, str]) -> pd.DataFrame:
    """One row per member (as given to Tune); errors maps point ids to the error of members whose pack failed for
    good."""
    rows = []
    for member in members:
        point = member["point"]
        member_id = space.point_id(point)
        result = read_json(Path(member["dir"]) / "result.json")
        if result is not None:
            row = {"error": ""} | result
        else:
            row = {"status": "error" if member_id in errors else "unfinished", "error": errors.get(member_id, "")}
        rows.append(point | {"member": member_id} | row)
    frame = pd.DataFrame(rows)
    keys = list(members[0]["point"]) if members else []
    # reindex: a grid interrupted before any member finished has no `seconds` yet
    return frame.reindex(columns=keys + FIRST_COLUMNS + [c for c in frame.columns if c not in keys + FIRST_COLUMNS])
