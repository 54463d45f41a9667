"""The science the project stands on: the paper's transition, reproducibility, and no lost results on divergence."""
import math

import numpy as np
import pytest

from trainables import config
from trainables.train import train
from tests.conftest import CONFIGS


def paper_theory(*overrides):
    return train(config.load(CONFIGS / "paper_theory.yaml", list(overrides))).metrics


@pytest.fixture(scope="module")
def wide():
    return paper_theory("task.lengths.low=3", "task.lengths.high=15")


@pytest.fixture(scope="module")
def narrow():
    return paper_theory("task.lengths.low=14", "task.lengths.high=15")


def test_diverse_lengths_learn_the_induction_head(wide):
    assert wide["ood/acc"] >= 0.98 and wide["id/acc"] >= 0.98 and wide["ood/success"] == 1.0
    assert wide["mech/induction_score"] > 0.5 > wide["mech/positional_score"]
    assert wide["mech/kq_induction_peak"] > wide["mech/kq_positional_peak"]


def test_narrow_lengths_take_the_positional_shortcut(narrow):
    """ID is solved, OOD fails, and the failures are the shortcut's answer (the pseudo rate)."""
    assert narrow["id/acc"] >= 0.98 and narrow["ood/acc"] < 0.5 and narrow["ood/success"] == 0.0
    assert narrow["ood/pseudo_rate"] > 0.3
    assert narrow["mech/kq_positional_peak"] > narrow["mech/kq_induction_peak"]


def test_max_sum_ratio_orders_the_two(wide, narrow):
    assert wide["data/max_sum_ratio"] < narrow["data/max_sum_ratio"]
    assert wide["data/width"] == 13 and narrow["data/width"] == 2


def test_a_trial_is_reproducible_from_its_config():
    cfg = config.load(CONFIGS / "debug.yaml", ["optim.max_steps=60", "eval.every=30"])
    first, second = train(cfg), train(cfg)
    drop = lambda m: {k: v for k, v in m.items() if k != "seconds"}
    assert drop(first.metrics) == drop(second.metrics)
    assert all(np.array_equal(first.arrays[k], second.arrays[k], equal_nan=True) for k in first.arrays)
    other = train(config.load(CONFIGS / "debug.yaml", ["optim.max_steps=60", "eval.every=30", "seed=1"]))
    assert drop(other.metrics) != drop(first.metrics)


def test_a_diverging_run_keeps_its_last_finite_evaluation():
    """SGD with an absurd learning rate blows up; the result is the last finite evaluation, flagged diverged."""
    cfg = config.load(CONFIGS / "debug.yaml", ["optim.name=sgd", "optim.lr=1e30", "eval.every=1"])
    result = train(cfg)
    assert result.metrics["status"] == "diverged" and result.metrics["steps"] == 0
    assert all(math.isfinite(result.metrics[k]) for k in ("id/loss", "ood/loss", "ood/acc"))
    assert result.metrics["diverged_because"].startswith(("train/loss = ", "id/loss = "))  # the reason, with its step
    assert result.metrics["ood/success"] == 0.0  # a diverged run never counts as generalizing


def test_early_stopping_ends_a_run_whose_id_loss_stopped_improving():
    """With patience 2, a run that has converged stops well before max_steps; patience 0 runs to the end."""
    overrides = ["optim.max_steps=5000", "eval.every=25", "task.n_pairs_per_cell=1", "optim.lr=0.1"]
    stopped = train(config.load(CONFIGS / "debug.yaml", overrides + ["eval.patience=2"])).metrics
    assert stopped["status"] == "early_stopped" and stopped["steps"] < 5000 and stopped["steps"] % 25 == 0
