"""What a search leaves beside study.journal: trials.csv, min_diversity.csv and report.html."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import patheffects
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dashboards.report import Section, write_report
from sweep import plots, samplers
from sweep.results import read_result, write_csv
from sweep.search import SearchConfig, Slice
from sweep.space import point_id

FINISHED = ("completed", "early_stopped", "diverged")
OUTLINE = [patheffects.withStroke(linewidth=2, foreground="white")]  # legible on any colour of the colormap


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
                result = read_result(point, out) or {"status": "unfinished"}
                rows.append({"study": sl.study_name, **point,
                             "candidate": candidate[search.knob.key] if search.knob.key else point_id(candidate),
                             "state": trial.state.name, "optuna_trial": trial.number, "feasible": feasible} | result)
    return pd.DataFrame(rows)


def min_diversity_rows(studies: dict, all_slices: list[Slice], search: SearchConfig, out: Path) -> pd.DataFrame:
    """One row per slice: diversity*, success rates at it and at the largest evaluated value below it, R at it."""
    min_rate = search.success.min_seeds / len(search.success.seeds)
    rows = []
    for sl in all_slices:
        trials = studies[sl.study_name].get_trials(deepcopy=False)
        pooled = samplers.evidence(trials, search.knob.key)
        star = samplers.minimal_value(sl.values, pooled, min_rate)
        below = max((v for v in pooled if star is None or v < star), default=None)
        rate = lambda v: pooled[v].successes / pooled[v].seeds if v in pooled else np.nan
        ratio = np.nan
        if star is not None:
            result = read_result(sl.point | {search.knob.key: star, "seed": search.success.seeds[0]}, out)
            ratio = result["data/max_sum_ratio"] if result else np.nan
        rows.append(sl.point | {"diversity_star": star, "success_rate_at_star": rate(star), "below_star": below,
                                "success_rate_below_star": rate(below), "data/max_sum_ratio": ratio,
                                "n_trials": sum(t.state.name == "COMPLETE" for t in trials),
                                "study": sl.study_name})
    return pd.DataFrame(rows)


def write(out: Path, base, search: SearchConfig, trials: pd.DataFrame, minimal: pd.DataFrame, resolved: str) -> None:
    write_csv(trials, out / "trials.csv")
    write_csv(minimal, out / "min_diversity.csv")
    slice_keys = [axis.key for axis in search.slices]
    sections = [Section("Minimal diversity per slice", table=minimal)]
    finished = trials[trials["status"].isin(FINISHED)] if len(trials) else trials
    if slice_keys and len(finished):
        figure = plots.phase_diagram(finished, slice_keys[0], search.knob.key, search.success.metric,
                                     panels=slice_keys[1:])
        draw_traces(figure, finished, minimal, slice_keys, search.knob.key)
        sections.append(Section("Search traces over the points they evaluated (numbers: evaluation order; "
                                "star: diversity*)", image_png=plots.figure_to_png(figure), alt="search traces"))
        if minimal["data/max_sum_ratio"].notna().any():
            sections.append(Section("Measured threshold: max-sum ratio R at diversity*",
                                    image_png=plots.figure_to_png(threshold_figure(minimal, slice_keys)),
                                    alt="max-sum ratio at the minimal diversity"))
    sections.append(Section("Trials (one row per seed; all metrics in trials.csv)",
                            table=trials[[c for c in ["study", *slice_keys, "candidate", "seed", "state", "status",
                                                       search.success.metric] if c in trials.columns]]))
    sections.append(Section("Config", text=resolved))
    write_report(out / "report.html", f"headsweep search: {base.name}", sections)


def draw_traces(figure: Figure, finished: pd.DataFrame, minimal: pd.DataFrame, slice_keys: list[str], knob: str):
    """Mark each slice's evaluations in order, and its diversity*, on the phase diagram's categorical axes."""
    x_key, panel_keys = slice_keys[0], slice_keys[1:]
    xs = list(np.sort(finished[x_key].unique()))
    ys = list(np.sort(finished[knob].unique()))
    combos = [()] if not panel_keys else list(
        finished[panel_keys].drop_duplicates().sort_values(panel_keys).itertuples(index=False, name=None))
    for ax, combo in zip(figure.axes, combos):
        rows = finished
        for key, value in zip(panel_keys, combo):
            rows = rows[rows[key] == value]
        for x_value, slice_rows in rows.groupby(x_key):
            order = slice_rows.drop_duplicates("optuna_trial").sort_values("optuna_trial")
            labels: dict = {}  # candidate -> evaluation numbers ("2,5": evaluated second, re-checked fifth)
            for n, candidate in enumerate(order["candidate"], start=1):
                labels.setdefault(candidate, []).append(str(n))
            for candidate, numbers in labels.items():
                ax.annotate(",".join(numbers), (xs.index(x_value), ys.index(candidate)), ha="center", va="center",
                            fontsize=7, color="black", weight="bold", path_effects=OUTLINE)
        stars = minimal
        for key, value in zip(panel_keys, combo):
            stars = stars[stars[key] == value]
        for _, row in stars.dropna(subset=["diversity_star"]).iterrows():
            if row[x_key] in xs and row["diversity_star"] in ys:
                ax.plot(xs.index(row[x_key]), ys.index(row["diversity_star"]), marker="*", markersize=16,
                        markerfacecolor="none", markeredgecolor="red", markeredgewidth=1.5)


def threshold_figure(minimal: pd.DataFrame, slice_keys: list[str]) -> Figure:
    """R at diversity* against the first slice key, one line per value of the other slice keys (e.g. N_trg); for a
    n_triggers slice the theory's 1/N_trg scale is drawn dashed beside it."""
    fig = Figure(figsize=(6, 4), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    x_key, others = slice_keys[0], slice_keys[1:]
    groups = minimal.groupby(others) if others else [((), minimal)]
    for combo, rows in groups:
        combo = combo if isinstance(combo, tuple) else (combo,)
        label = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in zip(others, combo)) or "R*"
        line, = ax.plot(rows[x_key], rows["data/max_sum_ratio"], marker="o", label=label)
        for key, value in zip(others, combo):
            if key.endswith("n_triggers"):
                ax.axhline(1 / value, color=line.get_color(), linestyle="--", linewidth=1, label=f"1/{value}")
    ax.set_xlabel(x_key)
    ax.set_ylabel("data/max_sum_ratio at diversity*")
    ax.legend(fontsize="small")
    return fig
