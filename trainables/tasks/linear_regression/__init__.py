"""In-context linear regression (SPEC §8, Raventós et al. 2023) behind the Task protocol: its generator (data.py),
the Bayes baselines (baselines.py), metrics (metrics.py), figures (figures.py), and what the sweeps, W&B and the
reports need to know about it.

A continuous task: the model reads real-valued inputs (B, T, D+1) and predicts y (d_out = 1), trained by squared
error. Success is a gap to minimise: `ood/ridge_gap` = the model's MSE on fresh tasks minus ridge's (the Bayes
estimator of the Gaussian prior), at most eval.threshold. Below the task-diversity threshold in M the model behaves
like dMMSE (the Bayes estimator of the pool) and fails on fresh tasks; above it, like ridge.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from trainables.errors import require
from trainables.tasks import Task
from trainables.tasks.linear_regression import metrics
from trainables.tasks.linear_regression.data import LinearRegressionConfig, n_positions, sampler
from trainables.tasks.linear_regression.view import LinearRegressionView

READOUT_ID_SEQUENCES = 256  # pool-task sequences of the final readout's per-k curves: one more dMMSE pass, kept small


class LinearRegression(Task):
    """Regress y on x in context, on tasks from a pool of M (training) or fresh ones (OOD): ridge or dMMSE."""

    name = "linear_regression"
    config = LinearRegressionConfig
    view = LinearRegressionView
    success_metric = "ood/ridge_gap"
    success_above = False  # an MSE gap: success when it is at most eval.threshold
    knobs = ("task.n_tasks",)  # diversity: data/n_tasks, the knob's own value (the default)
    # The data distribution: each member its own pool (size and seed) and noise. dim and n_points set shapes.
    member_fields = ("n_tasks", "noise", "pool_seed")

    batch_sampler = staticmethod(sampler)  # data.py's: every split, and a pack's training batches at once

    def validate(self, cfg: LinearRegressionConfig) -> None:
        require(
            ("task.dim", cfg.dim >= 1, "must be >= 1 (x and w live in R^dim)"),
            ("task.n_points", cfg.n_points >= 1, "must be >= 1 (the (x, y) pairs of a sequence)"),
            ("task.n_tasks", cfg.n_tasks >= 1, "must be >= 1 (the size of the training pool of task vectors)"),
            ("task.noise", math.isfinite(cfg.noise) and cfg.noise >= 0,
             "must be a finite number >= 0 (the variance sigma^2 of the label noise)"),
        )

    def dims(self, cfg: LinearRegressionConfig) -> tuple[int, int]:
        return 1, n_positions(cfg)  # d_out = 1: the model reads out one number, its prediction of y

    def input_width(self, cfg: LinearRegressionConfig) -> int:
        return cfg.dim + 1  # [y, x]: coordinate 0 carries y, the others x

    def eval_splits(self, cfg: LinearRegressionConfig) -> dict[str, str]:
        """OOD first: the evaluation sets are drawn in this order from one generator, so the OOD set (fresh tasks)
        is then the same whatever the pool, and runs of a pool-size sweep are compared on the same sequences."""
        return {"ood": "fresh", "id": "train"}

    def metrics(self, cfg, prefix, batch, logits, cache) -> dict[str, float]:
        """The model's, ridge's and dMMSE's MSE on the split, their gaps, and the model's MSE per k (metrics.py)."""
        baseline = metrics.baseline_mse_by_k(cfg, batch)
        return metrics.regression_metrics(prefix, metrics.model_mse_by_k(batch, logits), baseline["ridge"],
                                          baseline["dmmse"])

    @torch.no_grad()
    def readouts(self, cfg, model, ood, generator, n_examples):
        """Per-k MSE curves of the model, ridge and dMMSE on the OOD set and on READOUT_ID_SEQUENCES pool-task
        sequences drawn from `generator` (`<split>_mse_by_k`, `<split>_ridge_mse_by_k`, `<split>_dmmse_mse_by_k`,
        each (n,); `k`: 1..n)."""
        pool_tasks = self.sample(cfg, READOUT_ID_SEQUENCES, generator, "train").to(ood.inputs.device)
        arrays = {"k": np.arange(1, cfg.n_points + 1)}
        for prefix, batch in (("ood", ood), ("id", pool_tasks)):
            predictions, _ = model.run_with_cache(batch.model_input, batch.query)  # (B, T, 1)
            arrays[f"{prefix}_mse_by_k"] = metrics.model_mse_by_k(batch, predictions)
            for name, curve in metrics.baseline_mse_by_k(cfg, batch).items():
                arrays[f"{prefix}_{name}_mse_by_k"] = curve
        return arrays, {}

    def run_name(self, cfg: LinearRegressionConfig) -> str:
        """Pool size and dimension, e.g. lr_M1024_D4."""
        return f"lr_M{cfg.n_tasks}_D{cfg.dim}"

    def tags(self, cfg: LinearRegressionConfig) -> list[str]:
        return [f"dim:{cfg.dim}", f"n_points:{cfg.n_points}", f"noise:{cfg.noise:g}"]


TASK = LinearRegression()
