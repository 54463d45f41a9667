"""A run resumed from any checkpoint ends exactly where the uninterrupted run ends."""
import copy

import numpy as np
import pytest
import torch

from trainables import config
from trainables.train import train
from trainables.trainable import STATE_FILE, load_state
from tests.conftest import CONFIGS


def through_a_file(state: dict, tmp_path) -> dict:
    """The state as a retried trial reads it back: saved as the trainable saves it, loaded tensors-only."""
    torch.save({"members": {0: state}}, tmp_path / STATE_FILE)
    return load_state(tmp_path / STATE_FILE)[0]


def without_seconds(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if k != "seconds"}


@pytest.mark.parametrize("overrides", [["eval.patience=0"], ["eval.patience=1", "optim.lr=0.05"]],
                         ids=["to-the-end", "early-stopped"])
def test_resuming_from_a_checkpoint_reproduces_the_uninterrupted_run(overrides, tmp_path):
    cfg = config.load(CONFIGS / "debug.yaml", ["optim.max_steps=120", "eval.every=40", "task.n_pairs_per_cell=1",
                                               *overrides])
    states = []
    full = train(cfg, on_checkpoint=lambda state: states.append(copy.deepcopy(state)))
    assert [s["step"] for s in states] == list(range(40, full.metrics["steps"] + 1, 40))
    for state in states[:2]:
        resumed = train(cfg, resume=through_a_file(state, tmp_path))
        assert without_seconds(resumed.metrics) == without_seconds(full.metrics)
        assert np.array_equal(resumed.arrays["acc_by_pair"], full.arrays["acc_by_pair"], equal_nan=True)


def test_one_step_checkpoints_once_after_its_two_steps():
    cfg = config.load(CONFIGS / "paper_theory.yaml", ["model.n_samples_V=256", "model.n_samples_KQ=256"])
    states = []
    train(cfg, on_checkpoint=states.append)
    assert [s["step"] for s in states] == [2]
