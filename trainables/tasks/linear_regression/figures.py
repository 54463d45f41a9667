"""The in-context regression figures of a trial's arrays (attention.npz): the MSE of the k-th prediction (from the
k-1 earlier pairs and x_k) of the model beside the two Bayes baselines, ridge and dMMSE, on fresh (ood) and pool (id)
tasks; and every layer and head's full attention pattern on an OOD sequence (trainables/pattern_figures.py).

Arrays: `k` (n,), and `<split>_mse_by_k`, `<split>_ridge_mse_by_k`, `<split>_dmmse_mse_by_k` (n,) for split in ood,
id (the task's readouts)."""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from trainables import figures, pattern_figures

SPLIT_TITLES = {"ood": "fresh tasks (ood)", "id": "pool tasks (id)"}
CURVES = {"": {"color": "black", "linewidth": 1.8, "marker": "o", "markersize": 3, "label": "model"},
          "ridge_": {"color": "#3b528b", "linestyle": "--", "linewidth": 1.3, "label": "ridge (λ = σ²)"},
          "dmmse_": {"color": "#d62728", "linestyle": ":", "linewidth": 1.5, "label": "dMMSE (pool posterior)"}}
NOTE = ("MSE by context length: the squared error of the k-th prediction, from the k-1 pairs before it, of the model "
        "(solid) beside ridge (dashed, optimal on fresh tasks) and dMMSE (dotted, optimal on pool tasks). "
        + pattern_figures.NOTE)
MEDIA_KEY = "regression/mse_by_k"


def mse_by_k(arrays: dict[str, np.ndarray]) -> Figure:
    """One panel per split the arrays hold: the three per-k MSE curves, on one y scale across panels."""
    splits = [s for s in SPLIT_TITLES if f"{s}_mse_by_k" in arrays]
    k = np.asarray(arrays["k"])
    fig = figures.new_figure(3.6 * len(splits) + 0.4, 3.2)
    axes = fig.subplots(1, len(splits), squeeze=False, sharey=True)[0]
    for ax, split in zip(axes, splits):
        for prefix, style in CURVES.items():
            ax.plot(k, np.asarray(arrays[f"{split}_{prefix}mse_by_k"], dtype=float), **style)
        ax.set_title(SPLIT_TITLES[split], fontsize="medium")
        ax.set_xlabel("k (prediction from k-1 pairs)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("MSE of the k-th prediction")
    axes[0].legend(fontsize="x-small")
    return fig


def pool_sweep(results, pool_key: str = "task.n_tasks") -> Figure:
    """The paper's figure from a grid's results.csv (a DataFrame): the model's final MSE against the pool size M, on
    pool tasks (id) and on fresh tasks (ood), each beside both Bayes estimators' on the same sequences; the model's
    points are each seed's, its line their mean."""
    by_pool = results.groupby(pool_key)
    pools = np.asarray(sorted(by_pool.groups), dtype=float)
    fig = figures.new_figure(8.0, 3.4)
    axes = fig.subplots(1, 2, sharey=True)
    for ax, split in zip(axes, ("id", "ood")):
        means = by_pool[[f"{split}/mse", f"{split}/ridge_mse", f"{split}/dmmse_mse"]].mean()
        for prefix, style in CURVES.items():
            ax.plot(pools, means[f"{split}/{prefix}mse"].to_numpy(), **style)
        ax.scatter(results[pool_key], results[f"{split}/mse"], s=10, color="black", alpha=0.4, zorder=3)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(SPLIT_TITLES[split], fontsize="medium")
        ax.set_xlabel("M (task vectors in the training pool)")
        ax.grid(alpha=0.3, which="both")
    axes[0].set_ylabel("final MSE (mean over the n predictions)")
    axes[1].legend(fontsize="x-small")
    return fig


def all_figures(arrays: dict[str, np.ndarray]) -> dict[str, Figure]:
    """W&B media key -> figure: the per-k MSE curves, and the attention patterns where the model has attention."""
    out = pattern_figures.all_figures(arrays)
    if "k" in arrays:
        out[MEDIA_KEY] = mse_by_k(arrays)
    return out


def all_images(arrays: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, str]]:
    """W&B media key -> (uint8 image, caption). The curves are rendered (one small line plot, tens of milliseconds
    once per member: a heatmap would not show three curves), the patterns drawn as plain heatmaps."""
    out = pattern_figures.all_images(arrays)
    if "k" in arrays:
        out[MEDIA_KEY] = (figures.rgb(mse_by_k(arrays)), "MSE of the k-th prediction: model (solid), ridge (dashed), "
                          "dMMSE (dotted), on fresh and pool tasks")
    return out
