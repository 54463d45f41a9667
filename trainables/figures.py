"""Every figure headsweep draws: pure functions (arrays or tables) -> matplotlib Figure, shared by the W&B media of a
trial and the HTML report of any output directory.

It lives in trainables/ because W&B media are drawn inside a trial, and data flows one way (trainables -> sweep ->
dashboards). Nothing here knows a task: tasks and models compose these functions with their own landmarks
(`Task.figures`, `ModelSpec.figures`) and pass the theory's reference values in.

W&B renders a float array in [0, 1] black (a bare uint8 cast), so every map is drawn here and handed over as uint8
RGB (`rgb`) or PNG bytes (`png_bytes`). Figures are built on `matplotlib.figure.Figure` with an explicit Agg canvas,
never through pyplot: pyplot keeps global state that is not thread safe and may open a display.
"""
from __future__ import annotations

import io
import math
import os

import numpy as np
import pandas as pd
from matplotlib import patheffects
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator

from trainables.io import atomic_write

DPI = 100
ATTENTION_CMAP = "magma"  # sequential, dark = no attention; landmarks are drawn in colours it does not use
OUTLINE = [patheffects.withStroke(linewidth=2, foreground="white")]  # legible text on any colour of a colormap
PANEL_COLS = 3  # phase-diagram panels per row; more would make each heatmap too small to read
PANEL_SIZE = (4.2, 3.8)  # inches per phase-diagram panel; fits 13 x 13 cells with legible tick labels
UNIT_INTERVAL_SUFFIXES = ("acc", "_rate")  # metrics in [0, 1] get a fixed colour scale so figures compare


def new_figure(width: float, height: float, dpi: int = DPI) -> Figure:
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes, without the timestamped metadata, so equal figures give equal bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def save_png(fig: Figure, path: str | os.PathLike):
    """Write the figure to `path` atomically: a reader never sees half a PNG, a crash leaves the old file."""
    return atomic_write(path, png_bytes(fig))


def rgb(fig: Figure) -> np.ndarray:
    """The figure rendered as a (H, W, 3) uint8 array (what wandb.Image takes without rescaling)."""
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()


# --- images without matplotlib (W&B media: a trial's heatmaps at a small fraction of its compute) --------------------

IMAGE_CELL = 8  # pixels per matrix cell in heatmap images
BLANK_RGB = (255, 255, 255)


def heatmap_image(values: np.ndarray, vmin: float, vmax: float, cmap: str = "viridis",
                  marks: list[tuple[np.ndarray, np.ndarray, tuple[int, int, int]]] = (), cell: int = IMAGE_CELL,
                  flip: bool = False) -> np.ndarray:
    """A matrix as a (rows * cell, cols * cell, 3) uint8 image: each cell a square of its colour on `cmap` over
    [vmin, vmax], NaN cells white; marks (rows, cols, RGB) as a square dot in the middle of those cells; `flip` puts
    row 0 at the bottom. No figure is drawn: a colour lookup and numpy repeats, well under a millisecond here."""
    from matplotlib import colormaps  # the colour table only; nothing is drawn

    values = np.asarray(values, dtype=float)
    table = (colormaps[cmap](np.linspace(0.0, 1.0, 256))[:, :3] * 255).astype(np.uint8)  # (256, 3)
    scaled = np.clip((np.nan_to_num(values) - vmin) / max(vmax - vmin, 1e-12), 0.0, 1.0)
    rgb = table[(scaled * 255).astype(int)]  # (rows, cols, 3)
    rgb[~np.isfinite(values)] = BLANK_RGB
    image = rgb.repeat(cell, axis=0).repeat(cell, axis=1)
    inner = slice(cell // 3, cell - cell // 3)  # a mark fills the middle third of its cell
    for rows, cols, colour in marks:
        for row, col in zip(np.asarray(rows, dtype=int), np.asarray(cols, dtype=int)):
            image[row * cell:(row + 1) * cell, col * cell:(col + 1) * cell][inner, inner] = colour
    return image[::-1] if flip else image


# --- a trial's arrays -----------------------------------------------------------------------------------------------

def attention_rows(attention: np.ndarray, ends: np.ndarray, row_labels: list[str], marks: list[tuple],
                   title: str) -> Figure:
    """Attention paid by one query per example (rows) to every key position (columns).

    attention (k, T); ends (k,): each row's query index (later positions are padding, left blank); marks: (positions
    (k,) with NaN where a row has none, matplotlib style with a `label`) drawn on each row.
    """
    attention = np.asarray(attention, dtype=float)
    k, T = attention.shape
    masked = np.where(np.arange(T)[None, :] > np.asarray(ends)[:, None], np.nan, attention)  # (k, T)
    fig = new_figure(max(5.0, 0.32 * T + 2.5), 1.6 + 0.45 * k)
    ax = fig.add_subplot()
    image = ax.imshow(masked, cmap=ATTENTION_CMAP, vmin=0.0, vmax=max(float(np.nanmax(masked)), 1e-6),
                      aspect="auto", interpolation="nearest")
    rows = np.arange(k)
    for positions, style in marks:
        positions = np.asarray(positions, dtype=float)
        shown = np.isfinite(positions)
        if shown.any():
            ax.scatter(positions[shown], rows[shown], **style)
    ax.set_xticks(range(T))
    ax.tick_params(axis="x", labelsize="x-small")
    ax.set_yticks(rows, row_labels, fontsize="small")
    ax.set_xlabel("key position (0-indexed)")
    ax.set_ylabel("example")
    ax.set_title(title, fontsize="medium")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22 if k > 2 else -0.45), ncol=3, fontsize="x-small",
              frameon=False)
    fig.colorbar(image, ax=ax, label="attention", pad=0.01)
    return fig


def attention_pattern(pattern: np.ndarray, end: int, columns: list[tuple[int, dict]], title: str,
                      query_row: bool = True) -> Figure:
    """A full causal pattern (query rows x key columns) of one head on one example, cut to its `end` positions;
    `columns` are (key position, line style with a `label`) drawn as dashed lines; with `query_row` the last row (a
    task's one scored position) dotted."""
    pattern = np.asarray(pattern, dtype=float)[:end, :end]
    fig = new_figure(5.2, 4.4)
    ax = fig.add_subplot()
    image = ax.imshow(pattern, cmap=ATTENTION_CMAP, vmin=0.0, vmax=1.0, interpolation="nearest")
    for position, style in columns:
        ax.axvline(position, linestyle="--", linewidth=1.2, **style)
    if query_row:
        ax.axhline(end - 1, color="#ff4fd8", linestyle=":", linewidth=1.2, label="last row (query)")
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    ax.set_title(title, fontsize="medium")
    if columns or query_row:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize="x-small", frameon=False)
    fig.colorbar(image, ax=ax, label="attention", pad=0.01)
    return fig


def block_matrix(W: np.ndarray, blocks: list[tuple[str, int]], title: str, row_label: str, column_label: str) -> Figure:
    """A square matrix on a symmetric diverging scale (sign matters in a bilinear form), with lines between the
    named blocks of its features (blocks: (name, size), in order)."""
    W = np.asarray(W, dtype=float)
    bounds = np.cumsum([0] + [size for _, size in blocks])
    limit = max(float(np.abs(W).max()), 1e-12)
    fig = new_figure(6.6, 5.8)
    ax = fig.add_subplot()
    image = ax.imshow(W, cmap="RdBu_r", vmin=-limit, vmax=limit, interpolation="nearest")
    for edge in bounds[1:-1]:
        ax.axhline(edge - 0.5, color="black", linewidth=1.0)
        ax.axvline(edge - 0.5, color="black", linewidth=1.0)
    centres = [(a + b - 1) / 2 for a, b in zip(bounds[:-1], bounds[1:])]
    names = [name for name, _ in blocks]
    ax.set_xticks(centres, names)
    ax.set_yticks(centres, names, rotation=90, va="center")
    ax.set_xlabel(f"{column_label} (blocks of {', '.join(str(size) for _, size in blocks)})")
    ax.set_ylabel(row_label)
    ax.set_title(title, fontsize="medium")
    fig.colorbar(image, ax=ax, label="entry", pad=0.01, shrink=0.9)
    return fig


def diagonal_heatmap(matrix: np.ndarray, title: str, x_label: str, y_label: str, diagonal_label: str) -> Figure:
    """A [0, 1] matrix indexed [x, y] from 1 (NaN = no value), cropped to its finite cells, with x across and y up
    and the diagonal x = y dashed (e.g. where training data lives)."""
    matrix = np.asarray(matrix, dtype=float)
    finite = np.isfinite(matrix)
    top = int(max(np.nonzero(finite.any(1))[0].max(initial=1), np.nonzero(finite.any(0))[0].max(initial=1))) + 1
    grid = matrix[:top, :top].T  # (y, x): imshow rows are y
    fig = new_figure(5.4, 4.6)
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(grid), origin="lower", cmap="viridis", vmin=0.0, vmax=1.0,
                      interpolation="nearest")
    ax.plot([0, top - 1], [0, top - 1], color="white", linestyle="--", linewidth=1.2, label=diagonal_label,
            path_effects=[patheffects.Stroke(linewidth=2.6, foreground="black"), patheffects.Normal()])
    step = max(1, top // 10)
    ax.set_xticks(range(0, top, step))
    ax.set_yticks(range(0, top, step))
    ax.set_xlim(0.5, top - 0.5)  # indices start at 1: row and column 0 never hold a value
    ax.set_ylim(0.5, top - 0.5)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    mean = np.nanmean(matrix) if finite.any() else float("nan")
    ax.set_title(f"{title}, mean {mean:.3f}", fontsize="medium")
    ax.legend(loc="upper right", fontsize="x-small")
    fig.colorbar(image, ax=ax, label="accuracy", pad=0.01)
    return fig


# --- runs and tables ------------------------------------------------------------------------------------------------

def curves(runs: dict[str, list[dict]], metrics: tuple[str, ...], colour_by: dict[str, float] | None = None,
           colour_label: str = "") -> Figure:
    """One panel per metric over training steps, one line per run: `runs` maps a label to its metrics.jsonl records.

    With `colour_by` (label -> value, e.g. each run's max-sum ratio) lines are coloured by that value with a colour
    bar; otherwise up to 12 runs get a legend. Runs with a single evaluation show as points; missing or null values
    are skipped.
    """
    present = [m for m in metrics if any(r.get(m) is not None for records in runs.values() for r in records)]
    present = present or list(metrics[:1])
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
    """One scatter panel per metric: a final value per trial against `x` (e.g. the max-sum ratio), where a phase
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
        ax.grid(alpha=0.3)
    return fig


def phase_diagram(results: pd.DataFrame, x: str, y: str, metric: str, ratio_level: float | None = None,
                  ratio_metric: str = "", ratio_label: str = "", panels: list[str] | tuple[str, ...] = ()) -> Figure:
    """Heatmap of the mean of `metric` per (x, y) cell, one panel per combination of the `panels` keys' values.

    Cells sit at the index of each distinct value (a categorical axis), so sparse or uneven grids still get one cell
    per value; cells with no trial stay blank. Rows are averaged only within a cell of (panels..., x, y), i.e. over
    seeds: any other swept dotted key that varies would be averaged over silently, so that raises ValueError. Filter
    rows (e.g. by status) before calling. With `ratio_level`, a contour of the cell-mean `ratio_metric` at that level is
    drawn on every panel where it lies strictly inside the panel's range, labelled `ratio_label = level`.
    """
    panels = list(panels)
    _check_columns(results, [x, y, metric, *panels] + ([ratio_metric] if ratio_level is not None else []))
    if results.empty:
        raise ValueError("no results to plot")
    _check_nothing_else_varies(results, keys=[x, y, *panels])

    xs = np.sort(results[x].dropna().unique())
    ys = np.sort(results[y].dropna().unique())
    combos = [()]  # one panel, keyed by no values
    if panels:
        present = results[panels].dropna().drop_duplicates().sort_values(panels)
        combos = list(present.itertuples(index=False, name=None))  # only combinations that were run
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
    each slice's evaluations numbered in order ("2,5": evaluated second, re-checked fifth) and its diversity*
    starred."""
    x_key, panel_keys = slice_keys[0], slice_keys[1:]
    xs = list(np.sort(finished[x_key].unique()))
    ys = list(np.sort(finished[knob].unique()))
    combos = [()] if not panel_keys else list(
        finished[panel_keys].drop_duplicates().sort_values(panel_keys).itertuples(index=False, name=None))
    for ax, combo in zip(figure.axes, combos):
        for x_value, slice_rows in _select(finished, panel_keys, combo).groupby(x_key):
            order = slice_rows.drop_duplicates("optuna_trial").sort_values("optuna_trial")
            labels: dict = {}
            for n, candidate in enumerate(order["candidate"], start=1):
                labels.setdefault(candidate, []).append(str(n))
            for candidate, numbers in labels.items():
                ax.annotate(",".join(numbers), (xs.index(x_value), ys.index(candidate)), ha="center", va="center",
                            fontsize=7, color="black", weight="bold", path_effects=OUTLINE)
        for _, row in _select(minimal, panel_keys, combo).dropna(subset=["diversity_star"]).iterrows():
            if row[x_key] in xs and row["diversity_star"] in ys:
                ax.plot(xs.index(row[x_key]), ys.index(row["diversity_star"]), marker="*", markersize=16,
                        markerfacecolor="none", markeredgecolor="red", markeredgewidth=1.5)


def threshold(minimal: pd.DataFrame, slice_keys: list[str], metric: str, theory: list[float | None]) -> Figure:
    """`metric` at diversity* against the first slice key, one line per value of the other slice keys; theory[i] is
    the reference value of row i's slice (drawn dashed in its line's colour, once per value)."""
    fig = new_figure(6, 4, dpi=110)
    ax = fig.subplots()
    x_key, others = slice_keys[0], slice_keys[1:]
    minimal = minimal.assign(_theory=theory)
    groups = minimal.groupby(others) if others else [((), minimal)]
    for combo, rows in groups:
        combo = combo if isinstance(combo, tuple) else (combo,)
        label = ", ".join(f"{short_key(k)}={_fmt(v)}" for k, v in zip(others, combo)) or "measured"
        line, = ax.plot(rows[x_key], rows[metric], marker="o", label=label)
        for value in dict.fromkeys(v for v in rows["_theory"] if v is not None and np.isfinite(v)):
            ax.axhline(value, color=line.get_color(), linestyle="--", linewidth=1, label=f"theory {value:.3g}")
    ax.set_xlabel(x_key)
    ax.set_ylabel(f"{metric} at diversity*")
    ax.legend(fontsize="small")
    return fig


def thresholds_against_theory(points: pd.DataFrame, metric: str) -> Figure:
    """Measured thresholds of several searches on one plot: `metric` at diversity* of each slice (y) against the
    theory's reference value for that slice (x; both axes log), y = x dashed. points: columns `search`, `theory`,
    `measured` (NaN where the slice found no threshold) and optionally `bound` (for such a slice, `metric` at the
    last value that failed: drawn hollow, pointing down, as the threshold lies beyond it) and `fitted_at_widest`
    (the share of that value's seeds that fitted their training data, written beside the marker)."""
    fig = new_figure(7, 6, dpi=110)
    ax = fig.subplots()
    searches = list(dict.fromkeys(points["search"]))
    known = points["theory"].dropna()
    if len(known):
        x, nudge = points["theory"], lambda x, shift: x * (1 + 0.04 * shift)  # side by side at one theory value
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
                       label=f"{name} ({len(found)} of {len(rows)} slices found a threshold)")
        bounds = rows[rows["measured"].isna() & placed].get("bound", pd.Series(dtype=float)).dropna()
        if len(bounds):
            ax.scatter(nudge(x[bounds.index], shift), bounds, marker="v", s=40, facecolors="none", edgecolors=colour,
                       label=f"{name}: no threshold in {len(bounds)} of {len(rows)} slices, at the widest value tried"
                             + (" (%: its seeds that fitted the training data)" if "fitted_at_widest" in rows else ""))
            for index, bound in bounds.items():
                fitted = rows["fitted_at_widest"][index] if "fitted_at_widest" in rows else np.nan
                if not np.isnan(fitted):
                    ax.annotate(f"{fitted:.0%}", (nudge(x[index], shift), bound), xytext=(5, -3),
                                textcoords="offset points", fontsize="x-small", color=colour)
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
    ax.set_xlabel(f"theory's reference value of {metric}" if len(known) else "slice")
    ax.set_ylabel(f"measured {metric} at diversity*")
    ax.legend(fontsize="x-small", loc="upper center", bbox_to_anchor=(0.5, -0.14))  # below: long labels
    return fig


def shape_cost(trials: pd.DataFrame, best: pd.DataFrame, metric: str, x_metric: str, slice_keys: list[str],
               theory: list[float | None], min_rate: float) -> Figure:
    """Per slice (a row of best.csv): each evaluated candidate at (x_metric, metric), seed-mean, filled when it
    generalizes; the best starred, the reference as a diamond (filled when it generalizes), theory[i] dashed."""
    fig, axes = _panel_row(len(best))
    for ax, (_, row), value in zip(axes, best.iterrows(), theory):
        per_candidate = _per_candidate(trials, row["study"], x=(x_metric, "mean"), value=(metric, "mean"))
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


def shape_progress(trials: pd.DataFrame, best: pd.DataFrame, metric: str, slice_keys: list[str]) -> Figure:
    """The lowest feasible `metric` after each evaluated candidate, one step line per slice (reference dashed)."""
    fig = new_figure(6, 4, dpi=110)
    ax = fig.subplots()
    for _, row in best.iterrows():
        per_candidate = _per_candidate(trials, row["study"], value=(metric, "mean"))
        so_far = per_candidate["value"].where(per_candidate["feasible"].astype(bool)).cummin().ffill()
        line, = ax.step(np.arange(1, len(so_far) + 1), so_far.to_numpy(), where="post",
                        label=slice_title(row, slice_keys))
        if not pd.isna(row.get(f"reference {metric}", np.nan)):
            ax.axhline(row[f"reference {metric}"], color=line.get_color(), linestyle="--", linewidth=1)
    ax.set_xlabel("evaluated candidates")
    ax.set_ylabel(f"lowest feasible {metric}")
    ax.legend(fontsize="x-small")
    return fig


def shapes(best: pd.DataFrame, slice_keys: list[str], x_label: str) -> Figure:
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


def _per_candidate(trials: pd.DataFrame, study: str, **columns) -> pd.DataFrame:
    """A study's evaluated candidates (one row per Optuna trial, seed-means), with whether each generalized."""
    rows = trials[(trials["study"] == study) & trials["feasible"].notna()]
    return rows.groupby("optuna_trial").agg(feasible=("feasible", "first"), **columns)


def _panel_row(n: int) -> tuple[Figure, list]:
    fig = new_figure(4.2 * n, 3.6, dpi=110)
    return fig, list(np.atleast_1d(fig.subplots(1, n, squeeze=False)[0]))


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
    if metric.endswith(UNIT_INTERVAL_SUFFIXES):
        return 0.0, 1.0
    values = pd.to_numeric(results[metric], errors="coerce")
    low, high = values.min(), values.max()
    if not np.isfinite(low):
        return 0.0, 1.0
    return float(low), float(high if high > low else low + 1.0)


def _check_columns(results: pd.DataFrame, needed: list[str]) -> None:
    missing = [c for c in needed if c not in results.columns]
    if missing:
        raise ValueError(f"results have no column(s) {missing}; columns are {list(results.columns)}")


def _check_nothing_else_varies(results: pd.DataFrame, keys: list[str]) -> None:
    """A swept dotted key outside x, y, panels that varies inside a cell would be averaged with the seeds."""
    others = [c for c in results.columns if "." in c and "/" not in c and c not in keys]
    for other in others:
        spread = results.groupby(keys, dropna=False)[other].nunique(dropna=False)
        if (spread > 1).any():
            raise ValueError(f"{other} varies within a ({', '.join(keys)}) cell; pass it in `panels`")


def _fmt(value) -> str:
    """Tick/title text: 4 not 4.0 (CSV columns with NaN come back as floats)."""
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return f"{value:g}" if isinstance(value, (float, np.floating)) else str(value)
