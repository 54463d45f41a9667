"""The packed step at a GPU's pace (issue gpu-ready), counted on the CPU, where no GPU can time it: per training step
of a population, the torch operations dispatched (each at least one kernel launch on a GPU) do not grow with the
member count, nothing is read back to the host between evaluations, shapes do not change from step to step, and the
step traces as one graph (what a CUDA graph captures). A per-member loop or a per-step .item() coming back fails here.
"""
import pytest
import torch

from tests.conftest import CONFIGS
from trainables import config
from trainables.logger import Logger
from trainables.op_count import OpCounter
from trainables.population import Batches, Stack
from trainables.train import init_state, train_members

# Per task and model: its config, the per-member overrides the members cycle through (each varies the task's knob,
# so one population draws from several distributions at once), and overrides every member takes.
CASES = {
    "trigger_copy-transformer": ("debug.yaml", ["task.lengths.high=6", "task.lengths.high=3", "task.n_triggers=1"]),
    # The one-step model's phases draw 8192 sequences a member and its evaluation sets hold thousands: fewer dispatch
    # the same operations per step in a fraction of the time.
    "trigger_copy-one_step": ("paper_theory.yaml", ["task.lengths.low=3", "task.lengths.low=9", "task.n_triggers=8"],
                              ["model.n_samples_V=1024", "model.n_samples_KQ=1024", "eval.n_id=64", "eval.n_ood=64"]),
    "bigram_trigger": ("debug_bigram_trigger.yaml", ["task.n_train_outputs=40", "task.n_train_outputs=10"]),
    "markov_ngram": ("debug_markov_ngram.yaml", ["task.pool_size=8", "task.pool_size=2", "task.pool_size=32"]),
    "mixed_ngram": ("debug_mixed_ngram.yaml", ["task.alpha=0.5", "task.alpha=0.1", "task.alpha=0.9"]),
    "linear_regression": ("debug_linear_regression.yaml", ["task.n_tasks=64", "task.n_tasks=1", "task.noise=0.0"]),
}


def population(case: str, members: int, *extra: str) -> list:
    name, knobs, *fixed = CASES[case]
    extra = (*(fixed[0] if fixed else ()), *extra)
    return [config.load(CONFIGS / name, [f"seed={i}", knobs[i % len(knobs)], *extra]) for i in range(members)]


def counted_step(cfgs: list) -> tuple[OpCounter, Batches]:
    """What the training loop does per step between evaluations (draw every member's batch, one Stack.step), counted
    on its second step (the first creates the optimizer's state)."""
    states = [init_state(cfg)[0] for cfg in cfgs]
    stack, batches = Stack(states), Batches(cfgs, states)
    n = states[0].phases[0].batch_size
    stack.step(batches.draw(n), 0)
    with OpCounter() as counter:
        stack.step(batches.draw(n), 0)
    return counter, batches


@pytest.mark.parametrize("case", CASES)
def test_a_step_dispatches_the_same_operations_for_64_members_as_for_8_and_reads_nothing_back(case):
    (eight, batches), (sixty_four, _) = counted_step(population(case, 8)), counted_step(population(case, 64))
    assert batches.sampler is not None  # every built-in task draws a population's batches at once
    assert sixty_four.total == eight.total, (sixty_four.ops - eight.ops) or (eight.ops - sixty_four.ops)
    assert not eight.syncs and not sixty_four.syncs


def test_a_scheduled_clipped_step_also_dispatches_the_same_operations_whatever_the_members_and_reads_nothing_back():
    """The learning rate is a host number set before the step; clipping's per-member norms and scales stay on the
    device: a few operations per parameter tensor, none per member."""
    scheduled = ("optim.schedule=cosine", "optim.warmup_steps=10", "optim.clip_norm=0.5")
    (eight, _), (sixty_four, _) = (counted_step(population("trigger_copy-transformer", m, *scheduled)) for m in (8, 64))
    plain, _ = counted_step(population("trigger_copy-transformer", 8))
    assert sixty_four.total == eight.total > plain.total  # clipping adds its operations, the same for any M
    assert not eight.syncs and not sixty_four.syncs


@pytest.mark.parametrize("case", CASES)
def test_batches_keep_their_shapes_and_the_draw_and_step_trace_as_one_graph(case):
    """fullgraph=True fails on any graph break: data-dependent Python control flow, a value read back, an operation
    dynamo cannot trace. aot_eager traces the backward too; neither compiles kernels, so this stays cheap. From a clean
    slate: what dynamo kept from the cases before made a case's trace three times slower (11.4 s against 3.6 s)."""
    torch._dynamo.reset()
    cfgs = population(case, 3)
    states = [init_state(cfg)[0] for cfg in cfgs]
    stack, batches = Stack(states), Batches(cfgs, states)
    n = states[0].phases[0].batch_size
    shapes = {tuple(batches.draw(n).model_input.shape) for _ in range(4)}
    assert len(shapes) == 1
    batch = torch.compile(batches.sampler, fullgraph=True, backend="eager")(n, batches.streams)
    assert batch.model_input.shape == next(iter(shapes))
    losses, _, _ = torch.compile(stack._forward, fullgraph=True, backend="aot_eager")(batch)
    losses.sum().backward()
    assert all(p.grad is not None for p in stack.params.values() if p.requires_grad)


def run_counted(cfgs: list) -> OpCounter:
    with OpCounter() as counter:
        train_members(cfgs, [Logger() for _ in cfgs], [None] * len(cfgs))
    return counter


def test_the_training_loop_reads_back_once_per_evaluation_and_adds_nothing_per_step():
    """The loop as it runs: twice the steps with the same evaluations read back just as often, and the steps added
    dispatch exactly what counted_step counts, so the loop adds no torch work of its own per step."""
    def run(steps: int, every: int) -> OpCounter:
        return run_counted(population("trigger_copy-transformer", 3, f"optim.max_steps={steps}",
                                      f"eval.every={every}", "eval.patience=0", "eval.n_id=32", "eval.n_ood=32"))
    short, long, evaluated = run(4, 4), run(8, 8), run(8, 4)
    assert sum(long.syncs.values()) == sum(short.syncs.values())
    assert sum(evaluated.syncs.values()) > sum(long.syncs.values())  # an evaluation does read back: not vacuous
    per_step = counted_step(population("trigger_copy-transformer", 3))[0].total
    assert long.total - short.total == 4 * per_step
