"""The verbs as functions: each takes a loaded config, does what `headsweep <verb>` does through the same code
(sweep/single.py, sweep/grid.py, sweep/search/), and returns the output directory read back (results.py) instead of
printing and exiting. Bad input raises ConfigError with the line the CLI prints, before anything is written.
"""
from __future__ import annotations

import copy
import os
import tempfile
from collections.abc import Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headsweep.results import GridResult, SearchResult, TrainResult, read
from trainables import config as trial_config
from trainables import plugins
from trainables.errors import ConfigError

SECTIONS = ("sweep", "search")  # what a config may hold beside one trial's keys: a grid's, a search's
TRIAL_ERRORS_VAR = "TUNE_PRINT_ALL_TRIAL_ERRORS"  # "0": Tune logs no traceback when a trial fails (_run_from_python)


@dataclass(frozen=True, repr=False)
class Experiment:
    """A loaded and validated config (what `config()` returns): `.base`, the typed config of one trial (also reached
    directly: `cfg.task`, `cfg.model.d_model`, `cfg.name`), and the sections the source holds, `.sweep` (with the
    grid's `.points`) and `.search`, each None where absent. `.source` and `.overrides` are what it was loaded from:
    `config(cfg, "seed=1")` loads it again with one more override."""

    base: Any  # trainables.config.Config
    sweep: Any = None  # sweep.space.SweepConfig
    points: list[dict] | None = None
    search: Any = None  # sweep.search.config.SearchConfig
    source: Any = None  # a YAML path, or a copy of the dict given
    overrides: tuple[str, ...] = ()

    def __getattr__(self, name: str):
        if name == "base" or name.startswith("_"):  # (while unpickling, before base is set)
            raise AttributeError(name)
        return getattr(self.base, name)

    def to_yaml(self) -> str:
        """The resolved config as an output directory's config.yaml holds it, with the sections it has."""
        sections = {name: getattr(self, name) for name in SECTIONS if getattr(self, name) is not None}
        return trial_config.to_yaml(self.base, **sections)

    def __repr__(self) -> str:
        held = [name for name in SECTIONS if getattr(self, name) is not None]
        return (f"Experiment {self.base.name!r}: task {self.base.task.name}, model {self.base.model.name}"
                f"{'; ' + ', '.join(held) if held else ''}\n{self.to_yaml()}")


def config(source: str | os.PathLike | Mapping | Experiment, *overrides: str) -> Experiment:
    """The typed, validated config of a YAML file or a plain dict of the same keys, with dotlist overrides on top
    (`key=value`, as on the command line). Raises ConfigError (the CLI's one line) on bad input.

        >>> cfg = hs.config("configs/debug.yaml", "seed=1", "optim.max_steps=100")
        >>> cfg.model.n_layers
        2
        >>> cfg = hs.config({"task": {"name": "trigger_copy"}, "optim": {"max_steps": 50}})
        >>> hs.config(cfg, "seed=2")     # a loaded config with one more override

    The sections present (`sweep:` for a grid, `search:` for a search) are loaded and checked too, as the grid and
    search verbs check them; their overrides (`sweep.seeds=[0,1]`) go to them.
    """
    if isinstance(source, Experiment):
        source, overrides = source.source, (*source.overrides, *overrides)
    elif isinstance(source, Mapping):
        source = copy.deepcopy(dict(source))
    elif not isinstance(source, (str, os.PathLike)):
        raise ConfigError("CONFIG", f"must be a YAML file's path, a dict or a loaded config, got "
                                    f"{type(source).__name__}")
    bad = [o for o in overrides if not isinstance(o, str)]
    if bad:
        raise ConfigError(repr(bad[0]), "an override must be a string key=value (e.g. 'task.lengths.low=3')")
    present = {key.partition(".")[0] for layer in trial_config.read_layers(source, list(overrides))
               for key, _ in layer} & set(SECTIONS)
    top = lambda override: override.partition("=")[0].partition(".")[0]  # its section (or a trial key's first part)
    ours = lambda section: [o for o in overrides if top(o) == section or top(o) not in SECTIONS]  # + one trial's
    base = trial_config.load(source, ours(None))
    sweep = points = search = None
    if "sweep" in present:
        from sweep import space

        _, sweep, points = space.load_sweep(source, ours("sweep"))
    if "search" in present:
        from sweep.search.config import load_search

        _, search = load_search(source, ours("search"))
    return Experiment(base, sweep, points, search, source, overrides)


def train(cfg: Experiment | str | os.PathLike | Mapping, out: str | os.PathLike | None = None) -> TrainResult:
    """Train one model in this process, as `headsweep train` does, into `out` (default: a new temporary directory);
    its result. On an `out` where the same config finished, nothing is trained again.

        >>> run = hs.train(hs.config("configs/debug.yaml"), out="runs/debug")
        >>> run.metrics["ood/acc"], run.history[["step", "id/acc"]]
    """
    from sweep import single

    cfg = _loaded(cfg)
    out = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix=f"headsweep-{cfg.base.name}-"))
    single.run(cfg.base, out)
    return read(out)


def grid(cfg: Experiment | str | os.PathLike | Mapping, out: str | os.PathLike, *,
         address: str | None = None) -> GridResult:
    """Train every point of the config's `sweep:` section on Ray (a local one, or the cluster at `address` or
    RAY_ADDRESS), as `headsweep grid` does; its result. `out`: a directory or an s3:// place.

    Members that fail are rows of `.failed` (no exception). An interrupt (Ctrl-C, a notebook's stop button) prints the
    table so far and raises KeyboardInterrupt once what finished is written; calling `grid` again with the same
    config and `out` resumes, training nothing twice.

        >>> found = hs.grid(hs.config("configs/debug_grid.yaml", "sweep.seeds=[0]"), out="runs/debug_grid")
        >>> found.df[["task.lengths.low", "task.lengths.high", "ood/acc"]]
        >>> found.phase_diagram()
    """
    from sweep import grid as grid_verb
    from sweep import space

    cfg = _loaded(cfg)
    if cfg.sweep is None:  # no sweep section: refused as the CLI refuses it
        space.load_sweep(cfg.source, list(cfg.overrides))
    with _run_from_python():
        place, _ = grid_verb.run(cfg.base, cfg.sweep, cfg.points, str(out), address)
    return read(place.local)


def search(cfg: Experiment | str | os.PathLike | Mapping, out: str | os.PathLike, *, study: str | None = None,
           storage: str | None = None, extend: int = 0, address: str | None = None) -> SearchResult:
    """Search, per slice, for the smallest diversity at which a seed generalizes OOD, as `headsweep search` does
    (Optuna asks, Ray trains); its result. `study`, `storage`, `extend`, `address`: the CLI's --study, --storage,
    --extend and --address.

    An interrupt prints the table so far and raises KeyboardInterrupt once the tables of what finished are written;
    calling `search` again with the same config and `out` resumes the studies (`extend=N` adds N trainings per
    slice).

        >>> found = hs.search(hs.config("configs/debug_search.yaml"), out="runs/debug_search")
        >>> found.table            # K*_q per slice, with its interval
        >>> found.success_curves()
    """
    from sweep import search as search_verb
    from sweep.search.config import load_search

    cfg = _loaded(cfg)
    if cfg.search is None:
        load_search(cfg.source, list(cfg.overrides))
    with _run_from_python():
        place, _ = search_verb.run(cfg.base, cfg.search, str(out), study, storage, extend, address)
    return read(place.local, storage)


def load(out: str | os.PathLike, *, storage: str | None = None) -> TrainResult | GridResult | SearchResult:
    """Read an output directory of any verb (a local directory, or an s3:// place, pulled into its local mirror) back
    into what that verb returns; the CLI's and Python's directories read the same. `storage`: a search's --storage,
    where its studies are not in the default journal.

        >>> found = hs.load("runs/quickstart")
        >>> found.table, found.history(found.members.iloc[0])
    """
    from sweep.storage.out_dir import OutDir

    return read(OutDir.open(out).local, storage)


def register(obj):
    """Make a Task or ModelSpec instance, defined anywhere (a notebook cell, a script's `__main__`), available under
    its `name` in this process; a grid or search ships it to its Ray workers by value. Returns it. Registering a name
    again replaces it; the name of a built-in or an installed plugin is refused (ConfigError).

        >>> class Repeat(hs.Task):
        ...     name, config = "repeat", RepeatConfig
        ...     ...
        >>> hs.register(Repeat())
        >>> hs.train(hs.config({"task": {"name": "repeat"}}))
    """
    return plugins.register(obj)


@contextmanager
def _run_from_python():
    """A grid or search as Python runs it. Tune logs every failed try of a trial with its traceback, dozens of lines
    each (a red wall in a notebook cell); from Python a failed member is a row of `.failed` with its error, and the
    traceback is kept in its Tune trial's error.txt under out/ray/, so Tune logs none. The CLI keeps Tune's lines (a
    job's log). A value the user set is kept. Stopped from Python (Ctrl-C, a notebook's stop button), it prints its
    table so far, as the CLI does, before its KeyboardInterrupt goes on. A local Ray it starts stays up for the
    process's next grid or search (sweep/cluster.py)."""
    from sweep import cluster
    from sweep.stopping import Stopped

    cluster.keep_local_between_runs()  # a notebook's next grid or search starts no Ray
    quiet = TRIAL_ERRORS_VAR not in os.environ
    if quiet:
        os.environ[TRIAL_ERRORS_VAR] = "0"  # read by each Tune run as it starts
    try:
        yield
    except Stopped as stop:
        print(stop.so_far, flush=True)
        raise
    finally:
        if quiet:
            os.environ.pop(TRIAL_ERRORS_VAR, None)


def _loaded(cfg) -> Experiment:
    return cfg if isinstance(cfg, Experiment) else config(cfg)
