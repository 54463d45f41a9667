"""In-context regression metrics: the squared error of each of the n predictions (y_k from the k-1 earlier pairs and
x_k) for the model and for the two Bayes baselines (baselines.py) on the same batch, and the gaps between them.

The baselines do not depend on the model, and an evaluation set is one fixed Batch object for a whole run
(train.init_state draws it once; every evaluation and the final readout pass that same object), so they are computed
once per (batch, config) and remembered. The memo is keyed by id(batch), because a Batch (a dataclass with eq) is not
hashable, and a weakref.finalize drops the entry when the batch is collected: nothing outlives its batch, and an id
Python reuses for a later batch never finds an earlier batch's values.
"""
from __future__ import annotations

import weakref

import numpy as np
import torch

from trainables.tasks import Batch
from trainables.tasks.linear_regression import baselines
from trainables.tasks.linear_regression.data import LinearRegressionConfig, pool_of

_memo: dict[int, dict[tuple, dict[str, np.ndarray]]] = {}  # id(batch) -> config's baseline fields -> per-k MSEs


def pairs(batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """x (B, N, D) and y (B, N) of a batch, float64, read from what the model reads: x_k from its inputs, y_k from
    the targets (the inputs never show y_n)."""
    x = batch.inputs[:, 0::2, 1:].double()  # (B, N, D): x_k sits at position 2(k-1), after a 0
    y = batch.targets[:, 0::2, 0].double()  # (B, N): y_k is the target at x_k's position
    return x, y


def mse_by_k(predictions: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """(N,) mean over sequences of the squared error of the k-th prediction; predictions and y (B, N)."""
    return (predictions.double() - y).square().mean(0).cpu().numpy()


def baseline_mse_by_k(cfg: LinearRegressionConfig, batch: Batch) -> dict[str, np.ndarray]:
    """{"ridge": (N,), "dmmse": (N,)}: each baseline's per-k MSE on the batch, computed once per batch and config."""
    per_batch = _memo.get(id(batch))
    if per_batch is None:
        per_batch = _memo[id(batch)] = {}
        weakref.finalize(batch, _memo.pop, id(batch), None)
    key = (cfg.dim, cfg.n_tasks, cfg.noise, cfg.pool_seed)
    if key not in per_batch:
        x, y = pairs(batch)
        pool = pool_of(cfg).to(x.device)
        per_batch[key] = {"ridge": mse_by_k(baselines.ridge(x, y, cfg.noise), y),
                          "dmmse": mse_by_k(baselines.dmmse(x, y, cfg.noise, pool), y)}
    return per_batch[key]


def model_mse_by_k(batch: Batch, predictions: torch.Tensor) -> np.ndarray:
    """(N,) the model's per-k MSE; predictions (B, T, 1), read at the x positions."""
    return mse_by_k(predictions[:, 0::2, 0], pairs(batch)[1])


def regression_metrics(prefix: str, model: np.ndarray, ridge: np.ndarray, dmmse: np.ndarray) -> dict[str, float]:
    """`<prefix>/mse`, `/ridge_mse`, `/dmmse_mse` (means over the n predictions, noise included), the gaps
    `/ridge_gap` = mse - ridge_mse and `/dmmse_gap` = mse - dmmse_mse, and the model's `/mse_at_{k}`, k = 1..n."""
    mse, ridge_mse, dmmse_mse = (float(v.mean()) for v in (model, ridge, dmmse))
    return ({f"{prefix}/mse": mse, f"{prefix}/ridge_mse": ridge_mse, f"{prefix}/dmmse_mse": dmmse_mse,
             f"{prefix}/ridge_gap": mse - ridge_mse, f"{prefix}/dmmse_gap": mse - dmmse_mse}
            | {f"{prefix}/mse_at_{k}": float(v) for k, v in enumerate(model, start=1)})
