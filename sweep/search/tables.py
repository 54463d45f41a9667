"""What a search leaves beside its studies: trials.csv (one row per member: a seed trained at a candidate) and, per
slice, either min_diversity.csv (K*_q, the smallest diversity at which a seed passes with probability >= q, with its
interval) and success_curve.csv (p at each knob value with its interval), or, for a search that minimises a metric
(e.g. the data cost of a training distribution: a distribution search), best.csv (the cheapest candidate that
generalizes beside the reference such as Proposition 8). The report is built from these files (dashboards/report.py).
"Trial" here is an Optuna trial: one evaluation of a candidate on its seeds."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from dashboards import figures
from sweep.search import bisection, estimate, loop
from sweep.search.config import SearchConfig
from sweep.search.studies import Slice
from sweep.space import point_id, read_error, read_result
from trainables import config
from trainables.io import atomic_write, format_distribution
from trainables.tasks import task_of


def write(out: Path, base: config.Config, search: SearchConfig, studies: dict, all_slices: list[Slice]) -> pd.DataFrame:
    """Write trials.csv and min_diversity.csv (or best.csv) from the studies; the per-slice table, for printing."""
    atomic_write(out / "trials.csv", member_rows(studies, all_slices, search, out).to_csv(index=False))
    if search.minimize:
        table = best_rows(studies, all_slices, search, base, out)
        distributions = [c for c in ("q", "reference q") if c in table.columns]
        atomic_write(out / "best.csv", table.assign(**{c: table[c].map(format_distribution) for c in distributions})
                     .to_csv(index=False))
        return table.drop(columns=distributions)
    table, curves = min_diversity_rows(studies, all_slices, search, base)
    atomic_write(out / "success_curve.csv", curves.to_csv(index=False))
    atomic_write(out / "min_diversity.csv", table.to_csv(index=False))
    return table


def member_rows(studies: dict, all_slices: list[Slice], search: SearchConfig, out: Path) -> pd.DataFrame:
    """One row per member (a seed asked at a candidate): study, slice keys, candidate, seed, member id (its
    directory under trials/), its Optuna trial's state and number, whether the candidate succeeded (feasible), final
    metrics. The candidate is the knob value, or a name of the params without a knob. A seed asked again after its
    Optuna trial failed (a driver stopped mid-evaluation: the same seeds, results reused) is one row, under the latest
    Optuna trial that asked it."""
    rows = {}
    for sl in all_slices:
        for trial in studies[sl.study_name].get_trials(deepcopy=False):
            if "seed_list" not in trial.user_attrs:  # pruned before training
                continue
            candidate = sl.candidate(trial.params, search.knob.key)
            feasible = trial.constraints.get("success", math.inf) <= 0 if trial.state.name == "COMPLETE" else None
            for seed in trial.user_attrs["seed_list"]:
                point = sl.point | candidate | {"seed": seed}
                member = point_id(point)
                error = read_error(point, out)
                result = read_result(point, out) or {"status": "error" if error else "unfinished", "error": error}
                rows[sl.study_name, member] = {
                    "study": sl.study_name, **point,
                    "candidate": candidate[search.knob.key] if search.knob.key else point_id(candidate),
                    "member": member, "state": trial.state.name, "optuna_trial": trial.number,
                    "feasible": feasible} | result
    return pd.DataFrame(rows.values())


def min_diversity_rows(studies: dict, all_slices: list[Slice], search: SearchConfig,
                       base: config.Config) -> tuple[pd.DataFrame, pd.DataFrame]:
    """min_diversity.csv and success_curve.csv, from every seed trained with a verdict of its own (estimate.py).

    One row per slice: K*_q (`diversity_star`, blank where the posterior median is past the slice's widest knob
    value) and its interval [`diversity_star_low`, `diversity_star_high`] (its less and its more diverse end, in the
    knob's order, which for explicit values need not be numeric order; high blank: the interval reaches past the
    widest knob value, i.e. it may be that no value reaches q; low blank too: the evidence puts K* past it); the
    task's diversity measure (trigger copy: R) at K*_q and at the interval's ends, ordered so that `_low` <= `_high`
    (blank: unbounded on that side); p at the widest value tried with its interval; the seeds behind the answer; and
    whether the slice is finished (False: a search stopped before the slice's interval was narrow enough or its
    budget spent; its answer may still move).
    One curve row per (slice, knob value): seeds trained and passed there, and p with its interval under the model."""
    success, knob = search.success, search.knob.key
    axis, base_dict = task_of(base).diversity_axis, config.to_dict(base)
    rows, curve_rows = [], []
    for sl in all_slices:
        study = studies[sl.study_name]
        trials = study.get_trials(deepcopy=False)
        pooled = bisection.evidence(trials, knob)
        passed, trained = bisection.counts(sl.values, pooled)
        fit = estimate.fit(passed, trained, success.rate, success.confidence)
        curve = estimate.curve(passed, trained, success.rate, success.confidence)
        measures = [_measure(base_dict, sl.point | {knob: v}, axis) for v in sl.values]
        value = lambda i: sl.values[i] if i < len(sl.values) else None
        measure = lambda i: measures[i] if i < len(sl.values) else np.nan
        # the interval's end past the widest value is open, on the side where the measure moves with the knob
        ends = sorted([measure(fit.low), measure(fit.high)], key=lambda x: (np.isnan(x), x))
        rising = len(measures) < 2 or measures[-1] >= measures[0]
        if not rising and np.isnan(ends[1]):
            ends = [np.nan, ends[0]]
        tried = np.flatnonzero(trained)
        widest = curve[tried[-1]] if len(tried) else None
        row = sl.point | {
            "diversity_star": value(fit.star), "diversity_star_low": value(fit.low),
            "diversity_star_high": value(fit.high), axis: measure(fit.star), f"{axis}_low": ends[0],
            f"{axis}_high": ends[1], "widest_tried": sl.values[tried[-1]] if len(tried) else None,
            "p_at_widest": widest.p if widest else np.nan, "p_at_widest_low": widest.p_low if widest else np.nan,
            "p_at_widest_high": widest.p_high if widest else np.nan,
            "seeds": int(trained.sum()), "finished": finished(study, search, fit)}
        if search.sampler == "bisection":  # the older protocol's own answer, beside the estimate from its seeds
            min_rate = success.min_seeds / len(success.seeds)
            row["bisection_star"] = bisection.minimal_value(sl.values, pooled, min_rate)
        rows.append(row | {"study": sl.study_name})
        curve_rows += [{"study": sl.study_name, **sl.point, knob: v, axis: m, "trained": c.trained,
                        "passed": c.passed, "p": c.p, "p_low": c.p_low, "p_high": c.p_high}
                       for v, m, c in zip(sl.values, measures, curve)]
    return pd.DataFrame(rows), pd.DataFrame(curve_rows)


def for_terminal(table: pd.DataFrame, slice_keys: list[str], axis: str) -> pd.DataFrame:
    """min_diversity.csv as the terminal prints it: each answer beside its interval, "beyond" where the interval
    reaches past the widest value tried, and "(open)" on a slice that is not finished."""
    shown = table[slice_keys].copy()
    shown["K*_q [interval]"] = table.apply(lambda row: figures.interval_text(row, "diversity_star", dash="-"), axis=1)
    if axis in table:
        shown[f"{axis} [interval]"] = table.apply(lambda row: figures.interval_text(row, axis, 3, dash="-"), axis=1)
    shown["seeds"] = table["seeds"]
    shown["p at widest [interval]"] = table.apply(
        lambda row: "-" if pd.isna(row["p_at_widest"]) else
        f"{row['p_at_widest']:.2f} [{row['p_at_widest_low']:.2f}, {row['p_at_widest_high']:.2f}]", axis=1)
    if "bisection_star" in table:  # the all-pass protocol's own answer (search.sampler=bisection)
        shown["bisection"] = table["bisection_star"].map(lambda x: "-" if pd.isna(x) else f"{x:g}")
    shown["finished"] = table["finished"].map(lambda done: "yes" if done else "no (open)")
    return shown


def finished(study, search: SearchConfig, fit: estimate.Estimate) -> bool:
    """The slice needs nothing more: no evaluation in flight and its sampler asks no more within the config's budget
    (--extend raises the budget of the run that gives it, not this verdict)."""
    trials = study.get_trials(deepcopy=False)
    if any(t.state.name == "RUNNING" for t in trials):
        return False
    if search.sampler == "threshold":
        return fit.settled(search.resolution) or not study.sampler.seeds_left(trials)
    return not loop.wants_more(study, search, search.budget.per_slice)


def _measure(base_dict: dict, point: dict, axis: str) -> float:
    """The task's diversity measure of a point's config (known before training)."""
    cfg = config.with_point(base_dict, point, check_device=False)
    return float(task_of(cfg).diversity(cfg.task).get(axis, np.nan))


def best_rows(studies: dict, all_slices: list[Slice], search: SearchConfig, base: config.Config,
              out: Path) -> pd.DataFrame:
    """One row per slice: the feasible candidate with the lowest objective (its params, objective, the task's
    diversity measure, success rate, training distribution q), how many candidates were evaluated (`n_trials`:
    completed Optuna trials) and feasible, and the reference's measured values."""
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
                    "q": _distribution(base_dict, point)}
        if search.reference:
            point = sl.point | search.reference
            results = [r for r in (read_result(point | {"seed": base.seed + s}, out) for s in search.success.seeds)
                       if r]
            hits = [search.success.margin(r.get(search.success.metric)) >= 0 for r in results]
            row |= {f"reference {metric}": np.nanmean([r.get(metric, np.nan) for r in results]) if results else np.nan,
                    f"reference {axis}": results[0][axis] if results else np.nan,
                    "reference success_rate": np.mean(hits) if results else np.nan,
                    "reference q": _distribution(base_dict, point)}
        rows.append(row | {"study": sl.study_name})
    return pd.DataFrame(rows)


def _distribution(base_dict: dict, point: dict) -> dict[int, float] | None:
    """The training distribution of a point's config, as its task describes it (Task.shape; trigger copy: {l: q_l})."""
    cfg = config.with_point(base_dict, point, check_device=False)
    return task_of(cfg).shape(cfg.task)
