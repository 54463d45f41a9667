"""Every registered task and model keeps the contracts the rest of headsweep relies on, so a new task folder or model
file is checked by these tests the day it is registered: batches with per-position labels and a loss mask, padding
for packing, evaluation splits and the success metric, a training step and an exact checkpoint round trip."""
import copy
import math

import pytest
import torch
import yaml
from omegaconf import OmegaConf

from tests.conftest import CONFIGS
from tests.unit.test_oracle import oracle_step
from trainables import config, readouts
from trainables.models import MODELS
from trainables.population import Batches
from trainables.tasks import TASKS, Batch, is_continuous, view_of
from trainables.train import checkpoint, evaluate, init_state, restore, train

SMALL = {"transformer": ["model.n_layers=2"], "one_step": ["model.n_samples_V=64", "model.n_samples_KQ=64"]}
READ_INPUTS = {"transformer": ["model.embedding=linear", "model.positional=learned_abs"]}  # for a continuous task


def load(task: str, model: str, *overrides: str) -> config.Config:
    """The task's section of configs/debug_<task>.yaml (small and fast) when there is one, else its defaults."""
    debug = CONFIGS / f"debug_{task}.yaml"
    section = yaml.safe_load(debug.read_text())["task"] if debug.exists() else {"name": task}
    reads = READ_INPUTS.get(model, []) if is_continuous(TASKS[task]) else []
    return config.from_layers([OmegaConf.create({"task": section, "model": {"name": model}}),
                               OmegaConf.from_dotlist(reads + list(overrides))])


def small_config(task: str, model: str) -> config.Config:
    """The task with the model, a few evaluation sequences and no W&B (None if they cannot go together)."""
    try:
        return load(task, model, "eval.n_id=32", "eval.n_ood=32", "logging.wandb=false", *SMALL.get(model, []))
    except Exception as e:  # a model that cannot run this task says so by key, e.g. model.name
        assert "model.name" in str(e), e
        return None


PAIRS = [(t, m) for t in TASKS for m in MODELS]


@pytest.mark.parametrize("name", list(TASKS))
def test_every_split_samples_a_consistent_batch_and_pads(name):
    task = TASKS[name]
    cfg = load(name, "transformer").task
    d_vocab, n_ctx = task.dims(cfg)
    for split in {"train", *task.eval_splits(cfg).values()}:
        batch = task.sample(cfg, 16, torch.Generator().manual_seed(0), split)
        assert isinstance(batch, Batch)
        B, T = batch.tokens.shape
        assert B == 16 and T <= n_ctx and batch.loss_mask.shape == batch.labels.shape == (B, T)
        if not is_continuous(task):  # token ids, and their targets
            assert batch.inputs is None and batch.tokens.max() < d_vocab and batch.tokens.min() >= 0 and \
                batch.targets.shape == (B, T)
        else:  # real-valued inputs and targets (d_vocab is the output width)
            assert batch.inputs.shape == (B, T, task.input_width(cfg)) and batch.targets.shape == (B, T, d_vocab)
        assert batch.loss_mask.any(1).all()  # every sequence is scored somewhere
        if task.query_only(cfg):
            assert batch.query is not None and torch.equal(batch.loss_mask.sum(1), torch.ones(B, dtype=torch.long))
            assert batch.loss_mask[torch.arange(B), batch.query].all()
        assert all(v.shape == (B,) for v in batch.info.values())
        padded = task.sample(cfg, 16, torch.Generator().manual_seed(0), split, pad_to=n_ctx)
        assert padded.tokens.shape == (B, n_ctx) and torch.equal(padded.tokens[:, :T], batch.tokens)
        assert padded.inputs is None or torch.equal(padded.inputs[:, :T], batch.inputs)
        assert torch.equal(padded.scored_targets(), batch.scored_targets())


@pytest.mark.parametrize("name", list(TASKS))
def test_every_task_declares_what_reports_and_searches_read(name):
    task = TASKS[name]
    cfg = load(name, "transformer").task
    assert task.diversity_axis in task.diversity(cfg) and all(k.startswith("data/") for k in task.diversity(cfg))
    assert set(task.theory(cfg)) <= set(task.diversity(cfg)) | {task.success_metric}
    assert "ood" in task.eval_splits(cfg) and "id" in task.eval_splits(cfg)
    view = view_of(task)
    assert set(view.short_names) <= set(view.headline) and task.run_name(cfg)
    assert all(p.kind in ("line", "scatter", "media") for section in view.dashboard for p in section.panels)


@pytest.mark.parametrize("task, model", PAIRS)
def test_a_step_evaluates_and_a_checkpoint_restores_exactly(task, model):
    cfg = small_config(task, model)
    if cfg is None:
        pytest.skip(f"{model} cannot run {task}")
    state, eval_sets, _ = init_state(cfg)
    spec = TASKS[task]
    batch = spec.sample(cfg.task, state.phase().batch_size, torch.Generator().manual_seed(0))
    # A step in plain PyTorch: here it only has to change what a checkpoint holds (train() steps every pair in
    # test_every_media_panel_of_a_task_shows_an_image_its_runs_log).
    assert math.isfinite(oracle_step(state.phase(), state.model, batch, 0))
    state.step = 1
    metrics = evaluate(state.model, eval_sets, cfg)
    accuracy = set() if is_continuous(spec) else {"id/acc", "ood/acc"}  # a continuous task's loss is its MSE alone
    assert {"id/loss", "ood/loss", spec.success_metric, "ood/success"} | accuracy <= set(metrics)
    assert accuracy or not [k for k in metrics if k.endswith("/acc")]
    saved = copy.deepcopy(checkpoint(state, metrics, 0.0))
    twin, _, _ = init_state(cfg)
    restore(twin, saved)
    for mine, theirs in zip(state.model.parameters(), twin.model.parameters()):
        assert torch.equal(mine, theirs)
    if state.step < state.total_steps:  # the next batch is the same too: the member's stream at the restored step
        nxt = Batches([cfg], [state]).draw(state.phase().batch_size)
        assert torch.equal(nxt.model_input, Batches([cfg], [twin]).draw(twin.phase().batch_size).model_input)


@pytest.mark.parametrize("name", list(TASKS))
def test_every_knob_is_a_config_key_that_moves_the_diversity_measures(name):
    task = TASKS[name]
    base = load(name, "transformer")
    assert task.knobs
    for knob in task.knobs:
        value = config.select(base, knob)
        assert value is not config.MISSING, knob
        neighbours = (value + 1, value - 1, value + 2) if isinstance(value, int) else (value * 0.5, value * 1.5)
        for other in neighbours:  # some neighbour of the default is valid and changes data/*
            try:
                moved = load(name, "transformer", f"{knob}={other}")
            except Exception:
                continue
            if task.diversity(moved.task) != task.diversity(base.task):
                break
        else:
            pytest.fail(f"no valid change of {knob} moves {task.name}'s diversity measures")


@pytest.mark.parametrize("name", list(TASKS))
def test_every_media_panel_of_a_task_shows_an_image_its_runs_log(name):
    """A W&B media panel whose key no run logs stays empty forever: each is logged by a run of some model (two heads
    per layer, as the panels show; two training steps)."""
    logged = set()
    for model in MODELS:
        if small_config(name, model) is None:
            continue
        heads = ["model.n_heads=2"] if model == "transformer" else []
        cfg = load(name, model, "eval.n_id=32", "eval.n_ood=32", "logging.wandb=false", "optim.max_steps=2",
                   "eval.every=2", *SMALL.get(model, []), *heads)
        logged |= set(readouts.member_images(config.to_dict(cfg), train(cfg).arrays))
    panels = {key for section in view_of(TASKS[name]).dashboard for panel in section.panels if panel.kind == "media"
              for key in panel.metrics}
    assert panels and panels <= logged, panels - logged
