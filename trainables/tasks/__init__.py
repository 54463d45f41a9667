"""The Task protocol and the TASKS registry: everything task-specific lives behind it. Public API for plugins
(docs/EXTENDING.md): Task, Batch, PAD_LABEL, and TaskView, Panel, PanelSection (from view.py) keep these import paths.

A task is an instance of a Task subclass: a built-in is one folder under trainables/tasks/ whose package exposes
TASK; a plugin's lives in its own package, found by entry point or module path (trainables/registry.py). Training,
the sweeps, W&B and the reports know tasks only through this interface (how a task is shown is its view's, view.py);
`task.name` in a config picks one.
"""
from __future__ import annotations

import functools
import importlib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch

from trainables.registry import Registry
from trainables.streams import Draws, GeneratorDraws
from trainables.tasks.view import Panel, PanelSection, TaskView, view_of  # noqa: F401 (public)


PAD_LABEL = -1  # the per-position label of padding, in every task
# Metric names say what their values can be: accuracies, rates, shares and success flags lie in [0, 1] (the last
# part of the name is or ends in acc, rate, share or success, or starts with acc), losses and mean squared errors
# in [0, inf).
_UNIT_INTERVAL = re.compile(r"(^|_)(acc|rate|share|success)$|^acc_")
_LOSS = re.compile(r"(^|_)(loss|mse)$")


def metric_range(name: str) -> tuple[float, float]:
    """The values metric `name` can take, by the naming rule above; (-inf, inf) for a metric it does not cover."""
    leaf = name.rsplit("/", 1)[-1]
    if _UNIT_INTERVAL.search(leaf):
        return 0.0, 1.0
    return (0.0, math.inf) if _LOSS.search(leaf) else (-math.inf, math.inf)


def threshold_problem(metric: str, threshold: float, above: bool) -> str | None:
    """Why `threshold` cannot separate successes from failures of `metric` (None when it can): outside the metric's
    range, or at the end every value passes (success when >= threshold if `above`, else <=)."""
    low, high = metric_range(metric)
    if not math.isfinite(threshold):
        return f"must be a finite number, got {threshold}"
    if not (low < threshold <= high if above else low <= threshold < high):
        return (f"{metric} lies in [{low:g}, {high:g}]: success at {'>=' if above else '<='} {threshold:g} is "
                f"{'never' if (threshold > high if above else threshold < low) else 'always'} reached")
    return None


def margin(value, threshold: float, above: bool) -> float:
    """How far a value lies on the successful side of the threshold (>= 0: it succeeds; -inf: missing or NaN)."""
    if not isinstance(value, (int, float)) or math.isnan(value):
        return -math.inf
    return value - threshold if above else threshold - value


@dataclass
class Batch:
    """Sequences of one task, right-padded to one width; the loss and accuracy read `targets` where `loss_mask`.

    A token task's model reads `tokens` and predicts `targets`, token ids, through cross-entropy. A continuous task
    (is_continuous) sets `inputs`, which its model reads instead, and real-valued `targets`, scored by mean squared
    error; its `tokens` then say what each position is (the task's own code, e.g. 0 at an x and 1 at a y)."""

    tokens: torch.Tensor  # (B, T) long
    targets: torch.Tensor  # (B, T) long, or (B, T, d_out) float: what each position should predict (where loss_mask)
    loss_mask: torch.Tensor  # (B, T) bool: the positions the loss and the accuracy score
    labels: torch.Tensor  # (B, T) long: the task's per-position labels; its metrics slice by them; PAD_LABEL = padding
    query: torch.Tensor | None = None  # (B,): set when exactly one position per sequence is scored, its index;
    # models then run their last layer and unembedding there only
    info: dict[str, torch.Tensor] = field(default_factory=dict)  # per-sequence facts, (B,) each (trigger copy: l1, l2)
    inputs: torch.Tensor | None = None  # (B, T, d_in) float: a continuous task's inputs, read instead of tokens

    @property
    def model_input(self) -> torch.Tensor:
        """What the model reads: tokens (B, T), or a continuous task's inputs (B, T, d_in)."""
        return self.tokens if self.inputs is None else self.inputs

    def _map(self, per_position, whole=lambda t: t) -> "Batch":
        """The batch with `per_position(t, fill)` applied to each (..., T, ...) tensor (fill: its padding value) and
        `whole` to the query and info."""
        apply = lambda f, t, *args: None if t is None else f(t, *args)
        return Batch(per_position(self.tokens, 0), per_position(self.targets, 0), per_position(self.loss_mask, False),
                     per_position(self.labels, PAD_LABEL), apply(whole, self.query),
                     {k: whole(v) for k, v in self.info.items()}, apply(per_position, self.inputs, 0))

    def to(self, device) -> "Batch":
        move = lambda t, *_: t.to(device)
        return self._map(move, move)

    def padded(self, width: int) -> "Batch":
        """The same sequences right-padded to `width` positions (token 0, label PAD_LABEL, not scored), so batches
        of members of one shape stack."""
        T = self.tokens.shape[-1]
        if width < T:
            raise ValueError(f"cannot pad to {width} positions a batch of {T}")
        time_dim = self.tokens.dim() - 1  # positions are the tokens' last dimension, and the same one of the others

        def pad(t: torch.Tensor, value) -> torch.Tensor:
            after = t.dim() - 1 - time_dim  # the dimensions after the positions (d_in, d_out) are not padded
            return torch.nn.functional.pad(t, (0, 0) * after + (0, width - T), value=value)

        return self._map(pad)

    def cropped(self, width: int) -> "Batch":
        """The first `width` positions (cutting only padding is the caller's promise)."""
        time_dim = self.tokens.dim() - 1
        return self._map(lambda t, _: t.narrow(time_dim, 0, width))

    def member(self, p: int) -> "Batch":
        """Member p's batch out of a population's (every tensor with a leading member dimension)."""
        pick = lambda t, *_: t[p]
        return self._map(pick, pick)

    def scored_targets(self) -> torch.Tensor:
        """(S,) or (S, d_out) the targets the loss reads, in the order of the model's scored outputs (train.scored)."""
        if self.query is not None:
            return self.targets[torch.arange(len(self.query), device=self.query.device), self.query]
        return self.targets[self.loss_mask]


def stack_batches(batches: list[Batch]) -> Batch:
    """Members' batches padded to the widest and stacked along a leading member dimension (their info left out)."""
    width = max(b.tokens.shape[1] for b in batches)
    padded = [b.padded(width) for b in batches]
    stack = lambda name: None if getattr(padded[0], name) is None else torch.stack([getattr(b, name) for b in padded])
    return Batch(stack("tokens"), stack("targets"), stack("loss_mask"), stack("labels"), stack("query"),
                 inputs=stack("inputs"))


class Task:
    """What a task must say about itself: the public API of a task plugin (docs/EXTENDING.md, whose table lists
    what a plugin must define and what it may).

    Required: `name`, `config` (a dataclass with a `name` field: the `task:` section's schema) and the methods
    `validate`, `dims`, `batch_sampler` (the one sampling hook: `sample` is derived from it) and `eval_splits` (with an
    `id` and an `ood` split). Every other attribute and method has a default that works. A plugin written before
    views, or before batch_sampler took a split, is adapted once where it is registered (legacy.py).

    Keys in ConfigErrors are full dotted keys (`task.n_triggers`), so every message names what a user typed.
    """

    name: str
    config: type  # the task's config dataclass (the `task:` section)
    success_metric: str = "ood/acc"  # what "generalizes OOD" is read from, against eval.threshold
    success_above: bool = True  # success when the metric is >= the threshold (False: <=, e.g. a loss gap)
    knobs: tuple[str, ...] = ()  # config keys that set the training data's diversity (a search's knob is one of them)
    member_fields: tuple[str, ...] = ()  # task config fields the members of one pack may differ in (batch_sampler
    # draws them at once; members that differ in any other field are packed apart: population.pack_key)
    view: type[TaskView] = TaskView  # how the task is shown: a TaskView subclass in its own folder (view.py)
    small_is_diverse: bool = False  # whether a smaller diversity_axis means more diverse (a ratio: yes; a count: no)

    # A default derived from the knobs; a task overrides it with a plain class attribute.
    @property
    def diversity_axis(self) -> str:
        """The data/* measure that orders training data by diversity (science, not display: a search states K*_q in
        it, reports plot results against it): by default the first knob's own value."""
        return self._knob_axis()

    def _knob_axis(self) -> str:
        return f"data/{self.knobs[0].rsplit('.', 1)[-1]}" if self.knobs else ""

    # --- config -------------------------------------------------------------------------------------------------
    def resolve(self, cfg) -> None:
        """Fill derived fields in place before validation (e.g. a width that sets an upper bound)."""

    def validate(self, cfg) -> None:
        """Raise ConfigError for a config that cannot run or would silently mean something else."""
        raise NotImplementedError

    def dims(self, cfg) -> tuple[int, int]:
        """(d_vocab, n_ctx): the vocabulary size and the longest sequence a model must read."""
        raise NotImplementedError

    def input_width(self, cfg) -> int | None:
        """d_in of a continuous task (is_continuous: a task that overrides this), whose batches carry real-valued
        `inputs` (B, T, d_in) and `targets` (B, T, d_out) with d_out = dims()[0]; None, the default: a token task,
        its model reads token ids."""
        return None

    def query_only(self, cfg) -> bool:
        """Whether every batch scores exactly one position per sequence (Batch.query is set)."""
        return False

    def batch_width(self, cfg) -> int:
        """Positions of a training batch (the width batch_sampler pads its draws to): what trainables/memory.py
        weighs a training step's sequences at. By default dims()'s n_ctx, the longest any sequence can be."""
        return self.dims(cfg)[1]

    # --- data ---------------------------------------------------------------------------------------------------
    def batch_sampler(self, cfgs: list, device, split: str = "train") -> Callable[[int, Draws], Batch]:
        """The one sampling hook: draw(n, draws) -> a Batch of (P, n, ...) tensors of `split`, member p's drawn from
        draws' stream p only (trainables/streams.py). cfgs: the members' task configs, P of them for the train split
        (a pack's, equal but for `member_fields`), one for an evaluation split (sample()). Do the per-member work
        here, once ((P, ...) tensors on `device`); a draw pads every member to one width fixed by cfgs, runs the same
        operations whatever P and reads no value back to the host, so a packed trial draws at a GPU's pace."""
        raise NotImplementedError

    def sample(self, cfg, n: int, generator: torch.Generator, split: str = "train", pad_to: int | None = None) -> Batch:
        """n sequences of `split`, drawn only from `generator` by batch_sampler with one member, so the `id`
        evaluation set is drawn exactly as training batches are; cut to the longest sequence (its last position not
        labelled PAD_LABEL), then right-padded to `pad_to` positions when given (training pads a pack's batches to one
        width itself, Batch.padded). Derived, not a hook: a task defines batch_sampler."""
        batch = self.batch_sampler([cfg], generator.device, split)(n, GeneratorDraws(generator)).member(0)
        used = (batch.labels != PAD_LABEL).any(0)  # (T,): positions some sequence fills
        batch = batch.cropped(int(used.cumsum(0).argmax()) + 1)  # the first maximum of the cumsum: the last one used
        return batch if pad_to is None else batch.padded(pad_to)  # padded after the draws: the same sequences

    def eval_splits(self, cfg) -> dict[str, str]:
        """Metric prefix -> split of the fixed evaluation sets, e.g. {"id": "train", "ood": "displaced"}."""
        raise NotImplementedError

    # --- measurements -------------------------------------------------------------------------------------------
    def metrics(self, cfg, prefix: str, batch: Batch, logits: torch.Tensor, cache: dict) -> dict[str, float]:
        """Task metrics of one evaluation split beyond `<prefix>/loss` and `<prefix>/acc` (train.evaluate's). logits:
        (B, T, N), or (B, N) at the query when batch.query is set; cache: trainables/cache.py reads it."""
        return {}

    def weight_metrics(self, cfg, matrices: dict[str, torch.Tensor]) -> dict[str, float]:
        """Probes of a model's named weight matrices (models/: `matrices()`), e.g. the one-step W_KQ's peaks."""
        return {}

    def diversity(self, cfg) -> dict[str, float]:
        """The `data/*` measures of the training distribution, known before any training; by default the first
        knob's value, as `diversity_axis` names it."""
        if not self.knobs or self.diversity_axis != self._knob_axis():  # a task that names its own measure
            return {}
        value = functools.reduce(getattr, self.knobs[0].split(".")[1:], cfg)  # the key is task.<...>
        return {self.diversity_axis: float(value)} if isinstance(value, (int, float)) else {}

    def theory(self, cfg) -> dict[str, float]:
        """Reference values the theory predicts for metrics of this config (drawn dashed beside measurements)."""
        return {}

    def shape(self, cfg) -> dict[int, float] | None:
        """The training distribution over the task's diversity variable ({value: probability}; None: not one), for
        a distribution search's `q` columns (best.csv). The hook keeps the name docs/EXTENDING.md gives it, though
        "shape" elsewhere means a tensor's."""
        return None

    def summary(self, cfg, history: list[dict[str, float]]) -> dict[str, float]:
        """Final metrics read off the whole run's evaluations, in order (e.g. the step at which a loss dropped)."""
        return {}

    def readouts(self, cfg, model, ood: Batch, generator: torch.Generator,
                 n_examples: int) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """Task-specific arrays of the final readout (attention.npz), beside the generic ones readouts.py saves, and
        final metrics read off them (e.g. trigger copy's all_pairs/acc)."""
        return {}, {}

    # --- naming -------------------------------------------------------------------------------------------------
    def run_name(self, cfg) -> str:
        """A short readable name of the data settings (the seed is appended by the caller)."""
        return self.name

    def tags(self, cfg) -> list[str]:
        """W&B tags reviewers filter by, beyond the task's and the model's names."""
        return []


# The built-ins, named as a plugin package names its tasks in its entry points (trainables/registry.py).
TASKS = Registry("task", Task, required=("validate", "dims", "batch_sampler", "eval_splits"), builtins={
    "trigger_copy": "trainables.tasks.trigger_copy:TASK",
    "bigram_trigger": "trainables.tasks.bigram_trigger:TASK",
    "markov_ngram": "trainables.tasks.markov_ngram:TASK",
    "mixed_ngram": "trainables.tasks.mixed_ngram:TASK",
    "linear_regression": "trainables.tasks.linear_regression:TASK",
}, adapt=lambda task: importlib.import_module("trainables.tasks.legacy").adapted(task))  # legacy.py imports this
DEFAULT = TASKS.default


def is_continuous(task: Task) -> bool:
    """Whether a task's data are numbers, not tokens: its models read real-valued `inputs` and its `targets` are real,
    scored by squared error with no accuracy. A task says so by stating its input width (Task.input_width); asked of
    the task, not of a config, so that what shows a task (its view's headline) knows it without one."""
    return type(task).input_width is not Task.input_width


def task_of(cfg) -> Task:
    """The Task of a Config (or of a plain config dict, as read back from an output directory's config.yaml)."""
    section = cfg["task"] if isinstance(cfg, Mapping) else cfg.task
    name = section.get("name", DEFAULT) if isinstance(section, Mapping) else section.name
    return TASKS[name]
