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

from sweep.search import bisection, estimate, owners, samplers
from sweep.search.config import SearchConfig
from sweep.search.studies import Slice
from sweep.space import point_id, read_error, read_result
from trainables import config
from trainables.io import VERDICT_KNOWN, atomic_write, format_distribution
from trainables.tasks import task_of


def write(out: Path, base: config.Config, search: SearchConfig, studies: dict, all_slices: list[Slice]) -> pd.DataFrame:
    """Write trials.csv and min_diversity.csv (or best.csv) from the studies; the per-slice table, for printing."""
    atomic_write(out / "trials.csv", member_rows(studies, all_slices, search, out).to_csv(index=False))
    if search.tpe.minimize:
        table = best_rows(studies, all_slices, search, base, out)
        distributions = [c for c in ("q", "reference q") if c in table.columns]
        atomic_write(out / "best.csv", table.assign(**{c: table[c].map(format_distribution) for c in distributions})
                     .to_csv(index=False))
        return table.drop(columns=distributions)
    table, curves = min_diversity_rows(studies, all_slices, search, base, out)
    atomic_write(out / "success_curve.csv", curves.to_csv(index=False))
    atomic_write(out / "min_diversity.csv", table.to_csv(index=False))
    return table


def member_rows(studies: dict, all_slices: list[Slice], search: SearchConfig, out: Path) -> pd.DataFrame:
    """One row per member (a seed asked at a candidate). A seed asked again after its Optuna trial failed (a driver
    stopped mid-evaluation: the same seeds, results reused) is one row, under the latest Optuna trial that asked it.
    A trial whose driver stopped before it could tell it (owners.zombies) is STOPPED, not failed: its seeds that
    finished count, and a rerun tells them."""
    rows = {}
    for sl in all_slices:
        stopped = owners.zombies(studies[sl.study_name])
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
                    "member": member, "state": "STOPPED" if trial.number in stopped else trial.state.name,
                    "optuna_trial": trial.number, "feasible": feasible} | result
    return pd.DataFrame(rows.values())


def min_diversity_rows(studies: dict, all_slices: list[Slice], search: SearchConfig, base: config.Config,
                       out: Path | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """min_diversity.csv and success_curve.csv, from every seed trained with a verdict of its own (estimate.py): those
    of the told evaluations, and (with `out`, where their results are) those that finished in an evaluation its
    driver was stopped before it could tell (a Ctrl-C mid-round), unless another evaluation asked them again.

    One row per slice: K*_q (`diversity_star`, blank where the estimate is past the slice's widest knob value) and its
    interval [`diversity_star_low`, `diversity_star_high`] (in the knob's order, which for explicit values need not
    be numeric order; high blank: open past the widest value, it may be that no value reaches q; low blank too: every
    value up to the widest is ruled out); the task's diversity measure at them, ordered so that `_low` <= `_high`; a
    slice without seeds has every answer column blank.
    The other samplers (bisection, exhaustive, tpe) train the same seeds (search.success.seeds) at every value, which
    the interval's tests cannot treat as independent draws: their rows give the m-of-n answer alone (`diversity_star`:
    the smallest value whose seeds succeed with every wider value evaluated succeeding too), with no interval.
    One curve row per (slice, knob value): seeds trained and passed there, and p with its interval under
    monotonicity."""
    success, knob = search.success, search.knob.key
    axis, base_dict = task_of(base).diversity_axis, config.to_dict(base)
    rows, curve_rows = [], []
    for sl in all_slices:
        study, sampler = studies[sl.study_name], samplers.for_slice(search, sl.values, sl.params)
        trials = study.get_trials(deepcopy=False)
        pooled = bisection.evidence(trials, knob)
        if out is not None and not sampler.judged_by_candidate:  # (an m-of-n verdict needs every seed of the candidate)
            add_stopped_seeds(pooled, study, sl, search, out)
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
        widest = curve[tried[-1]] if len(tried) else estimate.CurvePoint(0, 0, np.nan, np.nan, np.nan)
        done = sampler.finished(trials, fit)
        failing = done and sampler.used(trials) < sampler.per_slice  # neither settled nor spent: Sampler.spent's cap
        row = sl.point | {
            "diversity_star": value(fit.star), "diversity_star_low": value(fit.low),
            "diversity_star_high": value(fit.high), axis: measure(fit.star), f"{axis}_low": ends[0],
            f"{axis}_high": ends[1], "widest_tried": sl.values[tried[-1]] if len(tried) else None,
            "p_at_widest": widest.p, "p_at_widest_low": widest.p_low, "p_at_widest_high": widest.p_high,
            "seeds": int(trained.sum()), "finished": done,
            "stopped": stop_reason(fit, passed, trained, search, done, failing),
            "to_settle": 0 if fit.settled(search.threshold.resolution) else estimate.seeds_to_settle(
                fit, passed, trained, success.rate, success.confidence)}
        if not trained.any():  # no evidence: no answer, not the estimate's "every value and none"
            answer = {"diversity_star", "diversity_star_low", "diversity_star_high", "widest_tried"}
            row |= {k: None for k in answer} | {axis: np.nan, f"{axis}_low": np.nan, f"{axis}_high": np.nan}
        if sampler.judged_by_candidate:  # shared seeds: the m-of-n answer alone (docstring)
            interval = {"diversity_star_low", "diversity_star_high", f"{axis}_low", f"{axis}_high", "to_settle"}
            row = {k: v for k, v in row.items() if k not in interval}
            row |= {"diversity_star": bisection.minimal_value(sl.values, pooled, sampler.min_rate),
                    axis: np.nan, "stopped": "finished" if done else "open"}
        rows.append(row | {"study": sl.study_name})
        curve_rows += [{"study": sl.study_name, **sl.point, knob: v, axis: m, "trained": c.trained,
                        "passed": c.passed, "p": c.p, "p_low": c.p_low, "p_high": c.p_high}
                       for v, m, c in zip(sl.values, measures, curve)]
    return pd.DataFrame(rows), pd.DataFrame(curve_rows)


def add_stopped_seeds(pooled: dict, study, sl: Slice, search: SearchConfig, out: Path) -> None:
    """Add to `pooled` (bisection.evidence's) the seeds that finished in evaluations whose driver stopped before it
    told them (failed as zombies: owners.py), read from their result.json, judged as loop.tell judges them
    (SuccessConfig.seed_margins); a seed another evaluation asked again is that one's, and one stopped twice counts
    once."""
    stopped, trials = owners.zombies(study), study.get_trials(deepcopy=False)
    counted = {(t.params.get(search.knob.key), seed) for t in trials if t.number not in stopped
               and t.state.name in ("COMPLETE", "RUNNING") for seed in t.user_attrs.get("seed_list", ())}
    for trial in trials:
        if trial.number not in stopped or search.knob.key not in trial.params:
            continue
        value = trial.params[search.knob.key]
        point = sl.point | sl.candidate(trial.params, search.knob.key)
        seeds = [seed for seed in trial.user_attrs.get("seed_list", ()) if (value, seed) not in counted]
        counted |= {(value, seed) for seed in seeds}
        results = [r for seed in seeds if (r := read_result(point | {"seed": seed}, out)) is not None]
        if results:
            margins = search.success.seed_margins(results)
            evidence = pooled.setdefault(value, bisection.Evidence())
            evidence.successes += sum(m >= 0 for m in margins)
            evidence.seeds += len(results)
            evidence.judged += sum(r.get("status") != VERDICT_KNOWN for r in results)


def extend_note(table: pd.DataFrame) -> str | None:
    """A line suggesting --extend for the slices that stopped with their interval open, at the current rates ("" where
    none did); None for a table without intervals."""
    if "to_settle" not in table:
        return None
    # (an open slice is not among them: running the search again goes on with it)
    wanting = table[table["stopped"].isin(["budget", "plateau near q"]) & (table["to_settle"] > 0)]
    reachable = wanting[wanting["to_settle"] < estimate.OUT_OF_REACH]["to_settle"]
    parts = [f"{len(reachable)} slice(s) would settle with about --extend {int(reachable.max())} more trainings each "
             "at the current rates"] if len(reachable) else []
    if len(reachable) < len(wanting):
        parts.append(f"{len(wanting) - len(reachable)} slice(s) have rates at about q where an end would be decided: "
                     "more seeds will not settle them soon")
    return "; ".join(parts)


PLATEAU = 0.15  # a slice out of budget whose rates around the crossing lie this close to q sits on a plateau near q


def stop_reason(fit: estimate.Estimate, passed, trained, search: SearchConfig, done: bool,
                failing: bool = False) -> str:
    """Why a slice stopped: settled, plateau near q, budget, failing (its evaluations kept failing before its budget
    was spent: trials.csv's `error` says why), or open (not finished: a search stopped before)."""
    if fit.settled(search.threshold.resolution):
        return "settled"
    if not done:
        return "open"
    if failing:
        return "failing"
    tried, rate = estimate.rates(passed, trained)
    inside = (tried > fit.excluded) & (tried < fit.high)
    near = inside.any() and bool((abs(rate[inside] - search.success.rate) <= PLATEAU).all())
    return "plateau near q" if near else "budget"


def _measure(base_dict: dict, point: dict, axis: str) -> float:
    """The task's diversity measure of a point's config (known before training)."""
    cfg = config.with_point(base_dict, point, check_device=False)
    return float(task_of(cfg).diversity(cfg.task).get(axis, np.nan))


def best_rows(studies: dict, all_slices: list[Slice], search: SearchConfig, base: config.Config,
              out: Path) -> pd.DataFrame:
    """One row per slice: the feasible candidate with the lowest objective (its params, objective, the task's
    diversity measure, success rate, training distribution q), how many candidates were evaluated (`n_trials`:
    completed Optuna trials) and feasible, and the reference's measured values."""
    base_dict, metric, axis = config.to_dict(base), search.tpe.minimize, task_of(base).diversity_axis
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
