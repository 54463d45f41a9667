"""`headsweep search`: Optuna decides which training distributions to try, Ray Tune trains them.

config.py reads the `search:` section; studies.py opens one Optuna study per slice in the storage; bisection.py
and guide.py are the threshold sampler and the verdicts it carries between slices; loop.py runs the rounds of
ask -> train -> tell; tables.py writes trials.csv and min_diversity.csv (or best.csv). The report is
dashboards/report.py's, built from those files.
"""
from __future__ import annotations

from pathlib import Path

from dashboards import report
from sweep import tuner
from sweep.search import loop, studies, tables
from sweep.search.config import load_search
from trainables import config
from trainables.errors import ConfigError
from trainables.io import claim_out


def run(config_path: str, overrides: list[str], out: Path, study_prefix: str | None, storage_url: str | None,
        extend: int, address: str | None) -> int:
    """Run (or resume, or extend) the search into `out`, print its per-slice table and return the exit status."""
    if extend < 0:
        raise ConfigError("--extend", f"must be >= 0, got {extend}")
    base, search = load_search(config_path, overrides)
    all_slices = studies.slices(base, search, study_prefix or base.name)
    resolved = config.to_yaml(base, search=search)
    claim_out(out, resolved)
    storage = studies.storage_for(storage_url, out.resolve()) if storage_url else None  # checked before Ray starts
    tuner.connect(address)
    tuner.check_resources(search.resources)

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(resolved)
    storage = storage or studies.storage_for(None, out.resolve())
    opened = {sl.study_name: studies.open_study(sl, search, storage) for sl in all_slices}
    try:
        loop.run(base, search, all_slices, opened, out, extend)
    finally:  # even when interrupted: what finished is in the tables and the report
        table = tables.write(out, base, search, opened, all_slices)
        report.build(out)
    print(table.drop(columns=["study"]).to_string(index=False))
    print(f"[{out / ('best.csv' if search.minimize else 'min_diversity.csv')}, {out / 'report.html'}]")
    return 0
