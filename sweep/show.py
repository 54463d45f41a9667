"""`headsweep show DIR`: the table a train, grid or search printed when it ended (or so far, when it was stopped), read
back from the files in its output directory (or a bucket's place, pulled into its local mirror). Nothing starts: no
Ray, no training, no W&B run, and nothing in DIR is written."""
from __future__ import annotations

import pandas as pd

from dashboards import report
from sweep.storage.out_dir import OutDir
from trainables import config
from trainables.errors import ConfigError
from trainables.io import read_json
from trainables.tasks import task_of, view_of


def text(out: OutDir) -> str:
    """What the verb that wrote `out` printed at its end, from its files."""
    kind = report.detect(out.local)
    source = out.local / "config.yaml"
    if not source.exists():
        raise ConfigError("DIR", f"{out} has no config.yaml: not the output of headsweep {kind}, or written by hand")
    if kind == "train":  # `headsweep train`'s line: the task's headline metrics, status and steps
        if not (out.local / "result.json").exists():
            raise ConfigError("DIR", f"{out} is a training that has not finished (no result.json): run it again")
        metrics, cfg = read_json(out.local / "result.json"), config.load(source, [])
        return f"{line(metrics, view_of(task_of(cfg)).headline)}  [{out}]"
    if kind == "grid":
        from sweep import grid, space

        if not (out.local / "results.csv").exists():
            raise ConfigError("DIR", f"{out} is a grid whose driver never wrote results.csv (still running, or killed "
                                     "before it could): run the same grid again to resume it")
        base, sweep, _ = space.load_sweep(source, [])
        return grid.summary(base, sweep, pd.read_csv(out.local / "results.csv"), out)
    from sweep import search as search_verb
    from sweep.search.config import load_search

    base, search = load_search(source, [])
    table_file = out.local / ("best.csv" if search.tpe.minimize else "min_diversity.csv")
    if not table_file.exists():
        raise ConfigError("DIR", f"{out} is a search whose driver never wrote {table_file.name} (still running, or "
                                 "killed before it could): run the same search again to resume it")
    return search_verb.summary(base, search, pd.read_csv(table_file), out)


def line(metrics: dict, headline: tuple[str, ...]) -> str:
    """One training's final metrics in one line: the headline's, then status and steps, then its time."""
    shown = lambda value: f"{value:.3f}" if isinstance(value, float) else value
    return " ".join(f"{k}={shown(metrics.get(k))}" for k in (*headline, "status", "steps")) \
        + f" ({metrics['seconds']:.1f} s)"
