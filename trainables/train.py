"""Training as small functions over a TrainState (in the style of big_vision's `update_fn(state, batch)`), and the
one loop that runs them for every task and model, for one member (`train`) or several packed (`train_members`).

`init_state` builds the model, its phases and the data generators from the config's one seed; a population.Stack
takes one optimizer step for every member on its own batch; `evaluate` measures a model on its fixed evaluation
sets; `checkpoint` and `restore` capture and reinstate everything a run changes, so a resumed run draws the same
batches and ends in the same result. `reference_loop` is the loop for one member on one screen, to read first; a run's
status is `running` until it ends. A run is the model's phases (models/: the one-step model's Algorithm 1 is two
single steps of plain SGD; the transformer one phase of `optim`), every step on a fresh training batch; every
`eval.every` steps (and after the last) the model is measured.
"""
from __future__ import annotations

import copy
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from tqdm import tqdm

from trainables import readouts
from trainables.errors import require
from trainables.io import SUCCEEDED, VERDICT_KNOWN, atomic_write, write_json
from trainables.logger import Logger
from trainables.models import MODELS, build_model
from trainables.optim import Phase
from trainables.population import Batches, Stack, compile_mode, pack_key, stack_batches
from trainables.stopper import NEVER, Stopper
from trainables.tasks import Batch, is_continuous, margin, task_of


@dataclass
class EvalConfig:
    """When and on what the model is measured."""

    every: int = 250  # evaluate every this many training steps, and after the last
    n_id: int = 1024  # in-distribution evaluation sequences (drawn once per run)
    n_ood: int = 1024  # sequences of each other evaluation split, e.g. the OOD one (drawn once per run)
    patience: int = 5  # stop after this many evaluations without a new best ID loss; 0 never stops early
    threshold: float = 0.99  # the task's success metric at or past this counts as generalizing OOD (ood/success = 1)
    n_examples: int = 4  # OOD sequences whose attention is saved in attention.npz

    def validate(self) -> None:
        require(
            *((f"eval.{k}", getattr(self, k) >= 1, "must be >= 1") for k in ("every", "n_id", "n_ood", "n_examples")),
            ("eval.patience", self.patience >= 0, "must be >= 0 (0 never stops early)"),
        )  # eval.threshold is checked against the task's success metric (config.validate)


@dataclass
class EarlyStopping:
    """Stop after `patience` evaluations in a row without a new best ID loss; patience 0 never stops."""

    patience: int
    best: float = math.inf
    stale: int = 0

    def should_stop(self, id_loss: float) -> bool:
        if id_loss < self.best - 1e-6:
            self.best, self.stale = id_loss, 0
        else:
            self.stale += 1
        return self.patience > 0 and self.stale >= self.patience


@dataclass
class TrainState:
    """Everything training changes: what a checkpoint holds, and all `step` needs besides the batch."""

    model: torch.nn.Module
    phases: list[Phase]
    generator: torch.Generator  # draws the training batches of a task without a batch_sampler (a plugin's)
    key: int  # the member's training-data stream (trainables/streams.py): a task with a batch_sampler draws from it
    early_stopping: EarlyStopping
    step: int = 0  # optimizer steps taken
    status: str = "running"  # until it ends: completed (its last step), or early_stopped, diverged, succeeded or
    # verdict_known (its Stopper's, trainables/stopper.py) before it
    diverged_because: str = ""  # what was not finite, and at which step
    stopped_because: str = ""  # why a run that succeeded early or whose verdict was known stopped where it did
    loss_sum: float = 0.0  # training loss x count, hits and count over the scored positions since the last evaluation
    hits: float = 0.0
    count: int = 0
    scores_accuracy: bool = True  # token targets; a continuous task's (real-valued) have a loss only

    @property
    def total_steps(self) -> int:
        return sum(phase.steps for phase in self.phases)

    def position(self, step: int | None = None) -> tuple[int, int]:
        """(the index of the phase, the step within it) of the next step (or of step `step`), counted from 0."""
        done = self.step if step is None else step
        for index, phase in enumerate(self.phases):
            if done < phase.steps:
                return index, done
            done -= phase.steps
        return len(self.phases) - 1, done + self.phases[-1].steps

    def phase_index(self, step: int | None = None) -> int:
        return self.position(step)[0]

    def phase(self) -> Phase:
        return self.phases[self.phase_index()]

    def diverge(self, metric: str, value: float) -> None:
        self.status, self.diverged_because = "diverged", f"{metric} = {value} at step {self.step}"

    def stop(self, status: str, because: str) -> None:
        self.status, self.stopped_because = status, because

    def train_metrics(self) -> dict[str, float]:
        """`train/loss` and `train/acc` (token targets) since the last call, which starts a new window, and
        `train/lr`, the learning rate of the last step (a phase with a schedule)."""
        metrics = {"train/loss": self.loss_sum / self.count}
        if self.scores_accuracy:
            metrics["train/acc"] = self.hits / self.count
        phase, at = self.position(self.step - 1)  # the last step taken
        if (lr := self.phases[phase].lr) is not None:
            metrics["train/lr"] = lr(at)
        self.loss_sum, self.hits, self.count = 0.0, 0.0, 0
        return metrics


@dataclass
class Result:
    metrics: dict[str, float | str]  # final metrics with flat `split/name` keys, plus status, steps, seconds
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # attention, accuracy matrix, W_KQ: attention.npz;
    # empty for a member stopped before its first step (_unmeasured)


def seeded_generators(seed: int) -> tuple[int, int, torch.Generator]:
    """Independent streams for initialisation, training data and evaluation data, all from the one seed: the
    initialisation seed, the training data's key (a Streams key, and a plugin's generator's seed) and the evaluation
    data's generator."""
    seeds = torch.randint(2**62, (3,), generator=torch.Generator().manual_seed(seed))
    init_seed, train_key, eval_seed = seeds.tolist()
    return init_seed, train_key, torch.Generator().manual_seed(eval_seed)


def copy_generator(generator: torch.Generator) -> torch.Generator:
    """A generator in the same state, so mid-run readouts leave the final readout's draws unchanged."""
    twin = torch.Generator()
    twin.set_state(generator.get_state())
    return twin


def init_state(cfg) -> tuple[TrainState, dict[str, Batch], torch.Generator]:
    """The model at initialisation with its phases, the fixed evaluation sets (`eval.n_id` sequences of the `id`
    split, `eval.n_ood` of every other) and the evaluation generator, whose later draws feed the final readout."""
    task, spec = task_of(cfg), MODELS[cfg.model.name]
    init_seed, train_key, eval_generator = seeded_generators(cfg.seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        model = build_model(spec, cfg.model, *task.dims(cfg.task), task.input_width(cfg.task)).to(cfg.device)
    eval_sets = {prefix: task.sample(cfg.task, cfg.eval.n_id if prefix == "id" else cfg.eval.n_ood, eval_generator,
                                     split).to(cfg.device)
                 for prefix, split in task.eval_splits(cfg.task).items()}
    state = TrainState(model, spec.phases(cfg.model, cfg.optim, model), torch.Generator().manual_seed(train_key),
                       train_key, EarlyStopping(cfg.eval.patience),
                       scores_accuracy=not is_continuous(task))
    return state, eval_sets, eval_generator


def step(state: TrainState, batch: Batch) -> float:
    """One optimizer step of one member on its batch (big_vision's update_fn(state, batch)): its training loss (read
    back at once: for tests and benchmarks; train_members steps a population on one population.Stack and reads its
    losses once per evaluation)."""
    stack = Stack([state])
    stack.step(stack_batches([batch]), *state.position())
    alive, _, bad_loss, loss_sum, _, count = stack.collect()[0]
    state.step += alive
    return loss_sum / count if alive else bad_loss


def scored(logits: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(S, N) logits and (S,) targets at the S positions the batch scores (its query, or where loss_mask); a
    continuous task's (S, d_out) predictions and (S, d_out) targets."""
    if batch.query is not None:  # the model ran at the query only: logits (B, N)
        return logits, batch.scored_targets()
    return logits[batch.loss_mask], batch.scored_targets()


def loss_and_accuracy(logits: torch.Tensor, targets: torch.Tensor, prefix: str) -> dict[str, float]:
    """Mean cross-entropy (in float64) and argmax accuracy of (S, N) logits against (S,) token targets; for
    real-valued (S, d_out) targets, the mean squared error (averaged over d_out, as the training loss) alone."""
    if targets.is_floating_point():
        return {f"{prefix}/loss": (logits.double() - targets.double()).square().mean().item()}
    return {
        f"{prefix}/loss": F.cross_entropy(logits.double(), targets).item(),
        f"{prefix}/acc": (logits.argmax(-1) == targets).double().mean().item(),
    }


@torch.no_grad()
def evaluate(model: torch.nn.Module, eval_sets: dict[str, Batch], cfg) -> dict[str, float]:
    """`<split>/loss` and `<split>/acc` on each fixed evaluation set, the task's metrics of it, its probes of the
    model's weights, and `ood/success` (the task's success metric at or past eval.threshold)."""
    task = task_of(cfg)
    model.eval()
    result = {}
    for prefix, batch in eval_sets.items():
        logits, cache = model.run_with_cache(batch.model_input, batch.query)
        result |= loss_and_accuracy(*scored(logits, batch), prefix)
        result |= task.metrics(cfg.task, prefix, batch, logits, cache)
        del logits, cache  # before the next split's forward, not during it (trainables/memory.py weighs one)
    result |= task.weight_metrics(cfg.task, readouts.matrices(model))
    value = result.get(task.success_metric, math.nan)  # present: see dry_run.py
    result["ood/success"] = float(margin(value, cfg.eval.threshold, task.success_above) >= 0)
    return result


def checkpoint(state: TrainState, metrics: dict, seconds: float, history: list[dict] = ()) -> dict:
    """The full training state after an evaluation (its `metrics`; `history`: every evaluation so far, with its step):
    what `restore` and the task's summary of the run need to continue exactly."""
    return {"step": state.step, "status": state.status, "stopped_because": state.stopped_because,
            "metrics": metrics, "history": list(history),
            "final": state.status != "running" or state.step >= state.total_steps,  # nothing left to resume
            "model": copy.deepcopy(state.model.state_dict()),
            "optimizers": [copy.deepcopy(phase.optimizer.state_dict()) for phase in state.phases],
            "train_generator": state.generator.get_state(), "seconds": seconds,
            "stopper": vars(state.early_stopping).copy()}  # its key in checkpoints already written


def restore(state: TrainState, saved: dict) -> None:
    state.model.load_state_dict(saved["model"])
    for phase, optimizer_state in zip(state.phases, saved["optimizers"]):
        phase.optimizer.load_state_dict(copy.deepcopy(optimizer_state))  # never train the checkpoint's own tensors
    state.generator.set_state(saved["train_generator"])
    state.early_stopping = EarlyStopping(**saved["stopper"])
    # A checkpoint from before the running status said "completed" while running.
    state.status = "running" if saved["status"] == "completed" else saved["status"]
    state.step = saved["step"]
    state.stopped_because = saved.get("stopped_because", "")


def train(cfg, logger: Logger | None = None, resume: dict | None = None,
          on_checkpoint: Callable[[dict], None] | None = None) -> Result:
    """Train one model as configured and return its final metrics and arrays. The config must be validated.

    on_checkpoint receives `checkpoint(...)` after every finite evaluation, once it is logged;
    train(cfg, resume=saved) continues from it exactly: same batches, same optimizer moments, same result.
    """
    first = (lambda states: on_checkpoint(states[0])) if on_checkpoint else None
    return train_members([cfg], [logger or Logger()], [resume], on_checkpoint=first)[0]


def reference_loop(cfg) -> dict[str, float | str]:
    """The training loop of one member, written out to be read top to bottom: what train_members does for each member
    of a pack, without what a sweep adds around it (checkpoints, W&B, a stopper, packing, the final readout). Returns
    the last evaluation's metrics with the run's status and steps; tests/unit/test_population.py holds them equal
    to train()'s."""
    state, eval_sets, _ = init_state(cfg)
    stack, batches = Stack([state]), Batches([cfg], [state])  # a population of one: the step a pack takes
    metrics = {}
    while state.status == "running":
        stack.step(batches.draw(state.phase().batch_size, [0]), *state.position())  # a fresh batch, one step
        state.step += 1
        if state.step % cfg.eval.every and state.step < state.total_steps:
            continue  # between evaluations nothing is read back from the device
        alive, bad_step, bad_loss, state.loss_sum, state.hits, state.count = stack.collect()[0]
        if not alive:
            state.step = bad_step
            state.diverge("train/loss", bad_loss)
            break
        metrics = state.train_metrics() | evaluate(state.model, eval_sets, cfg)
        if not math.isfinite(metrics["id/loss"]):
            state.diverge("id/loss", metrics["id/loss"])
        elif state.early_stopping.should_stop(metrics["id/loss"]):
            state.status = "early_stopped"
        elif state.step >= state.total_steps:
            state.status = "completed"
    return metrics | {"status": state.status, "steps": state.step}


@dataclass
class Member:
    """Everything one member's run keeps besides its TrainState, whether it trains alone or packed."""

    index: int  # its position in train_members' lists
    cfg: object
    state: TrainState
    eval_sets: dict[str, Batch]
    eval_generator: torch.Generator  # its later draws feed the final readout
    logger: Logger
    started: float  # perf_counter at which the run (counted from its first attempt) began
    history: list[dict] = field(default_factory=list)  # every evaluation, with its step, for the task's summary
    finite: tuple = (None, 0, None)  # (model state, step, metrics) of the last finite evaluation: the run's result

    @property
    def training(self) -> bool:
        return self.state.status == "running" and self.state.step < self.state.total_steps


def train_members(cfgs: list, loggers: list[Logger], resumes: list[dict | None],
                  on_checkpoint: Callable[[dict[int, dict]], None] | None = None,
                  on_result: Callable[[int, Result], None] | None = None,
                  stopper: Stopper = NEVER) -> list[Result]:
    """The one training loop: members of one shape (population.pack_key) step together on a population.Stack, each
    on its own fresh batch; every `eval.every` steps (and after the last) each is measured, and may stop early or
    diverge, alone. Returns one Result per config, each what training it alone would give.

    stopper (indices: positions in `cfgs`; a sweep's verdict rule, trainables/stopper.py): a member stops as a
    success once it says the member passed, and once it says the member's training is decided by the results of
    the others (here or settled in it before this call) it stops where it is, or is not trained at all (then its
    result measures nothing: _unmeasured).

    resumes[i]: a checkpoint of member i to continue from (members resumed together are at the same step).
    on_checkpoint receives {index: checkpoint} of the members whose evaluation was finite, after each evaluation once
    every member has logged it (a checkpoint is never ahead of a log: a retry drops the lines past the checkpoint it
    resumes from and logs them again); on_result(index, result) is called as each member finishes.
    """
    members = [_start(i, cfg, logger, resume) for i, (cfg, logger, resume) in enumerate(zip(cfgs, loggers, resumes))]
    results: dict[int, Result] = {}

    def finish(member: Member) -> None:
        results[member.index] = _finish(member)
        stopper.settle(member.index, results[member.index].metrics)
        if on_result:
            on_result(member.index, results[member.index])

    for member in members:
        if member.training and (because := stopper.decided(member.index)):
            member.state.stop(VERDICT_KNOWN, because)
        if not member.training:  # resumed after it had stopped, or not needed: nothing is left but its readout
            finish(member)
    training = [m for m in members if m.training]
    if training:
        if len({m.state.step for m in training}) > 1 or len({pack_key(m.cfg) for m in training}) > 1:
            raise ValueError("members trained together need one pack_key and one step")
        _train_together(training, on_checkpoint, finish, stopper)
    return [results[member.index] for member in members]


def _train_together(training: list[Member], on_checkpoint, finish: Callable[[Member], None],
                    stopper: Stopper) -> None:
    """Step the members as one population until each has stopped. Between evaluations a step is the same host work
    whatever the member count (one batch draw, one Stack.step) and reads nothing back; at an evaluation every member
    still going is measured, and may stop early, succeed, be found diverged, or stop because the others decided
    its candidate's verdict."""
    first = training[0]
    stack = Stack([m.state for m in training], compile_mode(first.cfg))
    batches = Batches([m.cfg for m in training], [m.state for m in training])
    active = dict(enumerate(training))  # slot -> member still training, changed at evaluations only
    step, total, every = first.state.step, first.state.total_steps, first.cfg.eval.every
    bar = tqdm(total=total, initial=step, desc=first.cfg.name, unit="step", disable=not sys.stderr.isatty(),
               leave=False)
    while active:
        phase, at = first.state.position(step)
        stack.step(batches.draw(first.state.phases[phase].batch_size, list(active)), phase, at)
        step += 1
        bar.update()
        if step % every == 0 or step >= total:
            _evaluate(stack, active, step, on_checkpoint, stopper)
            for decide in (False, True):  # those that ended first: their results may decide the others' verdicts
                for slot, member in list(active.items()):
                    if decide and member.training and (because := stopper.decided(member.index)):
                        member.state.stop(VERDICT_KNOWN, because)  # at this evaluation: its last one is its result
                    if not member.training:
                        stack.stop(slot)
                        del active[slot]
                        finish(member)
            if active and len(active) <= len(stack.states) // 2:
                stack, batches, active = _shrunk(stack, active, first.cfg)
    bar.close()


def _shrunk(stack: Stack, active: dict[int, Member], cfg) -> tuple[Stack, Batches, dict[int, Member]]:
    """A stack of the members still training, for when at most half of its slots still train (a stopped member's
    slot is masked, yet computed): each gets its slice of the optimizer state into its own optimizers, and its
    parameters are in its own module since this evaluation. Each goes on exactly as before: its batches come from
    its own stream at its step, whoever else is packed with it."""
    members = list(active.values())
    for slot, member in active.items():
        for phase, optimizer_state in zip(member.state.phases, stack.optimizer_states(slot)):
            phase.optimizer.load_state_dict(optimizer_state)
    states = [member.state for member in members]
    return Stack(states, compile_mode(cfg)), Batches([m.cfg for m in members], states), dict(enumerate(members))


def _start(index: int, cfg, logger: Logger, resume: dict | None) -> Member:
    state, eval_sets, eval_generator = init_state(cfg)
    member = Member(index, cfg, state, eval_sets, eval_generator, logger,
                    started=time.perf_counter() - (resume["seconds"] if resume else 0.0))
    if resume:
        restore(state, resume)
        member.history = list(resume.get("history", []))
    member.finite = (copy.deepcopy(state.model.state_dict()), state.step, resume["metrics"] if resume else None)
    return member


def _evaluate(stack: Stack, active: dict[int, Member], step: int, on_checkpoint, stopper: Stopper) -> None:
    """At an evaluation step: read the stack's sums once; a member whose loss went non-finite since is diverged at
    the step it did; measure every other one, keep its last finite evaluation, decide early stopping, early success
    and divergence, log it, then checkpoint it (with its slice of the optimizers) when finite."""
    collected = stack.collect()
    measured = {}
    for slot, m in active.items():
        alive, bad_step, bad_loss, m.state.loss_sum, m.state.hits, m.state.count = collected[slot]
        m.state.step = step if alive else bad_step
        if alive:
            measured[slot] = m
        else:
            m.state.diverge("train/loss", bad_loss)
    stack.unstack(list(measured))
    latest, states = {}, {}
    for slot, m in measured.items():
        cfg, state = m.cfg, m.state
        latest[slot] = (state.train_metrics() | evaluate(state.model, m.eval_sets, cfg)
                        | task_of(cfg).diversity(cfg.task))
        m.history.append({"step": state.step} | latest[slot])
        if math.isfinite(latest[slot]["id/loss"]):
            m.finite = (copy.deepcopy(state.model.state_dict()), state.step, latest[slot])
            if state.early_stopping.should_stop(latest[slot]["id/loss"]):
                state.status = "early_stopped"
            elif (because := stopper.passed(m.index, m.history)) and m.training:
                state.stop(SUCCEEDED, because)
            states[m.index] = checkpoint(state, latest[slot], time.perf_counter() - m.started, m.history)
            states[m.index]["optimizers"] = stack.optimizer_states(slot)
        else:
            state.diverge("id/loss", latest[slot]["id/loss"])
    for slot, m in measured.items():
        m.logger.log(latest[slot], m.state.step)
        if _media_due(m):
            arrays = readouts.final(m.cfg, m.state.model, m.eval_sets["ood"], copy_generator(m.eval_generator))[0]
            m.logger.log_media(arrays, m.state.step)
    if states and on_checkpoint:
        on_checkpoint(states)


def _media_due(member: Member) -> bool:
    """Mid-run media every `logging.media_every` evaluations of a run still going (the end logs its own)."""
    every = member.cfg.logging.media_every
    return bool(every) and (member.state.step // member.cfg.eval.every) % every == 0 and member.training


def _finish(member: Member) -> Result:
    """The member's final metrics and readout; a diverged run's are those of its last finite evaluation."""
    cfg, state = member.cfg, member.state
    if state.status == VERDICT_KNOWN and state.step == 0:
        return _unmeasured(member)
    if state.status == "running":  # it took its last step
        state.status = "completed"
    model_state, finite_step, finite_metrics = member.finite
    if state.status == "diverged":
        state.model.load_state_dict(model_state)
    task = task_of(cfg)
    no_window = {"train/loss": math.nan} | ({"train/acc": math.nan} if state.scores_accuracy else {})
    final = dict(finite_metrics or no_window
                 | evaluate(state.model, member.eval_sets, cfg) | task.diversity(cfg.task))
    arrays, readout_metrics = readouts.final(cfg, state.model, member.eval_sets["ood"], member.eval_generator)
    final |= readout_metrics | task.summary(cfg.task, member.history)
    member.logger.log_media(arrays, finite_step)
    final |= {"status": state.status, "steps": finite_step, "seconds": time.perf_counter() - member.started}
    if state.stopped_because:
        final["stopped_because"] = state.stopped_because
    if state.status == "diverged":  # whatever its last finite evaluation said, a diverged run does not generalize
        final |= {"ood/success": 0.0, "diverged_because": state.diverged_because}
    return Result(final, arrays)


def _unmeasured(member: Member) -> Result:
    """The result of a member stopped before its first step because its candidate's verdict was known. Its model was
    never trained, so measuring it would read as a trained seed that failed: it holds no metric and no readout, only
    why it stopped and the `data/*` measures its config fixes before any training (the diversity axis of tables)."""
    cfg, state = member.cfg, member.state
    return Result(task_of(cfg).diversity(cfg.task) | {
        "status": state.status, "steps": 0, "seconds": time.perf_counter() - member.started,
        "stopped_because": state.stopped_because})


def save(result: Result, out_dir: str | Path) -> None:
    """Write result.json and, when the member was measured, attention.npz; each appears whole or not at all."""
    out_dir = Path(out_dir)
    write_json(out_dir / "result.json", {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                                         for k, v in result.metrics.items()})
    if result.arrays:
        atomic_write(out_dir / "attention.npz", lambda f: np.savez_compressed(f, **result.arrays))
