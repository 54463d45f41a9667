"""headsweep from Python: `import headsweep as hs`.

    cfg = hs.config("configs/debug_grid.yaml", "sweep.seeds=[0]")   # a YAML path or a dict, plus overrides
    grid = hs.grid(cfg, out="runs/debug_grid")                     # .df, .failed, .history(member), .phase_diagram()
    found = hs.search(hs.config("configs/debug_search.yaml"), out="runs/debug_search")   # .table, .members, .curve
    hs.load("runs/debug_grid")                                     # any output directory, as the verb returned it

A thin face over the layers below (trainables: the science; sweep: Ray Tune and Optuna; dashboards: reports and
figures): the `headsweep` command calls the same functions, so a directory written by one reads the same from the
other. Bad input raises ConfigError with the one line the CLI prints; nothing is written. `hs.register(obj)` makes a
Task or ModelSpec defined anywhere (a notebook cell) available by name, and a sweep ships it to its workers by value.

`__all__` is the contract: its names and what they return keep working; everything else inside headsweep may change.
"""
from sweep import stopping as _stopping  # noqa: F401 (first: sets how Ray handles Ctrl-C before Ray is imported)

from headsweep.api import Experiment, config, grid, load, register, search, train
from headsweep.results import GridResult, SearchResult, TrainResult
from trainables.cache import pattern_at, patterns
from trainables.errors import ConfigError, require
from trainables.models import ModelSpec
from trainables.streams import GeneratorDraws
from trainables.tasks import PAD_LABEL, Batch, Panel, PanelSection, Task, TaskView, view_of

__all__ = [
    # the verbs, as functions that return results
    "config", "train", "grid", "search", "load", "register",
    # what they return
    "Experiment", "TrainResult", "GridResult", "SearchResult",
    # the plugin API (docs/EXTENDING.md): a task, a model, how a task is shown, bad input
    "Task", "Batch", "PAD_LABEL", "GeneratorDraws", "TaskView", "Panel", "PanelSection", "view_of",
    "ModelSpec", "patterns", "pattern_at", "require", "ConfigError",
]
