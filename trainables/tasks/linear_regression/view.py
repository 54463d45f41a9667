"""How the in-context regression task is shown: its TaskView (trainables/tasks/view.py), drawing with figures.py."""
from __future__ import annotations

from trainables.tasks.view import Panel, PanelSection, TaskView

_BY_POOL = "data/n_tasks"  # W&B runs are grouped by pool size M: few distinct values (powers of 2), the knob itself


class LinearRegressionView(TaskView):
    figures_module = "trainables.tasks.linear_regression.figures"
    diversity_label = "M (pool size; large = diverse)"
    headline = ("ood/ridge_gap", "ood/mse", "ood/ridge_mse", "ood/dmmse_mse", "id/mse", "id/dmmse_mse",
                "data/n_tasks")
    table_columns = headline + ("ood/dmmse_gap", "id/ridge_gap", "id/dmmse_gap", "id/ridge_mse")
    curve_metrics = ("train/loss", "ood/mse", "ood/ridge_mse", "ood/dmmse_mse", "id/mse")
    short_names = {"ood/ridge_gap": "gap", "ood/mse": "ood", "ood/ridge_mse": "ridge", "ood/dmmse_mse": "dmmse",
                   "id/mse": "id", "id/dmmse_mse": "id_dmmse", "data/n_tasks": "M"}
    dashboard = (
        PanelSection("Task diversity: dMMSE or ridge",
                     "Below a threshold in the pool size M the model behaves like dMMSE, the Bayes estimator of its "
                     "pool, and fails on fresh tasks (ood/ridge_gap well above 0); above it, like ridge, solving tasks "
                     "it never saw (Raventós et al. 2023).",
                     (Panel("line", ("ood/ridge_gap",), "ood/ridge_gap, grouped by M", _BY_POOL),
                      Panel("line", ("id/dmmse_gap",), "id/dmmse_gap (pool tasks), grouped by M", _BY_POOL),
                      Panel("scatter", ("data/n_tasks", "ood/ridge_gap"), "M against final ood/ridge_gap"),
                      Panel("scatter", ("ood/ridge_gap", "ood/dmmse_gap"), "closer to ridge or to dMMSE"))),
        PanelSection("In-context learning curve",
                     "Per member, at the end of training: the MSE of the k-th prediction (from k-1 pairs) of the "
                     "model beside ridge's and dMMSE's, on fresh and on pool tasks; and attention patterns.",
                     (Panel("media", ("regression/mse_by_k",), "MSE by context length"),
                      Panel("line", ("ood/mse_at_1", "ood/mse"), "ood MSE of the first prediction and overall",
                            _BY_POOL),
                      *(Panel("media", (f"attention/pattern_L{layer}H0",), f"layer {layer}, head 0")
                        for layer in (0, 1)))),
        PanelSection("Training", "The fit on the pool's tasks: the model should reach dMMSE's MSE there.",
                     tuple(Panel("line", (m,), m) for m in ("train/loss", "id/mse", "id/dmmse_mse"))),
    )
