"""The Markov n-gram figures: of a trial's arrays (attention.npz) the first layer's lag profile, the chi-square
mutual information over lag sets and example attention patterns; of a run's metrics.jsonl, Edelman's stages.

Offsets are query position minus key position (0: the token itself, 1: the previous token, the lag-1 parent).
"""
from __future__ import annotations

import math

import numpy as np
from matplotlib.figure import Figure

from trainables import figures

PARENT_SHADE = {"color": "#7CFC00", "alpha": 0.25}  # parents' lags
MAX_OFFSET_SHOWN = 12  # lag profiles: offsets beyond the parents rarely matter; the last bar sums the rest
STRATEGY_STYLE = {"linestyle": "--", "linewidth": 1.2}
NOTE = ("Lag profile: mean attention mass of each first-layer head by offset (query minus key position); shaded "
        "offsets are the parents' lags. Chi-square MI: Chen et al.'s standard and modified criteria over lag sets; the "
        "starred set is the modified criterion's argmax.")
TIE_TOLERANCE = 1e-9  # relative: chi-square values equal up to float error are one maximum


def lag_profile(profile: np.ndarray, parent_lags: np.ndarray, layer: int = 0) -> Figure:
    """One bar chart per head of `layer`: mean attention mass by offset (`lag_profile` (n_layers, H, T))."""
    heads = profile[layer]  # (H, T)
    H, T = heads.shape
    shown = min(T, MAX_OFFSET_SHOWN)
    fig = figures.new_figure(2.6 * H + 0.8, 2.8)
    axes = fig.subplots(1, H, squeeze=False)[0]
    for head, ax in enumerate(axes):
        bars = np.append(heads[head, : shown - 1], heads[head, shown - 1:].sum())  # the last bar: offsets >= shown-1
        for lag in np.asarray(parent_lags):
            ax.axvspan(lag - 0.5, lag + 0.5, **PARENT_SHADE)
        ax.bar(np.arange(shown), bars, color="#3b528b")
        ax.set_xticks(range(shown), [*map(str, range(shown - 1)), f"{shown - 1}+"], fontsize="x-small")
        ax.set_ylim(0, 1)
        ax.set_xlabel("offset")
        ax.set_title(f"layer {layer} head {head}: lag {int(np.argmax(heads[head]))}", fontsize="small")
    axes[0].set_ylabel("attention mass")
    return fig


def mutual_information(lags: np.ndarray, standard: np.ndarray, modified: np.ndarray) -> Figure:
    """Chen et al.'s standard and modified chi-square MI per lag set (`mi_lags` (K, W) bool, `mi_*` (K,)), each
    criterion's maximum starred (every tied set: the standard criterion ties the parents with their supersets)."""
    names = ["{" + ",".join(str(m + 1) for m in np.nonzero(row)[0]) + "}" for row in np.asarray(lags)]
    fig = figures.new_figure(max(6.0, 0.5 * len(names) + 3), 3.0)
    axes = fig.subplots(1, 2)
    for ax, values, title in zip(axes, (standard, modified), ("standard chi-square MI", "modified chi-square MI")):
        values = np.asarray(values, dtype=float)
        best = np.nonzero(np.isclose(values, values.max(), rtol=TIE_TOLERANCE, atol=0))[0]
        ax.bar(range(len(names)), values, color=["#fde725" if i in best else "#3b528b" for i in range(len(names))])
        ax.scatter(best, values[best] * 1.04, marker="*", color="black", s=60)
        ax.set_xticks(range(len(names)), names, rotation=60, fontsize="x-small")
        ax.set_xlabel("lag set")
        ax.set_title(title, fontsize="medium")
    return fig


def pattern(patterns: np.ndarray, layer: int, head: int, example: int = 0) -> Figure:
    """The causal pattern of one head on one OOD sequence (`patterns` (k, n_layers, H, T, T))."""
    full = patterns[example, layer, head]
    return figures.attention_pattern(full, full.shape[-1], [], f"Layer {layer} head {head}, OOD example {example}")


def stage_curves(records: list[dict], vocab_size: int, prefix: str = "ood") -> Figure:
    """Edelman's stages on one plot: a run's loss over steps (metrics.jsonl records) beside the in-context
    strategies' losses on the same evaluation set (dashed) and the uniform loss log S (dotted)."""
    fig = figures.new_figure(6.0, 3.6)
    ax = fig.add_subplot()
    steps = [r["step"] for r in records]
    ax.plot(steps, [r[f"{prefix}/loss"] for r in records], color="black", linewidth=1.8, label=f"{prefix}/loss (model)")
    strategies = [k for k in records[0] if k.startswith(f"{prefix}/") and k.endswith("_loss") and k != f"{prefix}/loss"]
    for key in strategies:
        ax.plot(steps, [r[key] for r in records], label=key, **STRATEGY_STYLE)
    ax.axhline(math.log(vocab_size), color="grey", linestyle=":", label="uniform (log S)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small")
    return fig


def pool_sweep(results, pool_key: str = "task.pool_size") -> Figure:
    """Final gaps to the Bayes predictor against the pool size, from a grid's results.csv (a DataFrame): ood/gap on
    fresh tables and id/gap on the pool's own (below 0: better than Bayes, i.e. memorised); fresh tables
    (pool_size 0) drawn at the right as "fresh", every point the mean over seeds."""
    means = results.groupby(pool_key)[["ood/gap", "id/gap"]].mean()
    pools = [p for p in means.index if p > 0]
    fresh_x = 4 * max(pools) if pools else 1  # one log-decade step past the largest pool
    xs = [fresh_x if p == 0 else p for p in means.index]
    fig = figures.new_figure(5.6, 3.6)
    ax = fig.add_subplot()
    order = np.argsort(xs)
    for metric, marker, colour in (("ood/gap", "o", "#3b528b"), ("id/gap", "s", "#5ec962")):
        ax.plot(np.asarray(xs)[order], means[metric].to_numpy()[order], label=metric, marker=marker, color=colour)
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xticks(np.asarray(xs)[order], [str(p) if p else "fresh" for p in np.asarray(means.index)[order]])
    ax.set_xlabel("training pool size (tables)")
    ax.set_ylabel("loss - Bayes loss (nats)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig


def all_figures(arrays: dict[str, np.ndarray]) -> dict[str, Figure]:
    """W&B media key -> figure: the first layer's lag profile, the chi-square MI, full patterns per layer and head."""
    out: dict[str, Figure] = {}
    if "lag_profile" in arrays:
        out["attention/lag_profile"] = lag_profile(arrays["lag_profile"], arrays.get("parent_lags", np.array([])))
    if "mi_modified" in arrays:
        out["mi/chi2"] = mutual_information(arrays["mi_lags"], arrays["mi_standard"], arrays["mi_modified"])
    for layer, head in figures.layer_heads(arrays):
        out[f"attention/pattern_L{layer}H{head}"] = pattern(arrays["patterns"], layer, head)
    return out


def all_images(arrays: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, str]]:
    """W&B media key -> (uint8 image, caption): the lag profile, the chi-square MI per lag set and the patterns as
    plain heatmaps (no figure drawn)."""
    out = {}
    if "mi_modified" in arrays:
        names = ["{" + ",".join(str(m + 1) for m in np.nonzero(row)[0]) + "}" for row in np.asarray(arrays["mi_lags"])]
        rows = np.stack([np.asarray(arrays[k], dtype=float) for k in ("mi_standard", "mi_modified")])  # (2, K)
        rows = rows / np.maximum(rows.max(1, keepdims=True), 1e-12)  # each criterion on its own scale
        best = [np.nonzero(np.isclose(row, 1.0, rtol=TIE_TOLERANCE, atol=0))[0] for row in rows]
        marks = [(np.repeat([r], len(cols)), cols, (255, 255, 255)) for r, cols in enumerate(best)]
        out["mi/chi2"] = (figures.heatmap_image(rows, 0.0, 1.0, marks=marks, cell=16),
                          "chi-square MI per lag set (columns: " + " ".join(names) + "), standard (top) and modified "
                          "(bottom) criterion, each divided by its maximum; white dots: its argmax")
    if "lag_profile" in arrays:
        heads = np.asarray(arrays["lag_profile"][0], dtype=float)[:, :MAX_OFFSET_SHOWN]  # (H, offsets) of layer 0
        parents = np.asarray(arrays.get("parent_lags", np.array([])), dtype=int)
        parents = parents[parents < heads.shape[1]]
        marks = [(np.repeat(np.arange(len(heads)), len(parents)), np.tile(parents, len(heads)), (255, 255, 255))]
        out["attention/lag_profile"] = (figures.heatmap_image(heads, 0.0, 1.0, marks=marks, cell=16),
                                        "first layer: attention mass by offset (columns 0.."
                                        f"{heads.shape[1] - 1}), one row per head; white dots: the parents' lags")
    for layer, head in figures.layer_heads(arrays):  # patterns (k, n_layers, H, T, T)
        out[f"attention/pattern_L{layer}H{head}"] = (
            figures.heatmap_image(arrays["patterns"][0, layer, head], 0.0, 1.0, "magma", cell=4),
            "query rows x key columns of an OOD sequence")
    return out
