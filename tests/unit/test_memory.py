"""trainables/memory.py's estimate held to what torch holds, measured on the CPU as bench/gpu.py measures it on a GPU
(trainables/live_bytes.py; bench/memory_estimate.py at the GPU's sizes): a packed training step of bench/gpu.py's three
configs at P = 1 and 8, and an evaluation, each within 25% of its estimate. Against the peaks an H200 measured
(torch.cuda.max_memory_allocated), the same estimate is within 5% for every eager row of bench/gpu.py but the first,
which also held cuBLAS's workspaces (docs/PERFORMANCE.md)."""
import pytest
import torch

from bench.memory_estimate import estimated_peak, measured_peak, members
from trainables import dry_run, memory
from trainables.errors import ConfigError
from trainables.live_bytes import LiveBytes
from trainables.population import Batches, Stack
from trainables.streams import Streams
from trainables.tasks import task_of
from trainables.train import evaluate, init_state

SMALL = {  # bench/gpu.py's configs (its BENCHED), on small batches and evaluation sets
    "quickstart.yaml": ["model.n_samples_V=512", "model.n_samples_KQ=512"],  # the one-step model
    "transformer_search.yaml": ["optim.batch_size=16"],  # the trigger-copy transformer
    "regression_diversity_gpu.yaml": ["optim.batch_size=16"],  # the regression transformer
}
EVAL = ["eval.n_id=16", "eval.n_ood=16", "eval.n_examples=1"]


@pytest.mark.parametrize("P", [1, 8])
@pytest.mark.parametrize("name", SMALL)
def test_a_packed_training_steps_estimate_is_within_a_quarter_of_its_measured_peak(name, P):
    cfgs = members(name, [*SMALL[name], *EVAL], P)
    assert estimated_peak(cfgs) == pytest.approx(measured_peak(cfgs), rel=0.25)


def test_an_evaluations_estimate_is_within_a_quarter_of_its_measured_peak():
    """markov_icl's two splits, each one member's forward over 128 sequences whose cache holds every layer's
    attention pattern: the first split's is freed before the second's forward (train.evaluate)."""
    cfg = members("markov_icl.yaml", ["optim.batch_size=2", "eval.n_id=128", "eval.n_ood=128"], 1)[0]
    with LiveBytes() as live:
        state, eval_sets, _ = init_state(cfg)
        Stack([state]).step(Batches([cfg], [state]).draw(2), 0)  # the gradients and Adam's moments, as in a run
        evaluate(state.model, eval_sets, cfg)
    assert memory.needs(cfg)["eval.n_id"] == pytest.approx(live.peak, rel=0.25)


def test_a_population_weighs_every_members_step_but_one_members_evaluation():
    cfg = members("transformer_search.yaml", ["eval.n_id=4096"], 1)[0]
    one, four = memory.needs(cfg), memory.needs(cfg, 4)
    held = four["eval.n_id"] - one["eval.n_id"]  # three more members' parameters, gradients, moments and sets
    assert 0 < held < one["eval.n_id"] / 4 and four["optim.batch_size"] > 3 * one["optim.batch_size"]


@pytest.mark.parametrize("name", ["debug.yaml", "debug_bigram_trigger.yaml", "debug_markov_ngram.yaml",
                                  "debug_mixed_ngram.yaml", "debug_linear_regression.yaml"])
def test_a_built_in_tasks_batch_width_is_its_training_batches(name):
    cfg = members(name, [], 1)[0]
    task = task_of(cfg)
    assert task.batch_sampler([cfg.task], "cpu")(2, Streams([0])).tokens.shape[-1] == task.batch_width(cfg.task)


def test_the_dry_run_names_a_task_whose_batches_are_wider_than_its_batch_width(monkeypatch):
    cfg = members("debug.yaml", [], 1)[0]
    task = task_of(cfg)
    monkeypatch.setattr(type(task), "batch_width", lambda self, cfg: 5)
    with pytest.raises(ConfigError, match=r"batch_sampler\(\): 15 positions, but batch_width\(\) says 5") as refused:
        dry_run.check_batch_sampler(task, cfg, *task.dims(cfg.task))
    assert refused.value.key == "task.name"


def test_live_bytes_counts_a_storage_from_the_operation_that_makes_it_until_it_is_freed():
    before = torch.ones(1000)  # made before the block: not counted, even when freed in it
    with LiveBytes() as live:
        doubled = before * 2  # 4,000 bytes
        view = doubled.view(10, 100)  # the same storage
        doubled.add_(1)  # in place
        del before, doubled, view
        kept = torch.zeros(250, dtype=torch.float64)  # 2,000
    assert (live.peak, live.now) == (4000, 2000) and kept.shape == (250,)
    one = torch.ones(1)
    with LiveBytes(round_to=512) as rounded:
        one + 1  # 4 bytes, in a 512-byte block on a GPU
    assert rounded.peak == 512
