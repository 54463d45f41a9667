"""How a task is shown, apart from what it is: the headline columns of progress lines and report tables, the W&B
panels, a trial's figures and media, short names and axis labels. Public API for plugins (docs/EXTENDING.md):
TaskView, Panel and PanelSection (also importable from trainables.tasks).

Every part has a default drawn from the task's science (its success metric, its diversity axis), so a task needs no
view; one that wants its own subclasses TaskView in its own folder (a built-in's is <task>/view.py) and names the
class as its Task's `view`. Whatever shows a task (readouts.py's W&B media, dashboards/) asks `view_of(task)`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the Task module imports this one
    from trainables.tasks import Task


@dataclass(frozen=True)
class Panel:
    """One W&B panel as plain data (trainables imports no wandb; dashboards/workspace.py builds the real panel).

    kind: `line` (y metrics over steps, optionally grouped by a run config key), `scatter` (summary x against
    summary y: metrics = (x, y)) or `media` (media keys)."""

    kind: str
    metrics: tuple[str, ...]
    title: str = ""
    group_by: str = ""


@dataclass(frozen=True)
class PanelSection:
    name: str
    intro: str  # the question the section answers, shown above it in the W&B report
    panels: tuple[Panel, ...]


class TaskView:
    """How one task is shown. A subclass overrides any of its seven hooks (headline, table_columns, dashboard,
    curve_metrics, short_names, diversity_label, figures_module) with a plain class attribute or a property; `task` is
    the task it shows, for defaults read off its metrics. What it draws comes from its figures_module alone:
    `figures`, `images` and `figure_note` are read from that module, one place for a task's drawing code."""

    diversity_label: str = ""  # how the diversity axis reads on a figure, e.g. "R (small = diverse)"
    curve_metrics: tuple[str, ...] = ("train/loss", "ood/loss", "id/acc", "ood/acc")  # learning-curve panels
    short_names: dict[str, str] = {}  # metric -> a narrow name, where space is short (a figure's contour label)
    figures_module: str = ""  # the module with all_figures(arrays), all_images(arrays) and NOTE, imported lazily;
    # "" draws the attention patterns alone (trainables/pattern_figures.py)

    def __init__(self, task: Task):
        self.task = task

    @property
    def headline(self) -> tuple[str, ...]:
        """Metrics a trial's one-line summary and the reports show first: the success metric, how well training data
        is fitted (id/acc, or a continuous task's id/loss: its MSE) and the diversity axis."""
        from trainables.tasks import is_continuous  # here, not at the top: trainables.tasks imports this module

        fitted = "id/loss" if is_continuous(self.task) else "id/acc"
        return (self.task.success_metric, fitted, *(a for a in (self.task.diversity_axis,) if a))

    @property
    def table_columns(self) -> tuple[str, ...]:
        """The metrics of the reports' results tables."""
        return self.headline

    @property
    def dashboard(self) -> tuple[PanelSection, ...]:
        """The W&B workspace and report sections. By default: the headline metrics over training, grouped by the
        diversity axis (which each run's config carries), the axis against the success metric, the attention
        patterns of the first two layers (trainables/pattern_figures.py; empty for a model without attention), and
        the training curves."""
        axis, success = self.task.diversity_axis, self.task.success_metric
        generalization = tuple(Panel("line", (m,), m + (f", grouped by {axis}" if axis else ""), axis)
                               for m in self.headline if m != axis)
        if axis:
            generalization += (Panel("scatter", (axis, success), f"{axis} against final {success}"),)
        return (PanelSection("OOD generalization by diversity",
                             f"Does the model generalize out of distribution ({success}), and from how much "
                             "diversity?", generalization),
                PanelSection("Attention maps", "Per member, at the end of training: each layer's attention pattern on "
                             "an OOD example (a model without attention logs none).",
                             tuple(Panel("media", (f"attention/pattern_L{layer}H0",), f"layer {layer}, head 0")
                                   for layer in (0, 1))),
                PanelSection("Training", "In-distribution fit: every trial should solve its training distribution.",
                             tuple(Panel("line", (m,), m) for m in self.curve_metrics)))

    def figures(self, arrays: dict[str, np.ndarray]) -> dict:
        """Media key -> matplotlib Figure of a trial's arrays (attention.npz), for the report. Without a
        figures_module: each layer and head's full attention pattern, where the model has attention."""
        return self._figures().all_figures(arrays)

    def images(self, arrays: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, str]]:
        """Media key -> (uint8 RGB image, caption): the same arrays as plain heatmaps (figures.heatmap_image), for
        W&B, where a trial's media must cost a small fraction of the trial."""
        return self._figures().all_images(arrays)

    @property
    def figure_note(self) -> str:
        """One sentence that explains the markers of the task's figures (HTML-escaped by the report)."""
        return self._figures().NOTE

    def _figures(self):  # matplotlib only once something is drawn
        return importlib.import_module(self.figures_module or "trainables.pattern_figures")


def view_of(task: Task) -> TaskView:
    """How `task` is shown: its own view class (`Task.view`), else the defaults; what everything that shows a task
    reads."""
    return task.view(task)
