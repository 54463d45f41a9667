"""Figures of a trial's arrays (attention.npz): pure functions arrays -> matplotlib Figure, for W&B and the report.

W&B renders a float array in [0, 1] black (a bare uint8 cast), so every map is drawn here, with axes, a colour bar
and the task's landmarks marked, and handed over as uint8 RGB (`rgb`, for W&B) or PNG bytes (`png_bytes`). Figures
are built on `matplotlib.figure.Figure` with an explicit Agg canvas, never through pyplot: pyplot keeps global state
that is not thread safe and may open a display.

Positions are 0-indexed as in the code: the first trigger of an OOD sequence sits at l1, the output token at l1 + 1,
the query (second trigger) at l1 + l2 + 2, and the positional shortcut reads position (l1 + l2) // 2 + 1 (SPEC §1).
"""
from __future__ import annotations

import io

import numpy as np
from matplotlib import patheffects
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure

DPI = 100
ATTENTION_CMAP = "magma"  # sequential, dark = no attention; the landmarks are drawn in colours it does not use
TRIGGER_STYLE = {"marker": "v", "color": "#2ec4ff", "label": "first trigger"}
OUTPUT_STYLE = {"marker": "o", "color": "#7CFC00", "label": "output (induction target)"}
SHORTCUT_STYLE = {"marker": "s", "color": "#ff4fd8", "label": "shortcut position"}
BLOCK_NAMES = ("position", "token", "prev token")  # the three one-hot parts of the one-step embedding (SPEC §2)


def _figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes, without the timestamped metadata, so equal figures give equal bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata={"Software": None})
    return buffer.getvalue()


def rgb(fig: Figure) -> np.ndarray:
    """The figure rendered as a (H, W, 3) uint8 array (what wandb.Image takes without rescaling)."""
    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()


def query_attention(arrays: dict[str, np.ndarray], layer: int, head: int) -> Figure:
    """Attention paid by the query of each example OOD sequence (rows) to every key position (columns), one head.

    Uses `query_attention` (k, n_layers, H, T), `l1`, `l2` (k,). Positions past a sequence's query are padding and
    left blank; the first trigger, the output token and (for even l1 + l2) the shortcut position are marked per row.
    """
    attention = np.asarray(arrays["query_attention"][:, layer, head], dtype=float)  # (k, T)
    l1, l2 = np.asarray(arrays["l1"]), np.asarray(arrays["l2"])
    k, T = attention.shape
    query = l1 + l2 + 2  # (k,)
    masked = np.where(np.arange(T)[None, :] > query[:, None], np.nan, attention)  # (k, T) padding blank

    fig = _figure(max(5.0, 0.32 * T + 2.5), 1.6 + 0.45 * k)
    ax = fig.add_subplot()
    image = ax.imshow(masked, cmap=ATTENTION_CMAP, vmin=0.0, vmax=max(float(np.nanmax(masked)), 1e-6),
                      aspect="auto", interpolation="nearest")
    rows = np.arange(k)
    ax.scatter(l1, rows, s=70, edgecolors="black", linewidths=0.8, **TRIGGER_STYLE)
    ax.scatter(l1 + 1, rows, s=60, facecolors="none", linewidths=2.0, edgecolors=OUTPUT_STYLE["color"],
               marker=OUTPUT_STYLE["marker"], label=OUTPUT_STYLE["label"])
    even = (l1 + l2) % 2 == 0
    if even.any():
        ax.scatter(((l1 + l2) // 2 + 1)[even], rows[even], s=40, facecolors="none", linewidths=1.5,
                   edgecolors=SHORTCUT_STYLE["color"], marker=SHORTCUT_STYLE["marker"], label=SHORTCUT_STYLE["label"])
    ax.set_xticks(range(T))
    ax.tick_params(axis="x", labelsize="x-small")
    ax.set_yticks(rows, [f"l1={a}, l2={b}" for a, b in zip(l1, l2)], fontsize="small")
    ax.set_xlabel("key position (0-indexed)")
    ax.set_ylabel("OOD example")
    ax.set_title(f"Attention at the query, layer {layer} head {head}", fontsize="medium")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22 if k > 2 else -0.45), ncol=3, fontsize="x-small",
              frameon=False)
    fig.colorbar(image, ax=ax, label="attention", pad=0.01)
    return fig


def attention_pattern(arrays: dict[str, np.ndarray], layer: int, head: int, example: int = 0) -> Figure:
    """The full causal pattern (query rows x key columns) of one head on one example OOD sequence (transformer).

    Uses `patterns` (k, n_layers, H, T, T); dashed lines mark the first trigger's and the output token's key columns,
    a dotted line the query's row.
    """
    pattern = np.asarray(arrays["patterns"][example, layer, head], dtype=float)  # (T, T)
    l1, l2 = int(arrays["l1"][example]), int(arrays["l2"][example])
    end = l1 + l2 + 3  # T of this sequence: rows and columns past it are padding
    pattern = pattern[:end, :end]
    fig = _figure(5.2, 4.4)
    ax = fig.add_subplot()
    image = ax.imshow(pattern, cmap=ATTENTION_CMAP, vmin=0.0, vmax=1.0, interpolation="nearest")
    ax.axvline(l1, color=TRIGGER_STYLE["color"], linestyle="--", linewidth=1.2, label=TRIGGER_STYLE["label"])
    ax.axvline(l1 + 1, color=OUTPUT_STYLE["color"], linestyle="--", linewidth=1.2, label=OUTPUT_STYLE["label"])
    ax.axhline(end - 1, color=SHORTCUT_STYLE["color"], linestyle=":", linewidth=1.2, label="query row")
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    ax.set_title(f"Layer {layer} head {head}, example l1={l1}, l2={l2}", fontsize="medium")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize="x-small", frameon=False)
    fig.colorbar(image, ax=ax, label="attention", pad=0.01)
    return fig


def w_kq(W_KQ: np.ndarray, vocab_size: int) -> Figure:
    """The one-step model's W_KQ (D x D, rows = key features, columns = query features), D = L + 2N.

    Lines mark the blocks of the embedding [p_t ; e_{z_t} ; e_{z_{t-1}}]: the shortcut is a peak in the
    position x position block, the induction head one in the (key prev token) x (query token) block (Lemma 7).
    """
    W = np.asarray(W_KQ, dtype=float)
    D = W.shape[0]
    L = D - 2 * vocab_size
    bounds = [0, L, L + vocab_size, D]
    limit = max(float(np.abs(W).max()), 1e-12)  # symmetric around 0: sign matters in a bilinear form
    fig = _figure(6.6, 5.8)
    ax = fig.add_subplot()
    image = ax.imshow(W, cmap="RdBu_r", vmin=-limit, vmax=limit, interpolation="nearest")
    for edge in bounds[1:-1]:
        ax.axhline(edge - 0.5, color="black", linewidth=1.0)
        ax.axvline(edge - 0.5, color="black", linewidth=1.0)
    centres = [(a + b - 1) / 2 for a, b in zip(bounds[:-1], bounds[1:])]
    ax.set_xticks(centres, BLOCK_NAMES)
    ax.set_yticks(centres, BLOCK_NAMES, rotation=90, va="center")
    ax.set_xlabel(f"query feature (blocks of {L}, {vocab_size}, {vocab_size})")
    ax.set_ylabel("key feature")
    ax.set_title("One-step W_KQ", fontsize="medium")
    fig.colorbar(image, ax=ax, label="W_KQ entry", pad=0.01, shrink=0.9)
    return fig


def accuracy_by_pair(acc: np.ndarray) -> Figure:
    """OOD accuracy per (l1, l2) cell of the all_pairs split (`acc_by_pair`, L x L at [l1, l2], NaN = no sequence).

    Drawn with l1 across and l2 up, cropped to the valid cells; the dashed diagonal l1 = l2 is where training sequences
    live, so everything off it is out of distribution.
    """
    acc = np.asarray(acc, dtype=float)
    finite = np.isfinite(acc)
    top = int(max(np.nonzero(finite.any(1))[0].max(initial=1), np.nonzero(finite.any(0))[0].max(initial=1))) + 1
    grid = acc[:top, :top].T  # (l2, l1): imshow rows are y
    fig = _figure(5.4, 4.6)
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(grid), origin="lower", cmap="viridis", vmin=0.0, vmax=1.0,
                      interpolation="nearest")
    ax.plot([0, top - 1], [0, top - 1], color="white", linestyle="--", linewidth=1.2, label="l1 = l2 (training)",
            path_effects=[patheffects.Stroke(linewidth=2.6, foreground="black"), patheffects.Normal()])
    step = max(1, top // 10)
    ax.set_xticks(range(0, top, step))
    ax.set_yticks(range(0, top, step))
    ax.set_xlim(0.5, top - 0.5)  # l1, l2 >= 1: row and column 0 never hold a sequence
    ax.set_ylim(0.5, top - 0.5)
    ax.set_xlabel("l1 (fillers before the first trigger)")
    ax.set_ylabel("l2 (fillers before the query)")
    mean = np.nanmean(acc) if finite.any() else float("nan")
    ax.set_title(f"OOD accuracy by (l1, l2), mean {mean:.3f}", fontsize="medium")
    ax.legend(loc="upper right", fontsize="x-small")
    fig.colorbar(image, ax=ax, label="accuracy", pad=0.01)
    return fig


def curves(runs: dict[str, list[dict]], metrics: tuple[str, ...] = ("train/loss", "ood/loss", "id/acc", "ood/acc"),
           colour_by: dict[str, float] | None = None, colour_label: str = "") -> Figure:
    """One panel per metric over training steps, one line per run: `runs` maps a label to its metrics.jsonl records.

    With `colour_by` (label -> value, e.g. each run's data/max_sum_ratio) lines are coloured by that value with a
    colour bar; otherwise up to 12 runs get a legend. Runs with a single evaluation (the one-step model) show as
    points; missing or null values are skipped.
    """
    present = [m for m in metrics if any(r.get(m) is not None for records in runs.values() for r in records)]
    present = present or list(metrics[:1])
    fig = _figure(3.6 * len(present) + 1.2, 3.2)
    axes = fig.subplots(1, len(present), squeeze=False)[0]
    mappable = None
    if colour_by:
        values = np.array([v for v in colour_by.values() if v is not None and np.isfinite(v)], dtype=float)
        low, high = (values.min(), values.max()) if len(values) else (0.0, 1.0)
        mappable = ScalarMappable(Normalize(low, high if high > low else low + 1e-9), cmap="viridis")
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
    """One scatter panel per metric: a final value per trial against `x` (e.g. data/max_sum_ratio), where a phase
    transition shows as a step."""
    fig = _figure(3.6 * len(ys) + 0.4, 3.2)
    axes = fig.subplots(1, len(ys), squeeze=False)[0]
    for ax, (metric, y) in zip(axes, ys.items()):
        ax.scatter(x, y, s=18, alpha=0.8)
        ax.set_title(metric, fontsize="medium")
        ax.set_xlabel(x_label)
        ax.grid(alpha=0.3)
    return fig


def figures(arrays: dict[str, np.ndarray]) -> dict[str, Figure]:
    """Every figure of a trial's arrays, keyed by its W&B media key: attention at the query per layer and head,
    full patterns per layer and head (transformer), W_KQ (one-step), OOD accuracy by (l1, l2)."""
    out: dict[str, Figure] = {}
    if "query_attention" in arrays:
        _, n_layers, n_heads, _ = arrays["query_attention"].shape  # (k, n_layers, H, T)
        for layer in range(n_layers):
            for head in range(n_heads):
                out[f"attention/query_L{layer}H{head}"] = query_attention(arrays, layer, head)
    if "patterns" in arrays:
        _, n_layers, n_heads, _, _ = arrays["patterns"].shape  # (k, n_layers, H, T, T)
        for layer in range(n_layers):
            for head in range(n_heads):
                out[f"attention/pattern_L{layer}H{head}"] = attention_pattern(arrays, layer, head)
    if "W_KQ" in arrays and "W_V" in arrays:
        out["mech/W_KQ"] = w_kq(arrays["W_KQ"], vocab_size=arrays["W_V"].shape[0])  # W_V: (N, D)
    if "acc_by_pair" in arrays:
        out["ood/acc_by_pair"] = accuracy_by_pair(arrays["acc_by_pair"])
    return out


