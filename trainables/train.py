"""The one training loop (`train_members`; `train` is a pack of one), written to be read top to bottom, and the
small functions of a TrainState it runs, for every task and model.

A run is the model's phases (models/: the one-step model's Algorithm 1 is two single steps of plain SGD; the
transformer one phase of `optim`), every step on a fresh training batch, taken for every member of a pack at once by
a population.Stack; every `eval.every` steps (and after the last) the model is measured. `checkpoint` and `restore`
capture everything a run changes, so a resumed run draws the same batches and ends in the same result.
tests/unit/test_oracle.py holds the loop to the same training written out in plain PyTorch.
"""
from __future__ import annotations

import copy
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, NamedTuple

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
from trainables.population import Batches, Collected, Stack, compile_mode, pack_key
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
    """Everything training changes: what a checkpoint holds."""

    model: torch.nn.Module
    phases: list[Phase]
    key: int  # the member's training-data stream (trainables/streams.py), drawn from at its step
    early_stopping: EarlyStopping
    step: int = 0  # optimizer steps taken
    status: str = "running"  # until `decide` says how the run ended
    because: str = ""  # why it diverged (what was not finite, at which step), or why its Stopper stopped it
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

    def phase(self) -> Phase:
        return self.phases[self.position()[0]]


@dataclass
class Result:
    metrics: dict[str, float | str]  # final metrics with flat `split/name` keys, plus status, steps, seconds
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # attention.npz's; none if stopped before a step


def init_state(cfg) -> tuple[TrainState, dict[str, Batch], torch.Generator]:
    """The model at initialisation with its phases, the fixed evaluation sets (`eval.n_id` sequences of the `id`
    split, `eval.n_ood` of every other) and the evaluation generator, whose later draws feed the final readout."""
    task, spec = task_of(cfg), MODELS[cfg.model.name]
    # Independent streams for initialisation, training data (a Streams key) and evaluation data, all from the one seed
    seeds = torch.randint(2**62, (3,), generator=torch.Generator().manual_seed(cfg.seed))
    init_seed, train_key, eval_seed = seeds.tolist()
    eval_generator = torch.Generator().manual_seed(eval_seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(init_seed)
        model = build_model(spec, cfg.model, *task.dims(cfg.task), task.input_width(cfg.task)).to(cfg.device)
    eval_sets = {prefix: task.sample(cfg.task, cfg.eval.n_id if prefix == "id" else cfg.eval.n_ood, eval_generator,
                                     split).to(cfg.device)
                 for prefix, split in task.eval_splits(cfg.task).items()}
    state = TrainState(model, spec.phases(cfg.model, cfg.optim, model), train_key, EarlyStopping(cfg.eval.patience),
                       scores_accuracy=not is_continuous(task))
    return state, eval_sets, eval_generator


def scored(logits: torch.Tensor, batch: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """(S, N) logits and (S,) targets at the S positions the batch scores (its query, or where loss_mask); a
    continuous task's (S, d_out) predictions and (S, d_out) targets."""
    at_scored = logits if batch.query is not None else logits[batch.loss_mask]  # at the query only: logits (B, N)
    return at_scored, batch.scored_targets()


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
    return {"step": state.step, "status": state.status, "stopped_because": state.because,
            "metrics": metrics, "history": list(history),
            "final": state.status != "running",  # nothing left to resume
            "model": copy.deepcopy(state.model.state_dict()),
            "optimizers": [copy.deepcopy(phase.optimizer.state_dict()) for phase in state.phases],
            "seconds": seconds,
            "stopper": vars(state.early_stopping).copy()}  # its key in checkpoints already written


def restore(state: TrainState, saved: dict) -> None:
    state.model.load_state_dict(saved["model"])
    for phase, optimizer_state in zip(state.phases, saved["optimizers"]):
        phase.optimizer.load_state_dict(copy.deepcopy(optimizer_state))  # never train the checkpoint's own tensors
    state.early_stopping = EarlyStopping(**saved["stopper"])
    # `decide` tells "completed" from the step: checkpoints from before the running status said it while running.
    state.status = "running" if saved["status"] == "completed" else saved["status"]
    state.step = saved["step"]
    state.because = saved.get("stopped_because", "")


def train(cfg, logger: Logger | None = None, resume: dict | None = None,
          on_checkpoint: Callable[[dict], None] | None = None) -> Result:
    """Train one model as configured and return its final metrics and arrays. The config must be validated.

    on_checkpoint receives `checkpoint(...)` after every finite evaluation, once it is logged;
    train(cfg, resume=saved) continues from it exactly: same batches, same optimizer moments, same result.
    """
    first = (lambda states: on_checkpoint(states[0])) if on_checkpoint else None
    return train_members([cfg], [logger or Logger()], [resume], on_checkpoint=first)[0]


class Evaluation(NamedTuple):
    """A member's last finite evaluation: its result, with the model restored to it should the run diverge later."""

    model: dict  # the model's state_dict then
    step: int
    metrics: dict | None  # None before the first evaluation


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
    last_finite: Evaluation
    history: list[dict] = field(default_factory=list)  # every evaluation, with its step, for the task's summary
    result: Result | None = None  # once it has ended

    @property
    def running(self) -> bool:
        return self.state.status == "running"


def train_members(cfgs: list, loggers: list[Logger], resumes: list[dict | None],
                  on_checkpoint: Callable[[dict[int, dict]], None] | None = None,
                  on_result: Callable[[int, Result], None] | None = None,
                  stopper: Stopper = NEVER) -> list[Result]:
    """The one training loop: members of one shape (population.pack_key) step together on a population.Stack, each
    on its own fresh batch; every `eval.every` steps (and after the last) each is measured, and may stop early,
    diverge or be stopped by `stopper` (indices: positions in `cfgs`; a sweep's verdict rule: decide), alone, or not
    be trained at all (_result). Returns one Result per config, each what training it alone would give.

    resumes[i]: a checkpoint of member i to continue from (members resumed together are at the same step).
    on_checkpoint receives {index: checkpoint} of the members whose evaluation was finite, after each evaluation once
    every member has logged it (a checkpoint is never ahead of a log: a retry drops the lines past the checkpoint it
    resumes from and logs them again); on_result(index, result) is called as each member finishes.
    """
    members = [_start(i, cfg, logger, resume) for i, (cfg, logger, resume) in enumerate(zip(cfgs, loggers, resumes))]
    for member in members:  # resumed after it ended, or its candidate's verdict known before it starts
        decide(member, stopper)
        if not member.running:
            _finish(member, stopper, on_result)
    training = [member for member in members if member.running]
    if not training:
        return [member.result for member in members]
    stack, batches, active = _stacked(training)  # active: slot -> member still training
    lead = training[0].state  # its phases and schedule are every member's (pack_key)
    step, every = lead.step, training[0].cfg.eval.every
    bar = tqdm(total=lead.total_steps, initial=step, desc=training[0].cfg.name, unit="step", leave=False,
               disable=not sys.stderr.isatty())
    while active:
        phase, at = lead.position(step)
        stack.step(batches.draw(lead.phases[phase].batch_size), phase, at)  # every member, one step
        step += 1
        bar.update()
        if step % every and step < lead.total_steps:
            continue  # between evaluations nothing is read back from the device
        collected = stack.collect()  # per slot: its sums since the last evaluation, the one read back
        stack.unstack([slot for slot in active if collected[slot].alive])  # into their own modules, to measure
        saved = {}
        for slot, member in active.items():
            metrics = _measure(member, collected[slot], step)  # None: a training loss was not finite
            decide(member, stopper, collected[slot], metrics)
            if metrics is not None:
                _log(member, metrics)
            if member.state.status != "diverged":  # a finite evaluation: the member's result from now on
                member.last_finite = Evaluation(copy.deepcopy(member.state.model.state_dict()), step, metrics)
                saved[member.index] = checkpoint(member.state, metrics, time.perf_counter() - member.started,
                                                 member.history) | {"optimizers": stack.optimizer_states(slot)}
        if saved and on_checkpoint:
            on_checkpoint(saved)
        for ask_stopper in (False, True):  # those that ended on their own first: their results may decide the others'
            for slot, member in list(active.items()):
                if ask_stopper:
                    decide(member, stopper)
                if not member.running:
                    stack.stop(slot)
                    del active[slot]
                    _finish(member, stopper, on_result)
        if active and len(active) <= len(stack.states) // 2:  # a stopped member's slot is masked, yet computed
            stack, batches, active = _shrunk(stack, active)
    bar.close()
    return [member.result for member in members]


def decide(member: Member, stopper: Stopper, collected: Collected | None = None, metrics: dict | None = None) -> None:
    """The one place a member's status changes: from `running` to the first status below that holds, with why. At
    an evaluation (`collected`: its training since the last; `metrics`: this one, None when a loss was not finite) it
    may diverge (its result is then its last finite evaluation), stop early, succeed or complete; between evaluations
    (before its first step, and once those that ended on their own have settled, so that their results count) it may
    complete (resumed at its last step) or stop because the others' results decided its candidate's verdict."""
    state = member.state
    if state.status != "running":
        return
    last = state.step >= state.total_steps
    id_loss = metrics["id/loss"] if metrics is not None else math.nan
    if collected is not None and not collected.alive:
        status, because = "diverged", f"train/loss = {collected.bad_loss} at step {collected.bad_step}"
    elif metrics is not None and not math.isfinite(id_loss):
        status, because = "diverged", f"id/loss = {id_loss} at step {state.step}"
    elif metrics is not None and state.early_stopping.should_stop(id_loss):
        status, because = "early_stopped", ""
    elif metrics is not None and (why := stopper.passed(member.index, member.history)) and not last:
        status, because = SUCCEEDED, why
    elif last:
        status, because = "completed", ""
    elif collected is None and (why := stopper.decided(member.index)):
        status, because = VERDICT_KNOWN, why
    else:
        return
    state.status, state.because = status, because


def _start(index: int, cfg, logger: Logger, resume: dict | None) -> Member:
    state, eval_sets, eval_generator = init_state(cfg)
    if resume:
        restore(state, resume)
    return Member(index, cfg, state, eval_sets, eval_generator, logger,
                  started=time.perf_counter() - (resume["seconds"] if resume else 0.0),
                  last_finite=Evaluation(copy.deepcopy(state.model.state_dict()), state.step,
                                         resume["metrics"] if resume else None),
                  history=list(resume.get("history", [])) if resume else [])


def _stacked(members: list[Member]) -> tuple[Stack, Batches, dict[int, Member]]:
    """The members as one Stack, their Batches, and slot -> member."""
    if len({m.state.step for m in members}) > 1 or len({pack_key(m.cfg) for m in members}) > 1:
        raise ValueError("members trained together need one pack_key and one step")
    states = [member.state for member in members]
    stack, batches = Stack(states, compile_mode(members[0].cfg)), Batches([m.cfg for m in members], states)
    return stack, batches, dict(enumerate(members))


def _shrunk(stack: Stack, active: dict[int, Member]) -> tuple[Stack, Batches, dict[int, Member]]:
    """A stack of the members still training, for when at most half of its slots still train: each takes its slice of
    the optimizer moments into its own optimizers (its parameters are in its own module since this evaluation), and
    goes on exactly as before: its batches come from its own stream at its step, whoever else is packed with it."""
    for slot, member in active.items():
        for phase, optimizer_state in zip(member.state.phases, stack.optimizer_states(slot)):
            phase.optimizer.load_state_dict(optimizer_state)
    return _stacked(list(active.values()))


def _measure(member: Member, collected: Collected, step: int) -> dict | None:
    """The member's metrics at this evaluation (its training since the last, its evaluation sets, its data), added to
    its history; None when a training loss was not finite since the last (its step is then that loss's)."""
    state, cfg = member.state, member.cfg
    state.step = step if collected.alive else collected.bad_step
    if not collected.alive:
        return None
    metrics = {"train/loss": collected.loss_sum / collected.count}
    if state.scores_accuracy:
        metrics["train/acc"] = collected.hits / collected.count
    phase, at = state.position(step - 1)  # the last step taken
    if (lr := state.phases[phase].lr) is not None:
        metrics["train/lr"] = lr(at)
    metrics |= evaluate(state.model, member.eval_sets, cfg) | task_of(cfg).diversity(cfg.task)
    member.history.append({"step": step} | metrics)
    return metrics


def _log(member: Member, metrics: dict) -> None:
    """The evaluation's metrics, and every `logging.media_every` evaluations of a run still going its media (the end
    logs its own)."""
    cfg, state = member.cfg, member.state
    member.logger.log(metrics, state.step)
    every = cfg.logging.media_every
    if every and (state.step // cfg.eval.every) % every == 0 and member.running:
        twin = torch.Generator().set_state(member.eval_generator.get_state())  # the final readout's draws unchanged
        arrays = readouts.final(cfg, state.model, member.eval_sets["ood"], twin)[0]
        member.logger.log_media(arrays, state.step)


def _finish(member: Member, stopper: Stopper, on_result: Callable[[int, Result], None] | None) -> None:
    """The member's Result, settled with the stopper (it may decide the others' verdicts) and handed to on_result."""
    member.result = _result(member)
    stopper.settle(member.index, member.result.metrics)
    if on_result:
        on_result(member.index, member.result)


def _result(member: Member) -> Result:
    """The member's final metrics and readout: its last finite evaluation's (a diverged run's model is restored to
    it), or, never evaluated, its model's now. A member stopped before its first step because its candidate's verdict
    was known was never trained, so measuring it would read as a trained seed that failed: its result holds no metric
    and no readout, only why it stopped and the `data/*` measures its config fixes (the diversity axis of tables)."""
    cfg, state, task, last = member.cfg, member.state, task_of(member.cfg), member.last_finite
    if state.status == VERDICT_KNOWN and state.step == 0:
        facts = {"status": state.status, "steps": 0, "seconds": time.perf_counter() - member.started}
        return Result(task.diversity(cfg.task) | facts | {"stopped_because": state.because})
    if state.status == "diverged":
        state.model.load_state_dict(last.model)
    no_window = {"train/loss": math.nan} | ({"train/acc": math.nan} if state.scores_accuracy else {})
    final = (dict(last.metrics) if last.metrics else
             no_window | evaluate(state.model, member.eval_sets, cfg) | task.diversity(cfg.task))
    arrays, readout_metrics = readouts.final(cfg, state.model, member.eval_sets["ood"], member.eval_generator)
    member.logger.log_media(arrays, last.step)
    final |= readout_metrics | task.summary(cfg.task, member.history) | {
        "status": state.status, "steps": last.step, "seconds": time.perf_counter() - member.started}
    if state.status == "diverged":  # whatever its last finite evaluation said, a diverged run does not generalize
        final |= {"ood/success": 0.0, "diverged_because": state.because}
    elif state.because:
        final["stopped_because"] = state.because
    return Result(final, arrays)


def save(result: Result, out_dir: str | Path) -> None:
    """Write result.json and, when the member was measured, attention.npz; each appears whole or not at all."""
    out_dir = Path(out_dir)
    write_json(out_dir / "result.json", {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                                         for k, v in result.metrics.items()})
    if result.arrays:
        atomic_write(out_dir / "attention.npz", lambda f: np.savez_compressed(f, **result.arrays))
