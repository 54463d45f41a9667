"""A run resumed from any checkpoint ends exactly where the uninterrupted run ends."""
import copy

import numpy as np
import pytest
import torch

from sweep.storage.copies import STATE_FILE, load_state
from tests.conftest import CONFIGS
from trainables import config
from trainables.train import train


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


def test_a_retried_trial_counts_the_verdicts_its_members_left_in_an_earlier_attempt(tmp_path, monkeypatch):
    """Seed 0 of a candidate (2 of 2 needed) failed in an earlier attempt of the trial and left its result.json; the
    retry (run_trial, outside a Tune session: no checkpoint, reports dropped) does not train seed 1, whose verdict
    that result already decided."""
    from ray import tune

    from sweep.storage.copies import open_members
    from sweep.verdicts import Rule, stopper_of
    from trainables import trainable
    from trainables.io import VERDICT_KNOWN, read_json, write_json

    monkeypatch.setattr(tune, "get_checkpoint", lambda: None)
    monkeypatch.setattr(tune, "report", lambda *args, **kwargs: None)
    base = config.to_dict(config.load(CONFIGS / "debug_search.yaml", []))
    rule = Rule("ood/acc", 0.9, True, 0, group="candidate", needed=2, size=2).to_dict()
    members = [{"point": {"seed": seed}, "dir": str(tmp_path / f"seed={seed}"), "verdict": rule} for seed in (0, 1)]
    write_json(tmp_path / "seed=0" / "result.json", {"status": "completed", "ood/acc": 0.2})
    trainable.run_trial({"trial": "t", "members": members}, base, {}, open_members,
                        stopper_of=stopper_of)  # as sweep/tuner.py binds them
    retried = read_json(tmp_path / "seed=1" / "result.json")
    assert retried["status"] == VERDICT_KNOWN and retried["steps"] == 0
    assert retried["stopped_because"] == "its candidate failed: 1 of 2 seeds failed, 2 needed to pass"
