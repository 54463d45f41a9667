"""Phase diagrams of a grid's `results.csv`: seed-mean of a metric over two swept keys, one panel per other setting.

Figures are built on `matplotlib.figure.Figure` with an explicit Agg canvas, never through pyplot: pyplot keeps
global state (current figure, backend, interactive mode) that is not thread safe and may try to open a display.

Grid cells are placed at the index of each distinct value (a categorical axis labelled with the values), so sparse
or uneven grids (low in {3, 5, 9}) still get one cell per value; cells with no trial stay NaN and are drawn blank.
"""
from __future__ import annotations

import io
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import patheffects
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

PANEL_COLS = 3  # panels per row; more would make each heatmap too small to read
PANEL_SIZE = (4.2, 3.8)  # inches per panel; fits 13 x 13 cells with legible tick labels
DPI = 120
UNIT_INTERVAL_SUFFIXES = ("acc", "_rate")  # metrics in [0, 1] get a fixed colour scale so figures compare
SHORT_NAMES = {"data/max_sum_ratio": "R"}  # contour labels use the papers' symbol


def phase_diagram(
    results: pd.DataFrame,
    x: str,
    y: str,
    metric: str = "ood/acc",
    ratio_level: float | None = None,
    ratio_metric: str = "data/max_sum_ratio",
    panels: list[str] | tuple[str, ...] = (),
) -> Figure:
    """Heatmap of the mean of `metric` per (x, y) cell, one panel per combination of the `panels` keys' values.

    Rows are averaged only within a cell of (panels..., x, y), i.e. over seeds: any other swept dotted key that
    varies would be averaged over silently, so that raises ValueError instead. Filter rows (e.g. by `status`) before
    calling. With `ratio_level`, a contour of the cell-mean `ratio_metric` at that level is drawn on every panel where
    the level lies strictly inside that panel's range (it needs at least 2 values on each axis).
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
    fig = Figure(figsize=(PANEL_SIZE[0] * n_cols + 1.0, PANEL_SIZE[1] * n_rows + 0.6), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(n_rows, n_cols, squeeze=False).ravel()
    for ax in axes[len(combos):]:
        ax.remove()  # leftover slots of the last row

    for ax, combo in zip(axes, combos):
        rows = results
        for key, value in zip(panels, combo):
            rows = rows[rows[key] == value]
        grid = cell_means(rows, x, y, metric, xs, ys)  # (len(ys), len(xs))
        image = ax.imshow(grid, origin="lower", cmap="viridis", vmin=vmin, vmax=vmax,
                          aspect="auto", interpolation="nearest")
        if ratio_level is not None:
            _draw_level(ax, cell_means(rows, x, y, ratio_metric, xs, ys), ratio_level, ratio_metric)
        ax.set_xticks(range(len(xs)), [_fmt(v) for v in xs])
        ax.set_yticks(range(len(ys)), [_fmt(v) for v in ys])
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        if panels:
            ax.set_title(", ".join(f"{k} = {_fmt(v)}" for k, v in zip(panels, combo)), fontsize="medium")
    fig.colorbar(image, ax=list(axes[:len(combos)]), label=f"{metric} (mean over seeds)", shrink=0.9)
    fig.suptitle(f"{metric} over {x} \u00d7 {y}")
    return fig


def cell_means(rows: pd.DataFrame, x: str, y: str, metric: str, xs, ys) -> np.ndarray:
    """(len(ys), len(xs)) array of the mean of `metric` per (x, y) value pair; NaN where no row has a value."""
    values = pd.to_numeric(rows[metric], errors="coerce")  # a CSV column with stray text must not crash the plot
    means = values.groupby([rows[y], rows[x]]).mean()
    return means.reindex(pd.MultiIndex.from_product([ys, xs])).to_numpy(dtype=float).reshape(len(ys), len(xs))


def figure_to_png(fig: Figure) -> bytes:
    """The figure as PNG bytes (Agg), without the timestamped metadata, so equal figures give equal bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def save_png(fig: Figure, path: str | os.PathLike) -> Path:
    """Write the figure to `path` atomically: a reader never sees half a PNG, a crash leaves the old file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    try:
        partial.write_bytes(figure_to_png(fig))
        os.replace(partial, path)
    finally:
        partial.unlink(missing_ok=True)
    return path


def _draw_level(ax, ratio: np.ndarray, level: float, ratio_metric: str) -> None:
    """Labelled contour of `ratio` at `level`, skipped when it cannot exist (matplotlib would only warn)."""
    finite = ratio[np.isfinite(ratio)]
    if min(ratio.shape) < 2 or finite.size == 0 or not finite.min() < level < finite.max():
        return
    # White line with a dark outline: visible on both ends of viridis.
    outline = [patheffects.Stroke(linewidth=4, foreground="black"), patheffects.Normal()]
    contour = ax.contour(np.ma.masked_invalid(ratio), levels=[level], colors="white", linewidths=2)
    contour.set(path_effects=outline)
    name = SHORT_NAMES.get(ratio_metric, ratio_metric)
    labels = ax.clabel(contour, fmt=lambda v: f"{name} = {v:g}", fontsize="small", inline=True)
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
