"""The repeat task (repeat.py) shown two ways, for tests/unit/test_task_view.py: SHOWN with a view of its own (how a
task says how it is shown), LEGACY with its presentation set on the Task class itself, as tasks written before views
did (still honoured, docs/EXTENDING.md). This module is also LEGACY's figures module (all_figures, all_images, NOTE)."""
import numpy as np
from matplotlib.figure import Figure

from tests.plugins.repeat import Repeat
from trainables.tasks import Panel, PanelSection, TaskView

NOTE = "Marks drawn by the figures module a task named on its Task class."


def all_figures(arrays):
    return {"legacy/module_mark": Figure()}


def all_images(arrays):
    return {"legacy/module_mark": (np.zeros((2, 2, 3), np.uint8), "a mark")}


class ShownView(TaskView):
    headline = ("ood/acc", "id/loss")
    table_columns = headline + ("steps",)
    short_names = {"ood/acc": "copies"}
    diversity_label = "distinct strings"
    figure_note = "Drawn by the view of the repeat task."

    def images(self, arrays):  # beside the default attention patterns
        return super().images(arrays) | {"shown/mark": (np.zeros((2, 2, 3), np.uint8), "a mark")}


class Shown(Repeat):
    view = ShownView


class Legacy(Repeat):
    headline = ("ood/acc", "id/loss", "data/n_train_strings")
    short_names = {"ood/acc": "copies"}
    dashboard = (PanelSection("Only this", "The one section the task set.", (Panel("line", ("id/loss",), "id/loss"),)),)
    figures_module = "tests.plugins.shown"

    def figures(self, arrays):
        return {"legacy/override": Figure()}


SHOWN, LEGACY = Shown(), Legacy()
