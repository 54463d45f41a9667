"""The figures of one member: pure functions (arrays) -> matplotlib Figure or uint8 RGB image, shared by the W&B media
of a trial (drawn inside it, so here) and the report's gallery; and the figure plumbing every figure uses (new_figure,
png_bytes, rgb). A whole grid's or search's figures are dashboards/figures.py's. Nothing here knows a task: tasks and
models compose these functions with their own landmarks and pass the theory's reference values in.

Figures are built on `matplotlib.figure.Figure` with an explicit Agg canvas, never through pyplot: pyplot keeps
global state that is not thread safe and may open a display.
"""
from __future__ import annotations

import io
import os

import numpy as np
from matplotlib import patheffects
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.image import imsave

from trainables.io import atomic_write

DPI = 100
ATTENTION_CMAP = "magma"  # sequential, dark = no attention; landmarks are drawn in colours it does not use
OUTLINE = [patheffects.withStroke(linewidth=2, foreground="white")]  # legible text on any colour of a colormap


def new_figure(width: float, height: float, dpi: int = DPI) -> Figure:
    fig = Figure(figsize=(width, height), dpi=dpi, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes, without the timestamped metadata, so equal figures give equal bytes. Drawn once:
    savefig lays a figure with a layout engine out in a draw of its own before the one it renders (every text
    measured twice: ~20% of a report's gallery), where the canvas's draw lays out and renders in one pass. The bytes
    are savefig's: its encoder (matplotlib.image.imsave, with the figure's dpi) on the same pixels."""
    if not isinstance(fig.canvas, FigureCanvasAgg):  # a plugin's Figure() without a canvas: as savefig, onto Agg
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    buffer = io.BytesIO()
    imsave(buffer, np.asarray(fig.canvas.buffer_rgba()), format="png", dpi=fig.dpi, metadata={"Software": None})
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

def layer_heads(arrays: dict[str, np.ndarray], key: str = "patterns") -> list[tuple[int, int]]:
    """(layer, head) of every head in arrays[key] ((k, n_layers, H, ...): `patterns`, `query_attention`), in order;
    [] where the arrays have none."""
    if key not in arrays:
        return []
    _, n_layers, n_heads = arrays[key].shape[:3]
    return [(layer, head) for layer in range(n_layers) for head in range(n_heads)]


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
