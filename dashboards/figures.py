"""The figures of a whole grid or search, from its tables: phase diagrams, metric curves, a search's traces, success
curves and thresholds with their intervals, the distribution search's figures. Pure functions (tables) -> matplotlib
Figure, drawn by the report (report.py), `headsweep compare` and a search's own W&B run; trainables/figures.py has
the figures of one member and the plumbing both use (new_figure, png_bytes, save_png, rgb), re-exported here.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib import patheffects
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator

from trainables.figures import OUTLINE, new_figure, png_bytes, rgb, save_png  # noqa: F401 (re-exported)

PANEL_COLS = 3  # phase-diagram panels per row; more would make each heatmap too small to read
PANEL_SIZE = (4.2, 3.8)  # inches per phase-diagram panel; fits 13 x 13 cells with legible tick labels
UNIT_INTERVAL_SUFFIXES = ("acc", "_rate")  # metrics in [0, 1] get a fixed colour scale so figures compare
OPEN_COLOUR = "#b35900"  # a slice (or point) whose search stopped before its answer settled
DASH = "\u2013"  # no value
UNFINISHED_RING = dict(marker="o", markersize=13, markerfacecolor="none", color="black", markeredgewidth=1.2,
                       linestyle="")  # around a point whose slice is not finished (black: no line's colour)


def curves(runs: dict[str, list[dict]], metrics: tuple[str, ...], colour_by: dict[str, float] | None = None,
           colour_label: str = "") -> Figure:
    """One panel per metric over training steps, one line per run: `runs` maps a label to its metrics.jsonl records.

    With `colour_by` (label -> value, e.g. each run's max-sum ratio) lines are coloured by that value with a colour
    bar; otherwise up to 12 runs get a legend. Runs with a single evaluation show as points; missing or null values
    are skipped.
    """
    present = [m for m in metrics if any(r.get(m) is not None for records in runs.values() for r in records)] \
        or list(metrics[:1])
    fig = new_figure(3.6 * len(present) + 1.2, 3.2)
    axes = fig.subplots(1, len(present), squeeze=False)[0]
    mappable = None
    if colour_by:
        values = np.array([v for v in colour_by.values() if v is not None and np.isfinite(v)], dtype=float)
        low, high = (values.min(), values.max()) if len(values) else (0.0, 1.0)
        # Values spanning decades (counts of strings, keys, tables: 2, 16, 256) on a log scale, or all but the
        # largest would share one colour.
        decades = low > 0 and high >= 10 * low
        scale = LogNorm(low, high) if decades else Normalize(low, high if high > low else low + 1e-9)
        mappable = ScalarMappable(scale, cmap="viridis")
    for ax, metric in zip(axes, present):
        for label, records in runs.items():
            points = [(r["step"], r[metric]) for r in records if r.get(metric) is not None]
            if not points:
                continue
            steps, values = zip(*points)
            value = colour_by.get(label) if colour_by else None
            colour = mappable.to_rgba(value) if mappable is not None and value is not None else None
            ax.plot(steps, values, marker="o" if len(points) < 3 else None, markersize=4, linewidth=1.2,
                    color=colour, alpha=0.85, label=label)
        ax.set_title(metric, fontsize="medium")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    if mappable is not None:
        fig.colorbar(mappable, ax=list(axes), label=colour_label, pad=0.01)
    elif 1 < len(runs) <= 12:
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right upper", fontsize="x-small", frameon=False)
    return fig


def against(x: np.ndarray, ys: dict[str, np.ndarray], x_label: str) -> Figure:
    """One scatter panel per metric: a final value per member against `x` (e.g. the max-sum ratio), where a phase
    transition shows as a step. Metrics in [0, 1] (accuracies, rates) get the whole interval as their y range, so
    that 0.97 against 0.98 does not look like a step."""
    fig = new_figure(3.6 * len(ys) + 0.4, 3.2)
    axes = fig.subplots(1, len(ys), squeeze=False)[0]
    for ax, (metric, y) in zip(axes, ys.items()):
        if metric.endswith(UNIT_INTERVAL_SUFFIXES):
            ax.set_ylim(-0.03, 1.03)
        ax.scatter(x, y, s=18, alpha=0.8)
        ax.set_title(metric, fontsize="medium")
        ax.set_xlabel(x_label)
        log_axis_if_geometric(ax, x)
        ax.grid(alpha=0.3)
    return fig


GEOMETRIC = 30  # values spanning this factor or more (all positive) get a log axis: 16, 256, 1024 read as steps


def log_axis_if_geometric(ax, values) -> None:
    values = pd.to_numeric(pd.Series(np.asarray(values).ravel()), errors="coerce").dropna()
    if len(values) and values.min() > 0 and values.max() / values.min() >= GEOMETRIC:
        ax.set_xscale("log")


def one_axis(results: pd.DataFrame, x: str, metric: str) -> Figure:
    """A one-axis grid's phase diagram: `metric` of every member against the swept key (a dot per seed, the mean over
    seeds as a line), on a log axis where the values span a factor of GEOMETRIC or more."""
    _check_drawable(results, keys=[x], needed=[x, metric])
    values = pd.to_numeric(results[metric], errors="coerce")
    means = values.groupby(results[x]).mean().sort_index()
    fig = new_figure(5.2, 3.6, dpi=120)
    ax = fig.subplots()
    ax.scatter(results[x], values, s=18, alpha=0.6, label="a seed")
    ax.plot(means.index, means.to_numpy(), marker="o", label="mean over seeds")
    if metric.endswith(UNIT_INTERVAL_SUFFIXES):
        ax.set_ylim(-0.03, 1.03)
    log_axis_if_geometric(ax, results[x])
    ax.set_xlabel(x)
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small", frameon=False)
    fig.suptitle(f"{metric} over {short_key(x)}")
    return fig


def phase_diagram(results: pd.DataFrame, x: str, y: str, metric: str, ratio_level: float | None = None,
                  ratio_metric: str = "", ratio_label: str = "", panels: list[str] | tuple[str, ...] = ()) -> Figure:
    """Heatmap of the mean of `metric` per (x, y) cell, one panel per combination of the `panels` keys' values.

    Cells sit at the index of each distinct value (a categorical axis), so sparse or uneven grids still get one cell
    per value; cells with no member stay blank. Rows are averaged only within a cell of (panels..., x, y), i.e. over
    seeds: any other swept dotted key that varies would be averaged over silently, so that raises ValueError. Filter
    rows (e.g. by status) before calling. With `ratio_level`, a contour of the cell-mean `ratio_metric` at that level is
    drawn on every panel where it lies strictly inside the panel's range, labelled `ratio_label = level`.
    """
    panels = list(panels)
    _check_drawable(results, keys=[x, y, *panels],
                    needed=[x, y, metric, *panels] + ([ratio_metric] if ratio_level is not None else []))

    xs = np.sort(results[x].dropna().unique())
    ys = np.sort(results[y].dropna().unique())
    combos = _combos(results, panels)
    vmin, vmax = _colour_range(results, metric)

    n_cols = min(len(combos), PANEL_COLS)
    n_rows = math.ceil(len(combos) / n_cols)
    fig = new_figure(PANEL_SIZE[0] * n_cols + 1.0, PANEL_SIZE[1] * n_rows + 0.6, dpi=120)
    axes = fig.subplots(n_rows, n_cols, squeeze=False).ravel()
    for ax in axes[len(combos):]:
        ax.remove()  # leftover slots of the last row

    for ax, combo in zip(axes, combos):
        rows = _select(results, panels, combo)
        grid = cell_means(rows, x, y, metric, xs, ys)  # (len(ys), len(xs))
        image = ax.imshow(grid, origin="lower", cmap="viridis", vmin=vmin, vmax=vmax, aspect="auto",
                          interpolation="nearest")
        if ratio_level is not None:
            _draw_level(ax, cell_means(rows, x, y, ratio_metric, xs, ys), ratio_level, ratio_label or ratio_metric)
        ax.set_xticks(range(len(xs)), [_fmt(v) for v in xs])
        ax.set_yticks(range(len(ys)), [_fmt(v) for v in ys])
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        if panels:
            ax.set_title(", ".join(f"{k} = {_fmt(v)}" for k, v in zip(panels, combo)), fontsize="medium")
    fig.colorbar(image, ax=list(axes[:len(combos)]), label=f"{metric} (mean over seeds)", shrink=0.9)
    fig.suptitle(f"{metric} over {short_key(x)} \u00d7 {short_key(y)}")  # the axes name the full keys
    return fig


def cell_means(rows: pd.DataFrame, x: str, y: str, metric: str, xs, ys) -> np.ndarray:
    """(len(ys), len(xs)) array of the mean of `metric` per (x, y) value pair; NaN where no row has a value."""
    values = pd.to_numeric(rows[metric], errors="coerce")  # a CSV column with stray text must not crash the plot
    means = values.groupby([rows[y], rows[x]]).mean()
    return means.reindex(pd.MultiIndex.from_product([ys, xs])).to_numpy(dtype=float).reshape(len(ys), len(xs))


def search_traces(figure: Figure, finished: pd.DataFrame, minimal: pd.DataFrame, slice_keys: list[str], knob: str):
    """On a phase diagram of a search's evaluations (x = first slice key, y = knob, panels = the other slice keys):
    each slice's evaluations numbered in order ("2,5": evaluated second, re-checked fifth), its diversity* starred
    and its interval [`diversity_star_low`, `diversity_star_high`] as a red bracket at the cell's right edge (an
    interval end between two values evaluated sits between their cells; an open end, beyond the widest value, runs
    to the top with an arrow)."""
    x_key, panel_keys = slice_keys[0], slice_keys[1:]
    xs = list(np.sort(finished[x_key].unique()))
    ys = list(np.sort(finished[knob].unique()))
    combos = _combos(finished, panel_keys)  # phase_diagram's panels, in its order
    for ax, combo in zip(figure.axes, combos):
        for x_value, slice_rows in _select(finished, panel_keys, combo).groupby(x_key):
            order = slice_rows.drop_duplicates("optuna_trial").sort_values("optuna_trial")
            labels: dict = {}
            for n, candidate in enumerate(order["candidate"], start=1):
                labels.setdefault(candidate, []).append(str(n))
            for candidate, numbers in labels.items():
                ax.annotate(",".join(numbers), (xs.index(x_value), ys.index(candidate)), ha="center", va="center",
                            fontsize=7, color="black", weight="bold", path_effects=OUTLINE)
        for _, row in _select(minimal, panel_keys, combo).iterrows():
            if row[x_key] not in xs:
                continue
            x = xs.index(row[x_key])
            star = row.get("diversity_star", np.nan)
            if not pd.isna(star) and star in ys:
                ax.plot(x, ys.index(star), marker="*", markersize=16,
                        markerfacecolor="none", markeredgecolor="red", markeredgewidth=1.5)
            if "diversity_star_low" in row and "diversity_star_high" in row:  # not in an older min_diversity.csv
                _bracket(ax, x, ys, row["diversity_star_low"], row["diversity_star_high"])


def _bracket(ax, x: float, ys: list, low, high) -> None:
    """K*'s interval on a categorical knob axis (cell i at y = i): a bracket at the right edge of column x."""
    top = len(ys) - 0.5
    where = lambda value: float(np.clip(np.interp(float(value), ys, np.arange(len(ys))), -0.5, top))
    bottom = where(low) - 0.4 if not pd.isna(low) else top - 0.4  # low open too: K* beyond every value
    end = where(high) + 0.4 if not pd.isna(high) else top
    edge, tick = x + 0.44, x + 0.3
    style = dict(color="red", linewidth=1.6, solid_capstyle="butt", path_effects=OUTLINE)
    ax.plot([tick, edge, edge], [bottom, bottom, min(end, top)], **style)
    if pd.isna(high):
        ax.annotate("", xy=(edge, top), xytext=(edge, top - 0.6),
                    arrowprops=dict(arrowstyle="->", color="red", linewidth=1.6), annotation_clip=False)
    else:
        ax.plot([edge, tick], [min(end, top)] * 2, **style)


def success_curves(curve: pd.DataFrame, minimal: pd.DataFrame, slice_keys: list[str], knob: str, q: float,
                   confidence: float | None = None) -> Figure:
    """A search's success curves (success_curve.csv) with its answers (min_diversity.csv): one panel per slice
    (columns: the first slice key's values; rows: the other keys'), each drawn by _success_panel. An interval reaching
    past the widest value runs into the grey "beyond" strip at the right."""
    keys = slice_keys or ["study"]
    first, others = keys[0], keys[1:]
    columns = list(np.sort(minimal[first].unique()))
    rows = _combos(minimal, others)
    fig = new_figure(0.6 + 3.1 * len(columns), 0.9 + 2.5 * len(rows), dpi=110)
    axes = fig.subplots(len(rows), len(columns), squeeze=False, sharey=True)
    unfinished = open_slices(minimal)
    label = f"{confidence:.0%} interval" if confidence else "interval"
    for r, combo in enumerate(rows):
        for c, value in enumerate(columns):
            ax = axes[r, c]
            found = _select(minimal, [first, *others], (value, *combo))
            if found.empty:
                ax.remove()  # a slice the search's constraints left out
                continue
            answer = found.iloc[0]
            points = curve[curve["study"] == answer["study"]] if "study" in curve and "study" in answer else \
                _select(curve, keys, (value, *combo))
            _success_panel(ax, points.sort_values(knob), answer, knob, q, label)
            title = slice_title(answer, keys) if slice_keys else str(value)
            title += f"\nK* = {interval_text(answer, 'diversity_star')}"
            if unfinished[found.index[0]]:
                ax.set_title(title + " (not finished)", fontsize=9, color=OPEN_COLOUR)
            else:
                ax.set_title(title, fontsize=9)
            if r == len(rows) - 1:
                ax.set_xlabel(knob)
            if c == 0:
                ax.set_ylabel("p(seed passes)")
    legend = {}  # label -> the first panel's handle: each label once
    for ax in fig.axes:
        for handle, text in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(text, handle)
    fig.legend(list(legend.values()), list(legend), loc="outside lower center", ncol=min(len(legend), 4),
               fontsize="x-small", frameon=False)
    fig.suptitle(f"Success curves: p(K) per slice; K*_q is the smallest K with p \u2265 q = {q:g}", fontsize=11)
    return fig


def _success_panel(ax, points: pd.DataFrame, answer: pd.Series, knob: str, q: float, interval_label: str) -> None:
    """One slice of success_curves: p(K), the probability that a seed trained at knob value K passes (monotone
    estimate and band), each value's seeds as a dot at passed / trained (area: seeds), q dashed, K*_q starred with its
    interval shaded."""
    values = points[knob].to_numpy(dtype=float)  # (m,) the slice's knob values, increasing
    ax.set_ylim(-0.04, 1.04)
    ax.grid(alpha=0.3)
    ax.axhline(q, color="black", linestyle="--", linewidth=1, label=f"q = {q:g}")
    if len(values) == 0:
        return
    gaps = np.diff(values)
    step = float(np.median(gaps)) if len(gaps) else 1.0
    edges = np.concatenate([[values[0] - step / 2], (values[1:] + values[:-1]) / 2, [values[-1] + step / 2]])
    beyond = (edges[-1], values[-1] + 1.5 * step)  # where an answer past the widest value goes
    ax.set_xlim(edges[0], beyond[1])
    whole = bool(np.all(values == np.round(values)))
    ticks = MaxNLocator(nbins=6, integer=whole).tick_values(values[0], values[-1])
    ax.set_xticks([t for t in ticks if values[0] <= t <= values[-1]])  # none in the "beyond" strip
    ax.axvspan(*beyond, color="0.85", linewidth=0)
    ax.text(sum(beyond) / 2, 0.2, "beyond", rotation=90, ha="center", va="center", fontsize="x-small", color="0.35")
    ax.fill_between(values, points["p_low"], points["p_high"], color="C0", alpha=0.22, linewidth=0,
                    label=f"p: {interval_label}")
    ax.plot(values, points["p"], color="C0", linewidth=1.6, label="p: monotone estimate")
    trained = points["trained"].to_numpy(dtype=float)
    seen = trained > 0
    if seen.any():
        passed = points["passed"].to_numpy(dtype=float)
        ax.scatter(values[seen], passed[seen] / trained[seen], s=12 + 10 * trained[seen], color="black", alpha=0.65,
                   edgecolors="white", linewidths=0.5, zorder=3, label="passed / trained (area: seeds)")
    index = lambda value: int(np.argmin(np.abs(values - float(value))))
    low, high, star = (answer.get(k, np.nan) for k in ("diversity_star_low", "diversity_star_high", "diversity_star"))
    if not (pd.isna(low) and pd.isna(high) and not pd.isna(star)):  # an older table has a star and no interval
        left = edges[index(low)] if not pd.isna(low) else beyond[0]
        right = edges[index(high) + 1] if not pd.isna(high) else beyond[1]
        ax.axvspan(left, right, color="C3", alpha=0.18, linewidth=0, label=f"K*: {interval_label}")
    if not pd.isna(star):
        ax.plot(float(star), q, marker="*", markersize=13, color="C3", markeredgecolor="white", linestyle="",
                zorder=4, label="K*")
    elif not pd.isna(low) or pd.isna(high):  # the estimate is past the widest value
        ax.plot(sum(beyond) / 2, q, marker="*", markersize=13, markerfacecolor="white", markeredgecolor="C3",
                linestyle="", zorder=4, label="K* past the widest value")


def interval_text(row: pd.Series, column: str, digits: int | None = None, dash: str = DASH) -> str:
    """"5 [4, 6]" (with `digits`, each number to that many decimals); `dash` for a point past the widest value,
    "beyond" for an open end; the point alone from a table without intervals; `dash` alone for a slice without
    seeds (a search stopped before it trained any there)."""
    if row.get("seeds", 1) == 0:
        return dash
    text = lambda value: "beyond" if pd.isna(value) else f"{value:.{digits}f}" if digits is not None else _fmt(value)
    point = row.get(column, np.nan)
    shown = dash if pd.isna(point) else text(point)
    if f"{column}_low" not in row:
        return shown
    return f"{shown} [{text(row[f'{column}_low'])}, {text(row.get(f'{column}_high', np.nan))}]"


def answer_table(table: pd.DataFrame, slice_keys: list[str], axis: str) -> pd.DataFrame:
    """min_diversity.csv as the terminal prints it and the report shows it first: each answer beside its interval
    ("beyond" where the interval reaches past the widest value tried; no interval for the shared-seed samplers), p at
    the widest value tried, and why each slice stopped ("no (open)" on a slice that is not finished)."""
    shown = table[slice_keys].copy()
    shown["K*_q [interval]"] = table.apply(lambda row: interval_text(row, "diversity_star", dash="-"), axis=1)
    if axis in table and table[axis].notna().any():
        shown[f"{axis} [interval]"] = table.apply(lambda row: interval_text(row, axis, 3, dash="-"), axis=1)
    shown["seeds"] = table["seeds"]
    shown["p at widest [interval]"] = table.apply(
        lambda row: "-" if pd.isna(row["p_at_widest"]) else f"{row['p_at_widest']:.2f}" + (
            f" [{row['p_at_widest_low']:.2f}, {row['p_at_widest_high']:.2f}]" if "p_at_widest_low" in row else "")
        + (f" at {row['widest_tried']:g}" if pd.notna(row.get("widest_tried")) else ""), axis=1)
    stopped = table["stopped"] if "stopped" in table else table["finished"].map(lambda d: "finished" if d else "open")
    shown["stopped"] = [reason if done else "no (open)" for reason, done in zip(stopped, table["finished"])]
    return shown


def open_slices(minimal: pd.DataFrame) -> pd.Series:
    """(rows,) bool: the slices whose `finished` is False (the search stopped before the answer settled); a table
    without that column has none."""
    if "finished" not in minimal:
        return pd.Series(False, index=minimal.index)
    return minimal["finished"].map(lambda done: str(done).strip().lower() in ("false", "0", "0.0"))


def threshold(minimal: pd.DataFrame, slice_keys: list[str], metric: str, theory: list[float | None]) -> Figure:
    """`metric` at diversity* against the first slice key, one line per value of the other slice keys, with its
    interval [`{metric}_low`, `{metric}_high`] drawn by _interval_bars. theory[i] is the reference value of row i's
    slice (drawn dashed in its line's colour, once per value)."""
    fig = new_figure(6.4, 4.4, dpi=110)
    ax = fig.subplots()
    x_key, others = slice_keys[0], slice_keys[1:]
    minimal = minimal.assign(_theory=theory, _open=open_slices(minimal))
    groups = list(minimal.groupby(others)) if others else [((), minimal)]
    xs = np.sort(minimal[x_key].unique())
    numeric = pd.api.types.is_numeric_dtype(minimal[x_key])  # else categorical: one place per value
    positions = xs.astype(float) if numeric else np.arange(len(xs), dtype=float)
    place = dict(zip(xs, positions))
    spacing = float(np.diff(positions).min()) if len(xs) > 1 else 1.0
    unbounded = 0
    for g, (combo, rows) in enumerate(groups):  # (combo: a tuple, as others is a list)
        label = ", ".join(f"{short_key(k)}={_fmt(v)}" for k, v in zip(others, combo)) or "measured"
        x = rows[x_key].map(place) + (g - (len(groups) - 1) / 2) * 0.06 * spacing  # side by side
        line, = ax.plot(x, rows[metric], marker="o", label=label)
        unbounded += _interval_bars(ax, x, rows[metric], _column(rows, f"{metric}_low"),
                                    _column(rows, f"{metric}_high"), line.get_color(), rows["_open"])
        for value in dict.fromkeys(v for v in rows["_theory"] if v is not None and np.isfinite(v)):
            ax.axhline(value, color=line.get_color(), linestyle="--", linewidth=1, label=f"theory {value:.3g}")
    if minimal["_open"].any():
        ax.plot([], [], label="not finished", **UNFINISHED_RING)
    ax.set_xticks(positions, [_fmt(v) for v in xs])
    ax.margins(y=0.12)  # room for the arrows of open sides
    if unbounded:
        ax.set_title(f"{unbounded} slice(s) with no bound at all: past every value tried", fontsize="small")
    ax.set_xlabel(x_key)
    ax.set_ylabel(f"{metric} at diversity* (bars: interval)")
    ax.legend(fontsize="small")
    return fig


def _column(frame: pd.DataFrame, name: str) -> pd.Series:
    """A numeric column, all NaN where the table has none (an older min_diversity.csv)."""
    return pd.to_numeric(frame[name], errors="coerce") if name in frame else pd.Series(np.nan, index=frame.index)


def _interval_bars(ax, x, y, low, high, colour, unfinished) -> int:
    """A vertical bar per point from `low` to `high` (capped where bounded); from the point, an arrow toward a side
    that is NaN (open). Where the point is NaN, a hollow marker at the interval's bounded end and an arrow toward the
    open side; a black ring around each `unfinished` one. Returns how many points have neither (nothing to draw)."""
    arrow = dict(arrowstyle="<-", color=colour, linewidth=1.2)  # the head at the offset end: pointing away
    nothing = 0
    for xi, yi, lo, hi, still_open in zip(x, y, low, high, np.asarray(unfinished, dtype=bool)):
        bounded = [v for v in (lo, hi) if np.isfinite(v)]
        if not np.isfinite(yi):
            if not bounded:
                nothing += 1
                continue
            yi = bounded[0]  # (a point past the widest value has its interval open on that side: one end)
            ax.plot(xi, yi, marker="o", markersize=7, color=colour, markerfacecolor="white", zorder=3)
        ends = [v if np.isfinite(v) else yi for v in (lo, hi)]
        ax.plot([xi, xi], ends, color=colour, linewidth=1.2)
        for v in bounded:
            ax.plot(xi, v, marker="_", markersize=8, markeredgewidth=1.4, color=colour)
        for v, direction in ((lo, -1), (hi, 1)):
            if not np.isfinite(v):
                ax.annotate("", xy=(xi, yi), xytext=(0, 22 * direction), textcoords="offset points",
                            arrowprops=arrow)
        if still_open:
            ax.plot(xi, yi, **UNFINISHED_RING)
    return nothing


def thresholds_against_theory(points: pd.DataFrame, metric: str) -> Figure:
    """Measured thresholds of several searches on one plot: `metric` at diversity* of each slice (y) against the
    theory's reference value for that slice (x; both axes log), y = x dashed. points: columns `search`, `theory`,
    `measured` (NaN where the slice's diversity* is past the widest value tried) and optionally `measured_low`,
    `measured_high` (its interval: a bar, an arrow where a side is open), `finished` (a black ring around a slice
    that is not), `bound` (for a slice without a point, `metric` where the evidence puts diversity* at the earliest:
    drawn hollow, pointing down, as the threshold lies beyond it) and `fitted_at_widest` (the share of the seeds at
    the widest value tried that fitted their training data, written beside the marker)."""
    fig = new_figure(7, 6, dpi=110)
    ax = fig.subplots()
    searches = list(dict.fromkeys(points["search"]))
    known = points["theory"].dropna()
    if len(known):  # side by side at one theory value: each search's slices, and the searches
        group = points.groupby(["search", "theory"], dropna=False)["theory"]
        spread = group.cumcount() - (group.transform("size") - 1) / 2  # (rows,) a slice's place in its search's group
        width = int(group.size().max()) + 1
        x, nudge = points["theory"], lambda x, shift: x * (1 + 0.015 * (spread[x.index] + width * shift))
    else:  # a task without theory lines: slice by slice, in the order the searches list them (column `slice`)
        labels = list(dict.fromkeys(points["slice"]))
        x, nudge = points["slice"].map(labels.index).astype(float), lambda x, shift: x + 0.08 * shift
        ax.set_xticks(range(len(labels)), labels, rotation=30 if len(labels) > 4 else 0)
        ax.set_xlim(-0.5, len(labels) - 0.5)
    for index, name in enumerate(searches):
        marker, shift, colour = "osD^<>ph"[index % 8], index - (len(searches) - 1) / 2, f"C{index % 10}"
        rows = points[points["search"] == name]
        placed = x[rows.index].notna()  # (rows,): has a place on the x axis
        found = rows[rows["measured"].notna() & placed]
        if len(found):
            ax.scatter(nudge(x[found.index], shift), found["measured"], marker=marker, s=40, alpha=0.8, color=colour,
                       label=f"{name} ({len(found)} of {len(rows)} slices found a threshold; bars: its interval)")
            _interval_bars(ax, nudge(x[found.index], shift), found["measured"], _column(found, "measured_low"),
                           _column(found, "measured_high"), colour, open_slices(found))
        bounds = rows[rows["measured"].isna() & placed].get("bound", pd.Series(dtype=float)).dropna()
        if len(bounds):
            ax.scatter(nudge(x[bounds.index], shift), bounds, marker="v", s=40, facecolors="none", edgecolors=colour,
                       label=f"{name}: no threshold in {len(bounds)} of {len(rows)} slices, a bound on it"
                             + ("\n(%: its seeds at the widest value that fitted the training data)"
                                if "fitted_at_widest" in rows else ""))
            for row, bound in bounds.items():
                fitted = rows["fitted_at_widest"][row] if "fitted_at_widest" in rows else np.nan
                if not np.isnan(fitted):
                    ax.annotate(f"{fitted:.0%}", (nudge(x[[row]], shift).iloc[0], bound), xytext=(5, -3),
                                textcoords="offset points", fontsize="x-small", color=colour)
            unfinished = open_slices(rows.loc[bounds.index])
            if unfinished.any():
                ax.plot(nudge(x[bounds.index], shift)[unfinished], bounds[unfinished], **UNFINISHED_RING)
    if open_slices(points).any():
        ax.plot([], [], label="not finished: the answer may still move", **UNFINISHED_RING)
    if len(known):
        line = np.geomspace(known.min() / 1.3, known.max() * 1.3, 50)
        ax.plot(line, line, "k--", linewidth=1, label="theory's scale (y = x)")
        ax.set_xscale("log")
        ax.set_yscale("log")  # y = x straight
        ticks = sorted(set(known))
        ax.set_xticks(ticks, [_fmt(t) for t in ticks])
        ax.minorticks_off()
        ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 3, 5)))  # 0.2, 0.3, 0.5, 1: a decade is all some y span
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: _fmt(round(value, 6))))
    ax.margins(y=0.12)  # room for the arrows of open sides
    ax.set_xlabel(f"theory's reference value of {metric}" if len(known) else "slice")
    ax.set_ylabel(f"measured {metric} at diversity*")
    ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.14))  # below: long labels
    return fig


def distribution_cost(members: pd.DataFrame, best: pd.DataFrame, metric: str, x_metric: str, slice_keys: list[str],
                      theory: list[float | None], min_rate: float) -> Figure:
    """Per slice (a row of best.csv): each evaluated candidate at (x_metric, metric), seed-mean, filled when it
    generalizes; the best starred, the reference as a diamond (filled when it generalizes), theory[i] dashed."""
    fig, axes = _panel_row(len(best))
    for ax, (_, row), value in zip(axes, best.iterrows(), theory):
        per_candidate = _per_candidate(members, row["study"], x=(x_metric, "mean"), value=(metric, "mean"))
        feasible = per_candidate["feasible"].astype(bool)
        ax.scatter(per_candidate["x"][~feasible], per_candidate["value"][~feasible], s=14, facecolors="none",
                   edgecolors="grey", label="fails")
        ax.scatter(per_candidate["x"][feasible], per_candidate["value"][feasible], s=14, color="tab:blue",
                   label="generalizes")
        if not pd.isna(row.get(metric)):
            ax.plot(row[x_metric], row[metric], marker="*", markersize=16, color="red", linestyle="", label="best")
        if not pd.isna(row.get(f"reference {metric}", np.nan)):
            filled = row["reference success_rate"] >= min_rate
            ax.plot(row[f"reference {x_metric}"], row[f"reference {metric}"], marker="D", markersize=8,
                    linestyle="", color="black", fillstyle="full" if filled else "none", label="reference")
        if value is not None and np.isfinite(value):
            ax.axvline(value, color="black", linestyle="--", linewidth=0.8, label=f"theory {value:.3g}")
        ax.set_title(slice_title(row, slice_keys), fontsize=9)
        ax.set_xlabel(x_metric)
        ax.set_ylabel(metric)
    axes[0].legend(fontsize="x-small")
    return fig


def distribution_progress(members: pd.DataFrame, best: pd.DataFrame, metric: str, slice_keys: list[str]) -> Figure:
    """The lowest feasible `metric` after each evaluated candidate, one step line per slice (reference dashed)."""
    fig = new_figure(6, 4, dpi=110)
    ax = fig.subplots()
    for _, row in best.iterrows():
        per_candidate = _per_candidate(members, row["study"], value=(metric, "mean"))
        so_far = per_candidate["value"].where(per_candidate["feasible"].astype(bool)).cummin().ffill()
        line, = ax.step(np.arange(1, len(so_far) + 1), so_far.to_numpy(), where="post",
                        label=slice_title(row, slice_keys))
        if not pd.isna(row.get(f"reference {metric}", np.nan)):
            ax.axhline(row[f"reference {metric}"], color=line.get_color(), linestyle="--", linewidth=1)
    ax.set_xlabel("evaluated candidates")
    ax.set_ylabel(f"lowest feasible {metric}")
    ax.legend(fontsize="x-small")
    return fig


def distributions(best: pd.DataFrame, slice_keys: list[str], x_label: str) -> Figure:
    """Per slice: the best distribution found (bars, column `q`) against the reference's (line, `reference q`)."""
    fig, axes = _panel_row(len(best))
    for ax, (_, row) in zip(axes, best.iterrows()):
        if isinstance(row.get("q"), dict):
            ax.bar(list(row["q"]), list(row["q"].values()), color="tab:blue", alpha=0.7, label="best")
        if isinstance(row.get("reference q"), dict):
            ax.plot(list(row["reference q"]), list(row["reference q"].values()), "k.-", label="reference")
        values = [v for c in ("q", "reference q") if isinstance(row.get(c), dict) for v in row[c]]
        if values:
            ax.set_xticks(range(1, max(values) + 1, 1 if max(values) <= 16 else 2))
        ax.set_title(slice_title(row, slice_keys), fontsize=9)
        ax.set_xlabel(x_label)
        ax.set_ylabel("probability")
    axes[0].legend(fontsize="x-small")
    return fig


def short_key(key: str) -> str:
    return key.rsplit(".", 1)[-1]


def slice_title(row: pd.Series, slice_keys: list[str]) -> str:
    return ", ".join(f"{short_key(k)}={_fmt(row[k])}" for k in slice_keys)


def _per_candidate(members: pd.DataFrame, study: str, **columns) -> pd.DataFrame:
    """A study's evaluated candidates (one row per Optuna trial, seed-means over its members), with whether each
    generalized."""
    rows = members[(members["study"] == study) & members["feasible"].notna()]
    return rows.groupby("optuna_trial").agg(feasible=("feasible", "first"), **columns)


def _panel_row(n: int) -> tuple[Figure, list]:
    fig = new_figure(4.2 * n, 3.6, dpi=110)
    return fig, list(fig.subplots(1, n, squeeze=False)[0])


def _combos(frame: pd.DataFrame, keys: list[str]) -> list[tuple]:
    """The combinations of `keys`' values that occur in `frame`, sorted; [()] (one, of no values) without keys."""
    if not keys:
        return [()]
    return list(frame[keys].dropna().drop_duplicates().sort_values(keys).itertuples(index=False, name=None))


def _select(frame: pd.DataFrame, keys: list[str], values: tuple) -> pd.DataFrame:
    for key, value in zip(keys, values):
        frame = frame[frame[key] == value]
    return frame


def _draw_level(ax, ratio: np.ndarray, level: float, label: str) -> None:
    """Labelled contour of `ratio` at `level`, skipped when it cannot exist (matplotlib would only warn)."""
    finite = ratio[np.isfinite(ratio)]
    if min(ratio.shape) < 2 or finite.size == 0 or not finite.min() < level < finite.max():
        return
    outline = [patheffects.Stroke(linewidth=4, foreground="black"), patheffects.Normal()]  # visible on all of viridis
    contour = ax.contour(np.ma.masked_invalid(ratio), levels=[level], colors="white", linewidths=2)
    contour.set(path_effects=outline)
    labels = ax.clabel(contour, fmt=lambda v: f"{label} = {v:g}", fontsize="small", inline=True)
    for text in labels:
        text.set_path_effects([patheffects.withStroke(linewidth=3, foreground="black")])


def _colour_range(results: pd.DataFrame, metric: str) -> tuple[float, float]:
    """[0, 1] for accuracies and rates (comparable across figures); otherwise the data's range, shared by panels."""
    values = pd.to_numeric(results[metric], errors="coerce")
    low, high = values.min(), values.max()
    if metric.endswith(UNIT_INTERVAL_SUFFIXES) or not np.isfinite(low):
        return 0.0, 1.0
    return float(low), float(high if high > low else low + 1.0)


def _check_drawable(results: pd.DataFrame, keys: list[str], needed: list[str]) -> None:
    """ValueError where `results` has a `needed` column missing, no rows, or a swept dotted key outside the diagram's
    `keys` (x, y, panels) that varies inside a cell: it would be averaged with the seeds."""
    missing = [c for c in needed if c not in results.columns]
    if missing:
        raise ValueError(f"results have no column(s) {missing}; columns are {list(results.columns)}")
    if results.empty:
        raise ValueError("no results to plot")
    for other in [c for c in results.columns if "." in c and "/" not in c and c not in keys]:
        spread = results.groupby(keys, dropna=False)[other].nunique(dropna=False)
        if (spread > 1).any():
            raise ValueError(f"{other} varies within a ({', '.join(keys)}) cell; pass it in `panels`")


def _fmt(value) -> str:
    """Tick/title text: 4 not 4.0 (CSV columns with NaN come back as floats)."""
    if isinstance(value, (float, np.floating)):
        return str(int(value)) if float(value).is_integer() else f"{value:g}"
    return str(value)
