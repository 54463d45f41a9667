"""Learning-rate schedules and gradient clipping (`optim.schedule`, `warmup_steps`, `min_lr`, `clip_norm`): the values
PyTorch's own schedulers give at every step, clipping as torch.nn.utils.clip_grad_norm_ clips one model, the learning
rate logged at every evaluation, bad values refused with their key, and a grid over the rate and the warm-up. Packed
members on a schedule end where each would alone, and a run resumed mid-warm-up where an uninterrupted one does:
tests/unit/test_population.py."""
import math

import pytest
import torch
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR

from tests.conftest import CONFIGS
from trainables import config
from trainables.optim import OptimConfig
from trainables.population import clip_each
from trainables.train import train

TINY = ["optim.max_steps=20", "eval.every=5", "eval.n_id=64", "eval.n_ood=64", "eval.n_examples=1",
        "task.n_pairs_per_cell=1"]


def pytorch_lrs(optim: OptimConfig) -> list[float]:
    """The learning rate of each step under PyTorch's schedulers: a LinearLR warm-up from (nearly) 0, then
    CosineAnnealingLR or LinearLR down to min_lr over the steps left, or the warm-up's end held."""
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=optim.lr)
    left = optim.max_steps - optim.warmup_steps
    after = {"cosine": lambda: CosineAnnealingLR(opt, T_max=left, eta_min=optim.min_lr),
             "linear": lambda: LinearLR(opt, 1.0, optim.min_lr / optim.lr, total_iters=left),
             "constant": lambda: LinearLR(opt, 1.0, 1.0, total_iters=1)}[optim.schedule]
    if optim.warmup_steps:
        warmup = LinearLR(opt, start_factor=1e-12, end_factor=1.0, total_iters=optim.warmup_steps)
        scheduler = SequentialLR(opt, [warmup, after()], milestones=[optim.warmup_steps])
    else:
        scheduler = after()
    lrs = []
    for _ in range(optim.max_steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        scheduler.step()
    return lrs


@pytest.mark.parametrize("schedule", ["constant", "cosine", "linear"])
@pytest.mark.parametrize("warmup_steps", [0, 1, 25])
def test_the_learning_rate_at_every_step_is_pytorchs(schedule, warmup_steps):
    optim = OptimConfig(lr=3e-3, max_steps=100, schedule=schedule, warmup_steps=warmup_steps,
                        min_lr=3e-4 if schedule != "constant" else 0.0)
    optim.validate()
    ours = [optim.lr_at(step) for step in range(optim.max_steps)]
    assert ours == pytest.approx(pytorch_lrs(optim), rel=1e-6, abs=1e-12)
    assert ours[0] == (0.0 if warmup_steps else optim.lr)  # a warm-up starts from 0
    if schedule != "constant":  # the decay reaches min_lr at max_steps, never below
        assert optim.lr_at(optim.max_steps) == pytest.approx(optim.min_lr)
        assert min(ours[warmup_steps:]) >= optim.min_lr - 1e-15


def test_the_default_is_the_constant_learning_rate_of_before():
    optim = OptimConfig(lr=1e-3, max_steps=50)
    assert {optim.lr_at(step) for step in range(60)} == {1e-3}
    assert optim.clip_norm == 0


def test_each_member_is_clipped_as_clip_grad_norm_clips_it_alone():
    generator = torch.Generator().manual_seed(0)
    shapes = [(5, 3), (3,), ()]
    members = [[torch.randn(shape, generator=generator) * scale for shape in shapes] for scale in (0.01, 1.0, 10.0)]
    expected = []
    for grads in members:
        params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        torch.nn.utils.clip_grad_norm_(params, max_norm=0.5)
        expected.append([p.grad for p in params])
    stacked = [torch.stack([grads[i] for grads in members]) for i in range(len(shapes))]  # (M, ...) each
    stacked[0][1, 0, 0] = math.nan  # a diverged member between the two others touches neither
    clip_each(stacked, 0.5)
    for member in (0, 2):
        for got, want in zip(stacked, expected[member]):
            assert torch.allclose(got[member], want, rtol=1e-6, atol=1e-7)
    assert torch.equal(stacked[0][0], members[0][0])  # small enough: left alone


def test_clipping_changes_training_and_the_learning_rate_is_logged_at_every_evaluation():
    base = config.load(CONFIGS / "debug.yaml", TINY)
    scheduled = config.load(CONFIGS / "debug.yaml", TINY + ["optim.schedule=linear", "optim.warmup_steps=4",
                                                             "optim.min_lr=0.001"])
    clipped = config.load(CONFIGS / "debug.yaml", TINY + ["optim.clip_norm=0.01"])
    history = {}
    results = {name: train(cfg, on_checkpoint=lambda saved, name=name: history.update({name: saved["history"]}))
               for name, cfg in [("base", base), ("scheduled", scheduled), ("clipped", clipped)]}
    assert results["clipped"].metrics["train/loss"] != results["base"].metrics["train/loss"]
    for name, cfg in [("base", base), ("scheduled", scheduled)]:
        logged = [(record["step"], record["train/lr"]) for record in history[name]]
        assert logged == [(step, pytest.approx(cfg.optim.lr_at(step - 1))) for step in (5, 10, 15, 20)]
    assert results["scheduled"].metrics["train/lr"] == pytest.approx(scheduled.optim.lr_at(19))


@pytest.mark.parametrize("override, key, why", [
    ("optim.schedule=step", "optim.schedule", "must be one of constant, cosine, linear"),
    ("optim.warmup_steps=-1", "optim.warmup_steps", "must be >= 0"),
    ("optim.warmup_steps=301", "optim.warmup_steps", "at most optim.max_steps (300)"),
    ("optim.min_lr=0.1", "optim.min_lr", "at most optim.lr (0.01)"),
    ("optim.min_lr=0.001", "optim.min_lr", "a constant schedule never decays"),
    ("optim.clip_norm=-1", "optim.clip_norm", "must be >= 0"),
])
def test_a_bad_schedule_is_refused_naming_its_key(override, key, why):
    with pytest.raises(config.ConfigError) as error:
        config.load(CONFIGS / "debug.yaml", [override])
    assert error.value.key == key and why in str(error.value)


def test_a_grid_over_the_learning_rate_and_the_warm_up_is_a_normal_grid():
    """Each point a config of its own schedule; points of different optim settings never share a pack."""
    from sweep.space import load_sweep
    from trainables.population import pack_key

    axes = "sweep.axes=[{key: optim.lr, values: [0.01, 0.001]}, {key: optim.warmup_steps, values: [0, 50]}]"
    base, _, points = load_sweep(CONFIGS / "debug_two_nodes.yaml", [axes, "optim.schedule=linear"])
    cfgs = [config.with_point(config.to_dict(base), point, check_device=False) for point in points]
    assert sorted((c.optim.lr, c.optim.warmup_steps, c.seed) for c in cfgs) == sorted(
        (lr, warmup, seed) for lr in (0.01, 0.001) for warmup in (0, 50) for seed in (0, 1))  # the config's seeds
    for c in cfgs:
        assert c.optim.lr_at(c.optim.warmup_steps) == c.optim.lr and c.optim.lr_at(c.optim.max_steps) == 0.0
    assert len({pack_key(c) for c in cfgs}) == 4  # one per (lr, warm-up): seeds of one point may share a pack
