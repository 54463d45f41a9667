"""`headsweep search`: Optuna decides which training distributions to try, Ray Tune trains them.

config.py reads the `search:` section; studies.py opens one Optuna study per slice in the storage; samplers.py
says what each slice evaluates next (on estimate.py, allocation.py and bisection.py) and guide.py the verdicts
carried between slices; loop.py runs the rounds of ask -> train -> tell; owners.py lets several drivers share the
studies; tables.py writes trials.csv and min_diversity.csv (or best.csv). The report is dashboards/report.py's,
built from those files.
"""
from __future__ import annotations

import dataclasses

import optuna
import pandas as pd

from dashboards import figures, report, search_wandb
from sweep import cluster, preflight
from sweep.search import loop, samplers, studies, tables
from sweep.search.config import RENAMED_SAMPLERS, SearchConfig, note
from sweep.storage import buckets
from sweep.storage.out_dir import OutDir
from trainables import config
from trainables.errors import ConfigError
from trainables.io import claim_out, create_out
from trainables.tasks import task_of


def run(base: config.Config, search: SearchConfig, out_arg: str, study_prefix: str | None, storage_url: str | None,
        extend: int, address: str | None) -> tuple[OutDir, pd.DataFrame]:
    """Run (or resume, or extend) the search of a loaded config (load_search) into `out_arg` (a directory or an s3://
    place: storage/out_dir.py); the output place and the per-slice table (min_diversity.csv's, or best.csv's). What the
    CLI and headsweep.search both call. Several processes may run it at once on the same studies (same --out, or one
    --storage): they share the work. Bad input raises ConfigError before anything is written; an interrupt
    (KeyboardInterrupt) propagates once what finished is written (the tables, the report), and running again resumes."""
    if extend < 0:
        raise ConfigError("--extend", f"must be >= 0, got {extend}")
    if buckets.is_remote(out_arg) and not studies.is_server(storage_url):
        raise ConfigError("--storage", "a search whose --out is a bucket keeps its studies in a database server, "
                                       "e.g. --storage postgresql://user:password@host/db (an Optuna journal is "
                                       "appended to in place, which S3 objects cannot be)")
    all_slices = studies.slices(base, search, study_prefix or base.name)
    resolved = config.to_yaml(base, search=search)
    out = OutDir.open(out_arg)
    claim_out(out.local, resolved, *_as_written_before(base, search))
    # The storage and its studies are checked (read only) before Ray starts and before anything is written.
    key, experiment = "--storage" if storage_url else "--out", studies.fingerprint(base, search)
    storage = studies.storage_for(storage_url, out.local.resolve(), create=False)
    for sl in all_slices if storage else []:
        studies.check_owner(storage, sl, search.knob.key, experiment, key)
    if storage and not extend and (answered := _answered(base, search, storage, all_slices, out)) is not None:
        return out, answered  # nothing to ask: no Ray, no training, no W&B run
    cluster.refuse_gpus_a_local_ray_lacks(search.resources, address, "search")
    cluster.connect(address)
    cluster.check_resources(search.resources, "search")
    preflight.check_storage(out)
    if (line := studies.unreachable_note(search, all_slices)) is not None:
        note(line)

    create_out(out.local, resolved)  # atomic: another driver may be reading config.yaml in claim_out
    out.sync()
    storage = storage or studies.storage_for(storage_url, out.local.resolve())
    opened = {sl.study_name: studies.open_study(sl, search, storage, experiment, key) for sl in all_slices}
    return out, cluster.run_then_write(lambda: loop.run(base, search, all_slices, opened, out, extend),
                                       lambda: _write_tables_and_report(out, base, search, opened, all_slices),
                                       lambda table: summary(base, search, table, out, so_far=True))


def _answered(base, search: SearchConfig, storage, all_slices: list, out: OutDir) -> pd.DataFrame | None:
    """The table of a search that has nothing left to ask (every slice finished, nothing running), computed from its
    studies and files without writing anything; None if a slice would ask more, or has no study yet. (Searches for
    the cheapest distribution, search.tpe.minimize, always go through the loop.)"""
    if search.tpe.minimize or not (out.local / "min_diversity.csv").exists():
        return None
    try:
        loaded = {sl.study_name: optuna.load_study(study_name=sl.study_name, storage=storage) for sl in all_slices}
    except KeyError:  # a slice without its study
        return None
    table, _ = tables.min_diversity_rows(loaded, all_slices, search, base, out.local)
    return table if table["finished"].all() else None


def summary(base: config.Config, search: SearchConfig, table: pd.DataFrame, out: OutDir,
            so_far: bool = False) -> str:
    """What `headsweep search` prints at the end: the per-slice table (K*_q with its interval, or the best
    candidates), what K*_q means, and where the files are; `so_far`: of a search stopped before its end."""
    if search.tpe.minimize:
        lines = [table.drop(columns=["study"]).to_string(index=False)]
    else:
        axis = task_of(base).diversity_axis
        lines = [figures.answer_table(table, [a.key for a in search.slices], axis).to_string(index=False),
                 f"K*_q: the smallest {search.knob.key} at which a seed passes ({search.success.metric} "
                 f"{search.success.direction} {search.success.threshold:g}) with probability >= "
                 f"{search.success.rate:g}; [interval] at confidence {search.success.confidence:g}, its ends widths "
                 "seeds were trained at ('beyond': no value tried rules out 'none')"
                 if not samplers.kind(search).judged_by_candidate
                 else f"K*: the {search.sampler} sampler's m-of-n answer (the same seeds at every value: no interval)"]
        if extend_line := tables.extend_note(table):
            lines.append(extend_line)
    lines.append(f"[{out}/{'best.csv' if search.tpe.minimize else 'min_diversity.csv'}, {out}/report.html]"
                 + (f" (local copy: {out.local})" if out.mirror else ""))
    if so_far:
        lines.insert(0, "stopped: the table so far ('no (open)': a slice that would have asked more; its seeds are "
                        "those trained before the stop)")
    return "\n".join(lines)


def _as_written_before(base, search) -> list[str]:
    """config.yaml as earlier versions wrote this search: before a sampler was renamed (search.sampler: grid, now
    exhaustive), before the samplers' keys moved into their subsections (MOVED_KEYS) and before config.ADDED_KEYS
    existed. Its --out resumes (its studies do: the sampler is not in their fingerprint, nor an added key at its
    default, and the moved keys count as before)."""
    renamed = [search] + [dataclasses.replace(search, sampler=old)
                          for old, new in RENAMED_SAMPLERS.items() if new == search.sampler]
    sections = [s for r in renamed for s in (r, r.as_flat_keys())]
    return [text for s in sections
            for text in (config.to_yaml(base, search=s), *config.to_yaml_as_written_before(base, search=s))]


def _write_tables_and_report(out: OutDir, base, search, opened: dict, all_slices: list):
    """trials.csv and min_diversity.csv (or best.csv), then the report, from the members' files (pulled first from a
    bucket, and pushed back); the per-slice table."""
    out.pull_members()
    table = tables.write(out.local, base, search, opened, all_slices)
    report.build(out.local)
    if not search.tpe.minimize:
        try:  # the answer and its curve as a W&B run of the search's own; a W&B failure never fails a finished search
            search_wandb.log_search(out.local)
        except Exception as e:  # noqa: BLE001
            print(f"headsweep: the search's W&B run was not written: {type(e).__name__}: {e}")
    out.sync()
    return table
