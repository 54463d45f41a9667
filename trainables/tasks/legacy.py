"""Task plugins written against the API of 2026-11-26 and before, adapted once where they are registered
(trainables/registry.py calls `adapted`), with one DeprecationWarning naming what moved and where. Two things moved:

- how a task is shown: a Task class that sets `headline`, `dashboard`, `figures()`, ... (PRESENTATION) gets a view
  that reads those off it, and names it as its `view`;
- sampling: a Task that defines `sample(cfg, n, generator, split)` (and perhaps `batch_sampler(cfgs, device)`, its
  training batches at once) gets the one hook, `batch_sampler(cfgs, device, split)`, built from them.

The adaptation is set on the instance (what the registry hands out), not on the plugin's class, so nothing a plugin
defines changes under it; the rest of headsweep sees only the current protocol, and there is no attribute lookup
between a task and its view in either direction.
"""
from __future__ import annotations

import dataclasses
import functools
import inspect
import warnings

import torch

from trainables.streams import GeneratorDraws
from trainables.tasks import Batch, Task, stack_batches

# What a Task class said about how it is shown, before views.
PRESENTATION = ("headline", "table_columns", "dashboard", "curve_metrics", "short_names", "diversity_label",
                "figures_module", "figures", "images", "figure_note")


def adapted(task: Task) -> Task:
    """`task`, brought to the current protocol in place (once: an adapted task is left as it is)."""
    moved = []
    shown = [name for name in PRESENTATION if hasattr(type(task), name)]
    if shown and "view" not in vars(task):
        task.view = type(f"{type(task).__name__}View", (task.view,),
                         {name: property(lambda view, name=name: getattr(view.task, name)) for name in shown})
        moved.append(f"{', '.join(shown)} (on the Task) -> a TaskView subclass named as the task's `view`")
    together = type(task).batch_sampler
    takes_split = together is not Task.batch_sampler and "split" in inspect.signature(together).parameters
    # A sample() beside a batch_sampler that takes a split (a subclass of a current task) is only a wrapper of it.
    if type(task).sample is not Task.sample and not takes_split and "batch_sampler" not in vars(task):
        if together is Task.batch_sampler:  # each member draws alone, so members of a pack may differ in any field
            together, task.member_fields = None, tuple(field.name for field in dataclasses.fields(task.config))
        task.batch_sampler = functools.partial(_sampler_of, task, together)
        moved.append(f"sample(cfg, n, generator, split){' and batch_sampler(cfgs, device)' if together else ''} -> "
                     "batch_sampler(cfgs, device, split), the one sampling hook, from which sample() is derived")
    if moved:
        warnings.warn(f"task {task.name!r} is written against the task API before views and one sampling hook: "
                      f"{'; '.join(moved)} (docs/EXTENDING.md). Adapted where it was registered.",
                      DeprecationWarning, stacklevel=2)
    return task


def _sampler_of(task: Task, together, cfgs: list, device, split: str = "train"):
    """The one hook from the old ones: the train split from the old batch_sampler where the task had one, else each
    member's own sample() on a torch.Generator: sample()'s own with one member (so its evaluation sets are drawn as
    before), in training one seeded from the member's stream, which keeps its batches its own whatever it is packed
    with and lets a resumed run draw on from its step."""
    if split == "train" and together is not None:
        return together(task, cfgs, device)

    def draw(n: int, draws) -> Batch:
        generators = [draws.generator] if isinstance(draws, GeneratorDraws) else \
            [torch.Generator().manual_seed(seed) for seed in draws.bits().tolist()]  # (P,) seeds, read on the host
        batches = [task.sample(cfg, n, generator, split).to(device) for cfg, generator in zip(cfgs, generators)]
        stacked = stack_batches(batches)  # (P, n, ...), padded to the widest
        if len(batches) == 1:  # sample()'s: its per-sequence info kept
            stacked.info = {k: v[None] for k, v in batches[0].info.items()}
        return stacked

    return draw
