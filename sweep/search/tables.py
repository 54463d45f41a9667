"""What a search leaves beside its studies: trials.csv (one row per trained seed) and, per slice, either
min_diversity.csv (the smallest diversity that generalizes) or, for a search that minimises a metric (e.g. the data
cost of a distribution's shape), best.csv (the cheapest candidate that generalizes beside the reference such as
Proposition 8). The report is built from these files (dashboards/report.py)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from sweep.search import bisection
from sweep.search.config import SearchConfig
from sweep.search.studies import Slice
from sweep.space import point_id, read_error, read_result
from trainables import config
from trainables.io import atomic_write, format_shape
from trainables.tasks import task_of


def write(out: Path, base: config.Config, search: SearchConfig, studies: dict, all_slices: list[Slice]) -> pd.DataFrame:
    """Write trials.csv and min_diversity.csv (or best.csv) from the studies; the per-slice table, for printing."""
    atomic_write(out / "trials.csv", trial_rows(studies, all_slices, search, out).to_csv(index=False))
    if search.minimize:
        table = best_rows(studies, all_slices, search, base, out)
        shapes = [c for c in ("q", "reference q") if c in table.columns]
        atomic_write(out / "best.csv", table.assign(**{c: table[c].map(format_shape) for c in shapes})
                     .to_csv(index=False))
        return table.drop(columns=shapes)
    table = min_diversity_rows(studies, all_slices, search, base, out)
    atomic_write(out / "min_diversity.csv", table.to_csv(index=False))
    return table


def trial_rows(studies: dict, all_slices: list[Slice], search: SearchConfig, out: Path) -> pd.DataFrame:
    """One row per Tune trial: study, slice keys, candidate, seed, Optuna state and number, whether the candidate
    succeeded (feasible), final metrics. The candidate is the knob value, or a name of the params without a knob."""
    rows = []
    for sl in all_slices:
        for trial in studies[sl.study_name].get_trials(deepcopy=False):
            if "seed_list" not in trial.user_attrs:  # pruned before training
                continue
            candidate = sl.candidate(trial.params, search.knob.key)
            feasible = trial.constraints.get("success", math.inf) <= 0 if trial.state.name == "COMPLETE" else None
            for seed in trial.user_attrs["seed_list"]:
                point = sl.point | candidate | {"seed": seed}
                error = read_error(point, out)
                result = read_result(point, out) or {"status": "error" if error else "unfinished", "error": error}
                rows.append({"study": sl.study_name, **point,
                             "candidate": candidate[search.knob.key] if search.knob.key else point_id(candidate),
                             "state": trial.state.name, "optuna_trial": trial.number, "feasible": feasible} | result)
    return pd.DataFrame(rows)


def min_diversity_rows(studies: dict, all_slices: list[Slice], search: SearchConfig, base: config.Config,
                       out: Path) -> pd.DataFrame:
    """One row per slice: diversity*, the success rates at it and at the largest evaluated value below it, and the
    task's diversity measure at it (trigger copy: the max-sum ratio R)."""
    min_rate = search.success.min_seeds / len(search.success.seeds)
    axis = task_of(base).diversity_axis
    rows = []
    for sl in all_slices:
        trials = studies[sl.study_name].get_trials(deepcopy=False)
        pooled = bisection.evidence(trials, search.knob.key)
        star = bisection.minimal_value(sl.values, pooled, min_rate)
        below = max((v for v in pooled if star is None or v < star), default=None)
        rate = lambda v: pooled[v].successes / pooled[v].seeds if v in pooled else np.nan
        measure = np.nan
        if star is not None:
            result = read_result(sl.point | {search.knob.key: star, "seed": search.success.seeds[0]}, out)
            measure = result[axis] if result else np.nan
        rows.append(sl.point | {"diversity_star": star, "success_rate_at_star": rate(star), "below_star": below,
                                "success_rate_below_star": rate(below), axis: measure,
                                "n_trials": sum(t.state.name == "COMPLETE" for t in trials),
                                "study": sl.study_name})
    return pd.DataFrame(rows)


def best_rows(studies: dict, all_slices: list[Slice], search: SearchConfig, base: config.Config,
              out: Path) -> pd.DataFrame:
    """One row per slice: the feasible candidate with the lowest objective (its params, objective, the task's
    diversity measure, success rate, distribution q), how many candidates were evaluated and feasible, and the
    reference's measured values."""
    base_dict, metric, axis = config.to_dict(base), search.minimize, task_of(base).diversity_axis
    rows = []
    for sl in all_slices:
        done = [t for t in studies[sl.study_name].get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
        feasible = [t for t in done if t.constraints.get("success", math.inf) <= 0]
        row = sl.point | {"n_trials": len(done), "n_feasible": len(feasible)}
        if feasible:
            best = min(feasible, key=lambda t: (t.value, t.number))
            point = sl.point | sl.candidate(best.params, search.knob.key)
            result = read_result(point | {"seed": best.user_attrs["seed_list"][0]}, out) or {}
            row |= {"best_trial": best.number, **sl.candidate(best.params, search.knob.key), metric: best.value,
                    axis: result.get(axis, np.nan),
                    "success_rate": best.user_attrs["successes"] / best.user_attrs["seeds"],
                    "q": _shape(base_dict, point)}
        if search.reference:
            point = sl.point | search.reference
            results = [r for r in (read_result(point | {"seed": s}, out) for s in search.success.seeds) if r]
            hits = [search.success.margin(r.get(search.success.metric)) >= 0 for r in results]
            row |= {f"reference {metric}": np.mean([r[metric] for r in results]) if results else np.nan,
                    f"reference {axis}": results[0][axis] if results else np.nan,
                    "reference success_rate": np.mean(hits) if results else np.nan,
                    "reference q": _shape(base_dict, point)}
        rows.append(row | {"study": sl.study_name})
    return pd.DataFrame(rows)


def _shape(base_dict: dict, point: dict) -> dict[int, float] | None:
    """The training distribution of a point's config, as its task describes it (trigger copy: {l: q_l})."""
    cfg = config.with_point(base_dict, point, check_device=False)
    return task_of(cfg).shape(cfg.task)
