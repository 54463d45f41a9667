"""`headsweep compare DIR [DIR ...] --out FILE.png`: the thresholds several threshold searches measured, on one figure
against the theory's reference value of each slice (the task's diversity measure at diversity* against the value its
theory lines give; slice by slice for a task without theory lines), with the points as FILE.csv beside it. Reads
only the search directories (config.yaml, min_diversity.csv): searches of two models side by side are the project's
theory-against-practice figure. Each point carries the interval of its slice's answer (min_diversity.csv's
`{measure}_low`, `{measure}_high`). A slice that found no threshold says how many of the seeds at the widest value it
tried fitted their training data (trials.csv): whether the model failed there, or its training did."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dashboards import figures
from dashboards.report import read_config, slice_configs, theory_values
from trainables.errors import ConfigError
from trainables.io import OWN_VERDICT, atomic_write
from trainables.tasks import task_of

FITTED = ("id/acc", 0.99)  # a seed fitted its training data: its in-distribution accuracy at or past this


def threshold_points(out: Path) -> tuple[pd.DataFrame, str]:
    """One row per slice of the search in `out`, and the name of the task's diversity measure: its slice keys,
    `theory` (the task's reference value of that measure), `measured` (the measure at diversity*, NaN where
    diversity* lies past the widest value tried), `measured_low` / `measured_high` (the measure at the ends of
    diversity*'s interval, low <= high, NaN where that side is open), `seeds` and `finished` (from
    min_diversity.csv), `bound` (for a slice without `measured`, the measure at the earliest place the evidence puts
    diversity*: whatever the threshold is, it lies past that) and `fitted_at_widest` (for such a slice, the share of
    the seeds at the widest value tried that fitted their training data)."""
    cfg = read_config(out / "config.yaml")
    if cfg is None or not (out / "min_diversity.csv").exists():
        raise ConfigError("DIR", f"{out} is not the output of a threshold search (no config.yaml and "
                                 "min_diversity.csv)")
    axis = task_of(cfg).diversity_axis
    minimal = pd.read_csv(out / "min_diversity.csv")
    slice_keys = [a["key"] for a in (cfg.get("search") or {}).get("slices", [])]
    column = lambda name: minimal[name] if name in minimal else pd.Series(np.nan, index=minimal.index)
    theory = pd.to_numeric(pd.Series(theory_values(cfg, minimal, slice_keys, axis), index=minimal.index))
    name = f"{out.name} ({(cfg.get('model') or {}).get('name', '?')})"
    label = minimal[slice_keys].apply(lambda row: ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in row.items()),
                                      axis=1) if slice_keys else pd.Series("all", index=minimal.index)
    points = minimal[slice_keys].assign(search=name, slice=label, theory=theory,
                                        measured=column(axis).where(minimal["diversity_star"].notna()),
                                        measured_low=column(f"{axis}_low"), measured_high=column(f"{axis}_high"),
                                        seeds=column("seeds"), finished=column("finished"),
                                        bound=_bound(cfg, minimal, slice_keys, axis),
                                        fitted_at_widest=_fitted_at_widest(out, cfg, minimal))
    return points, axis


def _fitted_at_widest(out: Path, cfg: dict, minimal: pd.DataFrame) -> pd.Series:
    """Per slice that found no threshold, the share of the seeds trained at the widest knob value it tried whose
    FITTED metric reached its level (seeds with a verdict of their own, from trials.csv): near 1, the model fails
    even where training worked; well below, training failed first, so more steps may still find a threshold. NaN
    for the other slices."""
    knob, path = ((cfg.get("search") or {}).get("knob") or {}).get("key"), out / "trials.csv"
    share = pd.Series(np.nan, index=minimal.index)
    if not knob or not path.exists() or "study" not in minimal:
        return share
    members = pd.read_csv(path)
    if not {"study", "status", knob, FITTED[0]} <= set(members.columns):
        return share
    judged = members[members["status"].isin(OWN_VERDICT)]
    for index, study in minimal.loc[minimal["diversity_star"].isna(), "study"].items():
        seeds = judged[judged["study"] == study]
        if len(seeds):
            widest = seeds[seeds[knob] == seeds[knob].max()]
            share[index] = (widest[FITTED[0]] >= FITTED[1]).mean()
    return share


def _bound(cfg: dict, minimal: pd.DataFrame, slice_keys: list[str], axis: str) -> pd.Series:
    """Per slice whose diversity* lies past the widest value tried, the diversity measure at the earliest place the
    evidence puts it: the interval's low end (`diversity_star_low`) where there is one, else the widest value tried
    (`widest_tried`). Whatever the threshold is, it lies past that. NaN for the other slices."""
    knob = ((cfg.get("search") or {}).get("knob") or {}).get("key")
    bound = pd.Series(np.nan, index=minimal.index)
    if not knob:
        return bound
    earliest = pd.Series(np.nan, index=minimal.index)
    for column in ("widest_tried", "diversity_star_low"):  # the later one wins where it has a value
        if column in minimal:
            earliest = minimal[column].fillna(earliest)
    none_found = minimal["diversity_star"].isna() & earliest.notna()
    rows = minimal[none_found].assign(**{knob: earliest[none_found]})  # the slice with the knob at that value
    for index, slice_cfg in zip(rows.index, slice_configs(cfg, rows, slice_keys + [knob])):
        if slice_cfg is not None:
            bound[index] = task_of(slice_cfg).diversity(slice_cfg.task).get(axis, np.nan)
    return bound


def compare(dirs: list[Path], out: Path) -> tuple[Path, Path]:
    """Write the figure to `out` (PNG) and its points to `out` with .csv; ConfigError naming a DIR that is not a
    threshold search, or searches of tasks with different diversity measures."""
    if out.suffix != ".png":
        raise ConfigError("--out", f"must name a .png file, got {out}")
    found = [threshold_points(d) for d in dirs]
    axes = {axis for _, axis in found}
    if len(axes) > 1:
        raise ConfigError("DIR", f"the searches measure different things ({', '.join(sorted(axes))})")
    points = pd.concat([frame for frame, _ in found], ignore_index=True)
    png = figures.png_bytes(figures.thresholds_against_theory(points, axes.pop()))  # drawn before anything is written
    table = out.with_suffix(".csv")
    try:
        atomic_write(out, png)
        atomic_write(table, points.to_csv(index=False))
    except OSError as e:
        raise ConfigError("--out", f"cannot write {out}: {e.strerror or e}") from None
    return out, table
