"""The repeat task (repeat.py) with a view of its own, for tests/unit/test_task_view.py: how a task says how it is
shown. This module is also the view's figures module (all_figures, all_images, NOTE): the default attention patterns
and a mark of its own."""
import numpy as np
from matplotlib.figure import Figure

from tests.plugins.repeat import Repeat
from trainables import pattern_figures
from trainables.tasks import TaskView

NOTE = "Drawn by the view of the repeat task."


def all_figures(arrays):
    return pattern_figures.all_figures(arrays) | {"shown/mark": Figure()}


def all_images(arrays):
    return pattern_figures.all_images(arrays) | {"shown/mark": (np.zeros((2, 2, 3), np.uint8), "a mark")}


class ShownView(TaskView):
    headline = ("ood/acc", "id/loss")
    table_columns = headline + ("steps",)
    short_names = {"ood/acc": "copies"}
    diversity_label = "distinct strings"
    figures_module = "tests.plugins.shown"


class Shown(Repeat):
    view = ShownView


SHOWN = Shown()
