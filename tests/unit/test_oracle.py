"""train() against an oracle: one member's training written out in plain PyTorch, sharing no code with the loop.

The oracle draws the member's own batches from its stream (the task's batch_sampler on a streams.Streams keyed as
init_state keys the member), and for each phase and step sets the scheduled learning rate, takes the mean loss over
the scored positions through the model's forward, backpropagates, clips with torch's own clip_grad_norm_ and steps the
phase's optimizer; every eval.every steps and after the last it measures the ID loss and stops once eval.patience
evaluations in a row brought no new best. No population.Stack, Batches, scored_loss or clip_each, no train.evaluate,
decide or EarlyStopping: a mistake in any of them shows here as parameters, a status or a step count that differ.
init_state (the model at initialisation, its optimizers, the evaluation sets) is shared: the member's setup, not
its loop."""
import math

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import CONFIGS
from trainables import config
from trainables.optim import Phase
from trainables.streams import Streams
from trainables.tasks import Batch, task_of
from trainables.train import init_state, train

TINY = ["optim.max_steps=20", "eval.every=10", "eval.n_id=64", "eval.n_ood=64", "eval.n_examples=1",
        "task.n_pairs_per_cell=1"]
SEEDS = [["seed=0"], ["seed=1", "task.lengths.low=3"], ["seed=2", "task.lengths.high=4", "task.n_triggers=1"]]


def mean_loss(model: torch.nn.Module, batch: Batch, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Cross-entropy over the scored positions (the query, or where loss_mask), or a continuous task's squared error;
    in `dtype` (the model's outputs cast to it) when given."""
    outputs, targets = model(batch.model_input, batch.query), batch.targets  # (B, T, N) or (B, N) at the query
    if batch.query is not None:
        targets = targets[torch.arange(len(targets)), batch.query]  # (B,) or (B, d_out)
    else:
        outputs, targets = outputs[batch.loss_mask], targets[batch.loss_mask]  # (S, N), (S,) or (S, d_out)
    if dtype is not None:
        outputs, targets = outputs.to(dtype), targets.to(dtype) if targets.is_floating_point() else targets
    if targets.is_floating_point():
        return (outputs - targets).square().mean()
    return F.cross_entropy(outputs, targets)


def oracle_step(phase: Phase, model: torch.nn.Module, batch: Batch, at: int) -> float:
    """One optimizer step of the phase (its step `at`: where its learning-rate schedule is) on the batch, written out:
    its learning rate, the mean loss, backward, torch's clip_grad_norm_, the optimizer's step. Returns the loss."""
    for group in phase.optimizer.param_groups if phase.lr else ():
        group["lr"] = phase.lr(at)
    model.train()
    phase.optimizer.zero_grad()
    loss = mean_loss(model, batch)
    loss.backward()
    if phase.clip_norm:
        torch.nn.utils.clip_grad_norm_([p for g in phase.optimizer.param_groups for p in g["params"]], phase.clip_norm)
    phase.optimizer.step()
    return loss.item()


def oracle(cfg) -> tuple[dict[int, dict], dict]:
    """The member's parameters at each evaluation (step -> name -> tensor) and how its run ended: status, steps and
    the ID loss of its last evaluation."""
    state, eval_sets, _ = init_state(cfg)
    model, task, total = state.model, task_of(cfg), state.total_steps
    sampler, stream = task.batch_sampler([cfg.task], cfg.device), Streams([state.key], cfg.device)
    best, stale, step, snapshots = math.inf, 0, 0, {}
    for phase in state.phases:
        for at in range(phase.steps):
            batch = sampler(phase.batch_size, stream).member(0)
            stream.advance()
            oracle_step(phase, model, batch, at)
            step += 1
            if step % cfg.eval.every and step < total:
                continue
            model.eval()
            with torch.no_grad():
                id_loss = mean_loss(model, eval_sets["id"], torch.float64).item()
            snapshots[step] = {name: value.clone() for name, value in model.state_dict().items()}
            best, stale = (id_loss, 0) if id_loss < best - 1e-6 else (best, stale + 1)
            if cfg.eval.patience and stale >= cfg.eval.patience:
                return snapshots, {"status": "early_stopped", "steps": step, "id/loss": id_loss}
    return snapshots, {"status": "completed", "steps": step, "id/loss": id_loss}


def assert_ends_where_the_oracle_does(cfg) -> str:
    saved = {}
    result = train(cfg, on_checkpoint=lambda state: saved.update({state["step"]: state["model"]}))
    snapshots, end = oracle(cfg)
    assert {k: result.metrics[k] for k in ("status", "steps")} == {k: end[k] for k in ("status", "steps")}
    assert result.metrics["id/loss"] == pytest.approx(end["id/loss"], rel=1e-5)
    assert sorted(saved) == sorted(snapshots)  # a checkpoint at every evaluation the oracle made, and no other
    for step, params in snapshots.items():  # to float32 rounding: the one-step model's scatter-adds on several
        for name, value in params.items():  # threads sum in no fixed order (W_KQ, about 300: 5e-5 apart run to run)
            assert (saved[step][name] - value).abs().max() <= 1e-5 * (1 + value.abs().max()), (step, name)
    return end["status"]


@pytest.mark.parametrize("extra", [[], ["eval.every=5", "eval.patience=1"]], ids=["to-the-end", "early-stopping"])
def test_the_loop_trains_a_member_as_the_oracle_does(extra):
    statuses = {assert_ends_where_the_oracle_does(config.load(CONFIGS / "debug.yaml", TINY + extra + seed))
                for seed in SEEDS}
    assert statuses == ({"completed", "early_stopped"} if extra else {"completed"})  # both ends are compared


def test_a_learning_rate_schedule_and_clipping_step_as_torch_would():
    """Warm-up, cosine decay and a clip_norm tight enough that every step clips: clip_each on a pack of one against
    torch.nn.utils.clip_grad_norm_."""
    assert_ends_where_the_oracle_does(config.load(CONFIGS / "debug.yaml", TINY + SEEDS[0] + [
        "optim.schedule=cosine", "optim.warmup_steps=15", "optim.min_lr=0.001", "optim.clip_norm=0.05"]))


def test_the_one_step_models_two_phases_and_a_continuous_task_train_as_the_oracle_does():
    """Algorithm 1 (a W_V phase, then a W_KQ phase, of plain SGD at the query) and a real-valued regression target."""
    assert_ends_where_the_oracle_does(config.load(CONFIGS / "paper_theory.yaml", [
        "model.n_samples_V=256", "model.n_samples_KQ=256", "eval.n_id=64", "eval.n_ood=64"]))
    assert_ends_where_the_oracle_does(config.load(CONFIGS / "debug_linear_regression.yaml", [
        "optim.max_steps=20", "eval.every=10", "eval.n_id=64", "eval.n_ood=64"]))
