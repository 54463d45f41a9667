"""The mixed n-gram figures: a trial's attention patterns on an OOD in-context sequence with the two mechanisms'
targets marked (from attention.npz), and the per-component loss curves of runs (from metrics.jsonl) with their
transition steps, for the science notes.

Positions are 0-indexed; in an in-context sequence with period k the query t >= k finds the current token at t - k,
so an induction head attends to t - k + 1 and a previous-token head to t - 1.
"""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from trainables import figures
from trainables.tasks.mixed_ngram.metrics import drop_step

INDUCTION = {"marker": "o", "facecolors": "none", "edgecolors": "#7CFC00", "s": 30, "linewidths": 1.4,
             "label": "induction target t-k+1"}
PREVIOUS = {"marker": "x", "color": "#2ec4ff", "s": 14, "linewidths": 1.0, "label": "previous token t-1"}
NOTE = ("Full attention patterns of each layer and head on an OOD in-context sequence (a prefix of k tokens "
        "repeated, k never seen in training): ○ marks the induction head's target (the token after the current "
        "token's previous occurrence), × the previous token.")
CURVE_COLS = 4  # panels per row of the component curves
COMPONENT_STYLE = {"lazy/loss": {"color": "#1f77b4", "label": "lazy (4-gram) loss"},
                   "icl/loss": {"color": "#d62728", "label": "in-context loss"}}


def pattern(arrays: dict[str, np.ndarray], layer: int, head: int, example: int = 0) -> Figure:
    """One head's causal pattern on one example (`patterns` (k, n_layers, H, T, T), `period` (k,))."""
    k = int(arrays["period"][example])
    T = arrays["patterns"].shape[-1]
    fig = figures.attention_pattern(arrays["patterns"][example, layer, head], T, [],
                                    f"Layer {layer} head {head}, OOD in-context example (k = {k})",
                                    query_row=False)  # every position is scored: no query row to single out
    ax = fig.axes[0]
    queries = np.arange(k, T)  # positions whose current token occurred before
    ax.scatter(queries - k + 1, queries, **INDUCTION)
    ax.scatter(np.arange(1, T) - 1, np.arange(1, T), **PREVIOUS)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize="x-small", frameon=False)
    return fig


def all_figures(arrays: dict[str, np.ndarray]) -> dict[str, Figure]:
    """W&B media key -> figure: the full pattern of every layer and head on the first OOD example."""
    if "patterns" not in arrays or "period" not in arrays:
        return {}
    return {f"attention/pattern_L{layer}H{head}": pattern(arrays, layer, head)
            for layer, head in figures.layer_heads(arrays)}


def all_images(arrays: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, str]]:
    """W&B media key -> (uint8 image, caption): the patterns of all_figures as heatmaps, induction targets dotted."""
    if "patterns" not in arrays or "period" not in arrays:
        return {}
    T = arrays["patterns"].shape[-1]  # (k, n_layers, H, T, T)
    k = int(arrays["period"][0])
    queries = np.arange(k, T)
    marks = [(queries, queries - k + 1, (124, 252, 0))]
    caption = f"query rows x key columns of an OOD in-context sequence (k = {k}); green: the induction targets t-k+1"
    return {f"attention/pattern_L{layer}H{head}": (
        figures.heatmap_image(arrays["patterns"][0, layer, head], 0.0, 1.0, "magma", marks, cell=4), caption)
        for layer, head in figures.layer_heads(arrays)}


def component_curves(runs: dict[str, list[dict]], title: str = "") -> Figure:
    """One panel per run (CURVE_COLS to a row): the lazy and in-context losses over steps (log scale), the lazy fit
    step and the in-context transition step dashed. runs: a label -> its metrics.jsonl records."""
    n_cols = min(len(runs), CURVE_COLS)
    n_rows = -(-len(runs) // n_cols)
    fig = figures.new_figure(3.2 * n_cols + 0.4, 2.8 * n_rows)
    axes = fig.subplots(n_rows, n_cols, squeeze=False, sharex=True, sharey=True).flatten()
    for ax in axes[len(runs):]:
        ax.remove()  # leftover slots of the last row
    for ax, (label, records) in zip(axes, runs.items()):
        steps = [r["step"] for r in records]
        for metric, style in COMPONENT_STYLE.items():
            values = [r.get(metric) for r in records]
            if any(v is not None for v in values):
                ax.plot(steps, [np.nan if v is None else v for v in values], linewidth=1.4, **style)
                step = drop_step(steps, values)
                if np.isfinite(step):
                    ax.axvline(step, color=style["color"], linestyle="--", linewidth=1.0)
        ax.set_yscale("log")
        ax.set_title(label, fontsize="medium")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in axes[::n_cols]:
        ax.set_ylabel("loss (nats)")
    axes[0].legend(fontsize="x-small")
    if title:
        fig.suptitle(title, fontsize="medium")
    return fig
