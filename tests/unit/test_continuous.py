"""Continuous tasks (issue [regression]): a Batch of real-valued inputs and targets trains through the same loop,
packing, dry run, memory estimate and validation as a token task; shown here with the tutorial's plugin
(tests/plugins/running_mean.py, docs/EXTENDING.md "A continuous task"). The built-in linear_regression:
tests/unit/test_linear_regression.py."""
import pytest
import torch

from tests.conftest import CONFIGS
from tests.plugins.running_mean import RunningMean, RunningMeanConfig
from tests.unit.test_population import check_against_alone
from trainables import config, dry_run, memory
from trainables.errors import ConfigError
from trainables.tasks import stack_batches
from trainables.tasks import PAD_LABEL, Batch
from trainables.train import train

TASK_PATH = "tests.plugins.running_mean:TASK"
BASE = {
    "name": "running_mean", "seed": 0,
    "task": {"name": TASK_PATH, "length": 6, "n_means": 4},
    "model": {"name": "transformer", "embedding": "linear", "positional": "learned_abs", "d_model": 16,
              "n_layers": 2, "mlp": True},
    "optim": {"name": "adam", "lr": 0.01, "batch_size": 32, "max_steps": 20},
    "eval": {"every": 10, "n_id": 64, "n_ood": 64, "n_examples": 2, "threshold": 0.5},
    "logging": {"wandb": False},
}


def cfg_of(*overrides: str):
    return config.load(BASE, list(overrides))


def test_a_continuous_member_trains_to_its_squared_error_without_an_accuracy():
    result = train(cfg_of())
    metrics = result.metrics
    assert metrics["status"] == "completed" and metrics["steps"] == 20
    assert {"train/loss", "id/loss", "ood/loss", "ood/success"} <= set(metrics)
    assert not any(key.endswith("/acc") for key in metrics), sorted(metrics)
    assert all(metrics[k] > 0 for k in ("train/loss", "id/loss", "ood/loss"))
    # A model that predicts 0 everywhere scores the mean square of the targets: training beat it.
    ood = RunningMean().sample(RunningMeanConfig(length=6, n_means=4), 512, torch.Generator().manual_seed(1), "fresh")
    assert metrics["ood/loss"] < ood.targets[ood.loss_mask].square().mean().item()
    assert result.arrays["patterns"].shape == (2, 2, 1, 6, 6)  # (examples, layers, heads, T, T)
    assert dry_run.reported_metrics(cfg_of()) == set(metrics)


def test_continuous_members_with_different_pools_end_where_each_would_alone():
    check_against_alone([cfg_of(f"seed={s}", f"task.n_means={m}") for s, m in [(0, 1), (1, 4), (2, 64)]])


def test_regression_members_with_different_pools_and_noise_end_where_each_would_alone():
    """linear_regression draws a pack's batches at once (its batch_sampler); running_mean above, one by one."""
    check_against_alone([config.load(CONFIGS / "debug_linear_regression.yaml", [
        "optim.max_steps=20", "eval.every=10", "eval.n_id=64", "eval.n_ood=64", "eval.n_examples=1", f"seed={s}",
        f"task.n_tasks={m}", f"task.noise={noise}"]) for s, m, noise in [(0, 1, 0.25), (1, 64, 0.0), (2, 4096, 1.0)]])


def test_padding_cropping_and_picking_a_member_act_on_positions_not_on_widths():
    batch = RunningMean().sample(RunningMeanConfig(length=4), 3, torch.Generator().manual_seed(0))
    padded = batch.padded(7)
    assert padded.inputs.shape == (3, 7, 1) and padded.targets.shape == (3, 7, 1) and padded.tokens.shape == (3, 7)
    assert torch.equal(padded.inputs[:, :4], batch.inputs) and not padded.inputs[:, 4:].any()
    assert not padded.loss_mask[:, 4:].any() and (padded.labels[:, 4:] == PAD_LABEL).all()
    assert torch.equal(padded.cropped(4).inputs, batch.inputs)
    stacked = stack_batches([batch, batch.padded(5)])  # (P, B, T, 1)
    assert stacked.inputs.shape == (2, 3, 5, 1) and torch.equal(stacked.member(0).cropped(4).targets, batch.targets)
    assert batch.targets.is_floating_point() and batch.model_input is batch.inputs


def test_a_token_batch_reads_its_tokens():
    tokens = torch.zeros(2, 3, dtype=torch.long)
    batch = Batch(tokens, tokens, tokens.bool(), tokens)
    assert batch.model_input is tokens and batch.padded(5).inputs is None


@pytest.mark.parametrize("overrides, key, reason", [
    (["model.embedding=onehot", "model.positional=onehot_abs"], "model.embedding",
     "onehot (transformer) reads token ids, but running_mean gives real-valued inputs"),
    (["model.prev_token=true"], "model.prev_token", "model.embedding=linear reads real-valued inputs"),
    (["task.n_means=0"], "task.n_means", "must be >= 1"),
])
def test_a_plugins_inputs_and_keys_are_checked_as_a_built_ins(overrides, key, reason):
    """The built-in's lines through the CLI: tests/unit/test_override_errors.py."""
    with pytest.raises(ConfigError) as refused:
        cfg_of(*overrides)
    assert refused.value.key == key and reason in str(refused.value)


def test_a_longer_model_context_than_the_tasks_is_accepted_and_sizes_the_positional_table():
    from trainables.train import init_state

    assert init_state(cfg_of("model.n_ctx=10"))[0].model.W_pos.shape[0] == 10  # the task's sequences: 6 positions
    result = train(cfg_of("model.n_ctx=10"))
    assert result.metrics["status"] == "completed" and result.arrays["patterns"].shape[-1] == 6


class TokenTargets(RunningMean):
    """Breaks the contract: a continuous task whose targets are token ids."""

    def sample(self, cfg, n, generator, split="train"):
        batch = super().sample(cfg, n, generator, split)
        batch.targets = batch.targets[..., 0].long()
        return batch


def test_the_dry_run_names_a_continuous_task_whose_targets_are_not_real_valued():
    cfg = cfg_of()
    batch = TokenTargets().sample(cfg.task, dry_run.N_SEQUENCES, torch.Generator())
    with pytest.raises(ConfigError) as refused:
        dry_run.check_batch(batch, "running_mean: sample()", 1, 6, False, d_in=1)
    assert refused.value.key == "task.name"
    assert "targets must be a (3, 6, 1) torch.float32 tensor, got (3, 6) torch.int64" in str(refused.value)


def test_the_memory_estimate_weighs_a_continuous_tasks_inputs_and_targets(monkeypatch):
    """Each position of a batch holds d_in inputs and d_out targets (float32) beside tokens, labels and the mask:
    63 more inputs per position weigh 4 x 63 bytes more in every kept evaluation sequence and in every sequence of the
    training batch (and the model's W_in more)."""
    narrow = memory.needs(cfg_of())
    monkeypatch.setattr(RunningMean, "input_width", lambda self, cfg: 64)
    wide = memory.needs(cfg_of())
    T, n_id, n_ood, batch = 6, 64, 64, 32
    kept = 4 * 63 * T * (n_id + n_ood)
    assert wide["eval.n_id"] - narrow["eval.n_id"] >= kept
    assert wide["optim.batch_size"] - narrow["optim.batch_size"] >= kept + 4 * 63 * T * batch


def test_the_tutorials_continuous_task_is_the_file_the_tests_run():
    extending = (CONFIGS.parent / "docs" / "EXTENDING.md").read_text()
    assert "```python\n" + (CONFIGS.parent / "tests/plugins/running_mean.py").read_text() + "```" in extending
