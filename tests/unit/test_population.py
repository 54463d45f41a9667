"""Packed training (trainables/population.py + train.train_members): every member ends exactly where it would alone.

Members differ in seed and data distribution; the comparisons are against train(cfg) of each member alone: every
parameter and optimizer moment after 20 steps (max abs difference <= 1e-5), every final metric, early stopping and
divergence that touch no other member, and checkpoints that resume packed or alone."""

import pytest
import torch

from tests.conftest import CONFIGS, assert_same_metrics
from trainables import config, train as train_module
from trainables.population import Stack, pack_key
from trainables.train import train, train_members

TINY = ["optim.max_steps=20", "eval.every=10", "eval.n_id=64", "eval.n_ood=64", "eval.n_examples=1",
        "task.n_pairs_per_cell=1"]
MEMBERS = [["seed=0"], ["seed=1", "task.lengths.low=3"], ["seed=2", "task.lengths.high=4", "task.n_triggers=1"]]


def configs(*extra: str, name: str = "debug.yaml") -> list:
    return [config.load(CONFIGS / name, TINY + list(extra) + member) for member in MEMBERS]


def run_packed(cfgs, resumes=None):
    states = {}
    results = train_members(cfgs, [train_module.Logger() for _ in cfgs], resumes or [None] * len(cfgs),
                            on_checkpoint=lambda staged: states.update({(i, s["step"]): s for i, s in staged.items()}))
    return results, states


def run_alone(cfg, resume=None):
    """train(cfg) alone, remembered per config within this module when it starts from scratch (several tests compare
    against the same runs)."""
    key = repr(cfg)
    if resume is None and key in ALONE:
        return ALONE[key]
    states = {}
    result = train(cfg, resume=resume, on_checkpoint=lambda s: states.update({s["step"]: s}))
    if resume is None:
        ALONE[key] = (result, states)
    return result, states


ALONE: dict = {}


def assert_same_state(packed: dict, alone: dict) -> None:
    for name, value in alone["model"].items():
        assert (packed["model"][name] - value).abs().max() <= 1e-5, name
    for mine, theirs in zip(packed["optimizers"], alone["optimizers"]):
        assert mine["param_groups"] == theirs["param_groups"]
        for index, entry in theirs["state"].items():
            for key, value in entry.items():
                assert torch.allclose(mine["state"][index][key].float(), value.float(), atol=1e-5), (index, key)
    assert packed["step"] == alone["step"]  # the member's stream is drawn at its step: the same next batches


@pytest.mark.parametrize("extra, dtype", [
    ([], torch.float32),
    (["model.positional=rotary", "model.tied_kq=false", "model.mlp=true", "model.layer_norm=true",
      "model.embedding=learned", "model.d_model=16"], torch.float64)], ids=["onehot", "learned-rotary-mlp-float64"])
def test_each_member_ends_where_it_would_alone(extra, dtype):
    """In float64 for the model with LayerNorm: Adam turns a gradient near zero into a step of about lr whatever its
    size, so float32 rounding (a batched matmul rounds differently from a single one) can flip such a step, which says
    nothing about packing; float64 leaves the algorithm alone to compare."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        check_against_alone(configs(*extra))
    finally:
        torch.set_default_dtype(default)


def check_against_alone(cfgs: list, alone_cfgs: list | None = None) -> None:
    assert len({pack_key(c) for c in cfgs}) == 1
    packed, packed_states = run_packed(cfgs)
    for index, cfg in enumerate(alone_cfgs or cfgs):
        alone, alone_states = run_alone(cfg)
        assert_same_metrics(packed[index].metrics, alone.metrics)
        for step in (10, 20):
            assert_same_state(packed_states[(index, step)], alone_states[step])


def test_members_on_a_learning_rate_schedule_with_clipping_end_where_each_would_alone():
    """Warm-up, cosine decay and gradient clipping (each member's gradient by its own norm: a tight clip_norm, so
    every step clips) in a pack: each member's parameters, moments and learning rate as it would have them alone."""
    check_against_alone(configs(*SCHEDULED))


def test_a_run_resumed_mid_warm_up_ends_where_an_uninterrupted_one_does():
    cfgs = configs(*SCHEDULED)
    whole, states = run_packed(cfgs)
    resumes = [states[(i, 10)] for i in range(len(cfgs))]
    assert resumes[0]["metrics"]["train/lr"] == pytest.approx(0.01 * 9 / 15)  # step 10 of a 15-step warm-up
    again, _ = run_packed(cfgs, resumes)
    for index, cfg in enumerate(cfgs):
        assert_same_metrics(again[index].metrics, whole[index].metrics)
        assert_same_metrics(run_alone(cfg, resume=resumes[index])[0].metrics, whole[index].metrics)


SCHEDULED = ["optim.schedule=cosine", "optim.warmup_steps=15", "optim.min_lr=0.001", "optim.clip_norm=0.05"]


def test_a_compiled_population_ends_where_each_member_would_alone_uncompiled():
    """optim.compile=always: the vmapped step of the packed members, and the step of a member alone, run
    torch.compile'd; the references run eagerly, as runs this short do under auto."""
    check_against_alone(configs("optim.compile=always"), alone_cfgs=configs())
    compiled_alone = train(configs("optim.compile=always")[0])  # a stack of one compiles the member's own module
    assert_same_metrics(compiled_alone.metrics, run_alone(configs()[0])[0].metrics)


def test_one_step_members_with_different_distributions_match_their_runs_alone():
    cfgs = [config.load(CONFIGS / "paper_theory.yaml", ["model.n_samples_V=512", "model.n_samples_KQ=512",
                                                         "eval.n_id=128", "eval.n_ood=128", f"seed={s}",
                                                         f"task.lengths.low={low}", f"task.n_triggers={n}"])
            for s, low, n in [(0, 3, 4), (1, 9, 4), (2, 5, 8)]]
    packed, _ = run_packed(cfgs)
    for index, cfg in enumerate(cfgs):
        alone = run_alone(cfg)[0]
        assert_same_metrics(packed[index].metrics, alone.metrics)
        for key in ("W_KQ", "W_V"):
            assert abs(packed[index].arrays[key] - alone.arrays[key]).max() <= 1e-4 * (1 + abs(alone.arrays[key]).max())


def test_a_member_that_stops_early_stops_alone_and_changes_no_other():
    cfgs = configs("eval.every=5", "eval.patience=1")
    packed, _ = run_packed(cfgs)
    statuses = [r.metrics["status"] for r in packed]
    assert "early_stopped" in statuses  # patience 1 with every 5 steps: at least one member stops early
    for index, cfg in enumerate(cfgs):
        assert_same_metrics(packed[index].metrics, run_alone(cfg)[0].metrics)


def test_a_member_that_diverges_is_marked_and_touches_no_other(monkeypatch):
    cfgs = configs()
    real_init = train_module.init_state

    def poisoned(cfg):  # member seed 1 starts with an infinite weight: its first loss is not finite
        state, eval_sets, generator = real_init(cfg)
        if cfg.seed == 1:
            with torch.no_grad():
                state.model.W_U.fill_(float("inf"))
        return state, eval_sets, generator

    monkeypatch.setattr(train_module, "init_state", poisoned)
    packed, _ = run_packed(cfgs)
    assert packed[1].metrics["status"] == "diverged" and packed[1].metrics["steps"] == 0
    assert packed[1].metrics["diverged_because"] == "train/loss = nan at step 0"  # inf weights: inf - inf
    assert packed[1].metrics["ood/success"] == 0.0
    monkeypatch.setattr(train_module, "init_state", real_init)
    for index in (0, 2):
        assert_same_metrics(packed[index].metrics, run_alone(cfgs[index])[0].metrics)


def test_a_loss_that_turns_non_finite_between_evaluations_is_found_at_the_next_one(monkeypatch):
    """Nothing is read back between evaluations: member 1's loss turns nan at step 13, and the evaluation at step 20
    finds it diverged at step 13 with the result of its last finite evaluation (step 10)."""
    cfgs = configs()
    real_forward = Stack._forward

    def nan_from_step_13(self, batch):
        losses, hits, counts = real_forward(self, batch)  # (M,) each
        poisoned = (self.clock >= 13) & (torch.arange(len(losses)) == 1)
        return torch.where(poisoned, torch.nan, losses), hits, counts

    monkeypatch.setattr(Stack, "_forward", nan_from_step_13)
    packed, states = run_packed(cfgs)
    assert packed[1].metrics["status"] == "diverged" and packed[1].metrics["steps"] == 10
    assert packed[1].metrics["diverged_because"] == "train/loss = nan at step 13"
    assert (1, 20) not in states and (1, 10) in states  # no checkpoint after it diverged
    assert packed[1].metrics["id/acc"] == pytest.approx(states[(1, 10)]["metrics"]["id/acc"])
    monkeypatch.setattr(Stack, "_forward", real_forward)
    for index in (0, 2):
        assert_same_metrics(packed[index].metrics, run_alone(cfgs[index])[0].metrics)


def test_a_packed_checkpoint_resumes_packed_or_alone_to_the_same_end():
    cfgs = configs()
    whole, states = run_packed(cfgs)
    resumes = [states[(i, 10)] for i in range(len(cfgs))]
    again, _ = run_packed(cfgs, resumes)
    for index, cfg in enumerate(cfgs):
        assert_same_metrics(again[index].metrics, whole[index].metrics)
        assert_same_metrics(run_alone(cfg, resume=resumes[index])[0].metrics, whole[index].metrics)


def test_members_of_different_shapes_are_refused():
    cfgs = [config.load(CONFIGS / "debug.yaml", TINY), config.load(CONFIGS / "debug.yaml", TINY + ["model.n_layers=1"])]
    with pytest.raises(ValueError, match="pack_key"):
        train_members(cfgs, [train_module.Logger()] * 2, [None, None])
