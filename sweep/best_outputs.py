"""What a search that minimises a metric (`search.minimize`, e.g. the data cost of a distribution's shape) leaves
beside study.journal: trials.csv, best.csv (the best candidate that succeeds, per slice, next to the reference such as
Proposition 8) and report.html (cost against R, the best shapes against the reference's, the search's progress)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dashboards.report import Section, write_report
from sweep import plots
from sweep.results import read_result, write_csv
from sweep.search import SearchConfig, Slice
from trainables import config
from trainables.tasks.lengths import distribution

RATIO = "data/max_sum_ratio"


def best_rows(studies: dict, all_slices: list[Slice], search: SearchConfig, base: config.Config,
              out: Path) -> pd.DataFrame:
    """One row per slice: the feasible candidate with the lowest objective (its params, objective, R, success rate,
    length distribution q), how many candidates were evaluated and feasible, and the reference's measured values."""
    base_dict, metric = config.to_dict(base), search.minimize
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
                    RATIO: result.get(RATIO, np.nan), "success_rate": best.user_attrs["successes"] / best.user_attrs["seeds"],
                    "q": _shape(base_dict, point)}
        if search.reference:
            point = sl.point | search.reference
            results = [r for r in (read_result(point | {"seed": s}, out) for s in search.success.seeds) if r]
            hits = [r.get(search.success.metric, -math.inf) >= search.success.threshold for r in results]
            row |= {f"reference {metric}": np.mean([r[metric] for r in results]) if results else np.nan,
                    f"reference {RATIO}": results[0][RATIO] if results else np.nan,
                    "reference success_rate": np.mean(hits) if results else np.nan,
                    "reference q": _shape(base_dict, point)}
        rows.append(row | {"study": sl.study_name})
    return pd.DataFrame(rows)


def _shape(base_dict: dict, point: dict) -> dict[int, float]:
    """The training length distribution {l: q_l} of a point's config (SPEC §1)."""
    task = config.with_point(base_dict, point, check_device=False).task
    return distribution(task.lengths, task.n_triggers)


def format_shape(q) -> str:
    return " ".join(f"{l}:{p:.3f}" for l, p in q.items()) if isinstance(q, dict) else ""


def parse_shape(text) -> dict[int, float] | None:
    """format_shape's text back to {l: q_l} (None for an empty cell)."""
    if not isinstance(text, str) or not text.strip():
        return None
    return {int(l): float(q) for l, q in (pair.split(":") for pair in text.split())}


def write(out: Path, base, search: SearchConfig, trials: pd.DataFrame, best: pd.DataFrame, resolved: str) -> None:
    shapes = [c for c in ("q", "reference q") if c in best.columns]
    table = best.assign(**{c: best[c].map(format_shape) for c in shapes})
    write_csv(trials, out / "trials.csv")
    write_csv(table, out / "best.csv")
    sections = [Section(f"Lowest {search.minimize} that generalizes, per slice (reference: "
                        f"{', '.join(f'{k}={v}' for k, v in search.reference.items()) or 'none'})", table=table)]
    sections += figure_sections(trials, best, search)
    sections.append(Section("Trials (one row per seed; all metrics in trials.csv)",
                            table=trials[[c for c in ["study", "candidate", "seed", "state", "feasible",
                                                       search.success.metric, search.minimize, RATIO]
                                          if c in trials.columns]]))
    sections.append(Section("Config", text=resolved))
    write_report(out / "report.html", f"headsweep search: {base.name}", sections)


def figure_sections(trials: pd.DataFrame, best: pd.DataFrame, search: SearchConfig) -> list[Section]:
    """The report's figures (also drawn by `headsweep report` from trials.csv and best.csv)."""
    sections = []
    if len(trials) and "feasible" in trials.columns and trials["feasible"].notna().any():
        sections += [
            Section(f"Every candidate: {search.minimize} against the max-sum ratio R (filled: generalizes; star: best; "
                    "diamond: reference)", image_png=plots.figure_to_png(cost_figure(trials, best, search)),
                    alt="cost against max-sum ratio"),
            Section("Search progress: best feasible value after each evaluation (dashed: reference)",
                    image_png=plots.figure_to_png(progress_figure(trials, best, search)), alt="search progress"),
        ]
    if "q" in best.columns and best["q"].map(lambda q: isinstance(q, dict)).any():
        sections.append(Section("Best length distribution q_l found (bars) against the reference (line)",
                                image_png=plots.figure_to_png(shape_figure(best, search)), alt="best distributions"))
    return sections


def _panels(n: int) -> tuple[Figure, list]:
    fig = Figure(figsize=(4.2 * n, 3.6), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, list(np.atleast_1d(fig.subplots(1, n, squeeze=False)[0]))


def _title(row: pd.Series, slice_keys: list[str]) -> str:
    return ", ".join(f"{k.rsplit('.', 1)[-1]}={row[k]}" for k in slice_keys)


def cost_figure(trials: pd.DataFrame, best: pd.DataFrame, search: SearchConfig) -> Figure:
    """Per slice: each evaluated candidate at (R, objective), mean over its seeds; where the slice fixes N_trg the
    theory's scale R = 1/N_trg is drawn dashed."""
    metric, keys = search.minimize, [a.key for a in search.slices]
    fig, axes = _panels(len(best))
    for ax, (_, row) in zip(axes, best.iterrows()):
        rows = trials[(trials["study"] == row["study"]) & trials["feasible"].notna()]
        per_candidate = rows.groupby("optuna_trial").agg(ratio=(RATIO, "mean"), value=(metric, "mean"),
                                                        feasible=("feasible", "first"))
        ok = per_candidate[per_candidate["feasible"].astype(bool)]
        bad = per_candidate[~per_candidate["feasible"].astype(bool)]
        ax.scatter(bad["ratio"], bad["value"], s=14, facecolors="none", edgecolors="grey", label="fails")
        ax.scatter(ok["ratio"], ok["value"], s=14, color="tab:blue", label="generalizes")
        if not pd.isna(row.get(metric)):
            ax.plot(row[RATIO], row[metric], marker="*", markersize=16, color="red", linestyle="", label="best")
        if not pd.isna(row.get(f"reference {metric}", np.nan)):
            filled = row["reference success_rate"] >= search.success.min_seeds / len(search.success.seeds)
            ax.plot(row[f"reference {RATIO}"], row[f"reference {metric}"], marker="D", markersize=8, linestyle="",
                    color="black", fillstyle="full" if filled else "none", label="reference")
        if "task.n_triggers" in row:
            ax.axvline(1 / row["task.n_triggers"], color="black", linestyle="--", linewidth=0.8, label="1/N_trg")
        ax.set_title(_title(row, keys), fontsize=9)
        ax.set_xlabel("R (data/max_sum_ratio)")
        ax.set_ylabel(metric)
    axes[0].legend(fontsize="x-small")
    return fig


def progress_figure(trials: pd.DataFrame, best: pd.DataFrame, search: SearchConfig) -> Figure:
    fig = Figure(figsize=(6, 4), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    metric, keys = search.minimize, [a.key for a in search.slices]
    for _, row in best.iterrows():
        rows = trials[(trials["study"] == row["study"]) & trials["feasible"].notna()]
        per_candidate = rows.groupby("optuna_trial").agg(value=(metric, "mean"), feasible=("feasible", "first"))
        so_far = per_candidate["value"].where(per_candidate["feasible"].astype(bool)).cummin().ffill()
        line, = ax.step(np.arange(1, len(so_far) + 1), so_far.to_numpy(), where="post", label=_title(row, keys))
        if not pd.isna(row.get(f"reference {metric}", np.nan)):
            ax.axhline(row[f"reference {metric}"], color=line.get_color(), linestyle="--", linewidth=1)
    ax.set_xlabel("evaluated candidates")
    ax.set_ylabel(f"lowest feasible {metric}")
    ax.legend(fontsize="x-small")
    return fig


def shape_figure(best: pd.DataFrame, search: SearchConfig) -> Figure:
    keys = [a.key for a in search.slices]
    fig, axes = _panels(len(best))
    for ax, (_, row) in zip(axes, best.iterrows()):
        if isinstance(row.get("q"), dict):
            ax.bar(list(row["q"]), list(row["q"].values()), color="tab:blue", alpha=0.7, label="best")
        if isinstance(row.get("reference q"), dict):
            ax.plot(list(row["reference q"]), list(row["reference q"].values()), "k.-", label="reference")
        lengths = [l for c in ("q", "reference q") if isinstance(row.get(c), dict) for l in row[c]]
        ax.set_xticks(range(1, max(lengths) + 1, 1 if max(lengths) <= 16 else 2))
        ax.set_title(_title(row, keys), fontsize=9)
        ax.set_xlabel("length l")
        ax.set_ylabel("q_l")
    axes[0].legend(fontsize="x-small")
    return fig
