"""What `train`, `grid`, `search` and `load` return: an output directory read back into tables and figures.

Every result is read from the files a verb writes (DESIGN's output-dir contract), never from the objects that wrote
them, so a directory written by the CLI and one written from Python read the same, and `load(out)` gives what the
verb returned. `repr` shows the table the CLI prints; in Jupyter, `_repr_html_` shows it as HTML, and a figure a cell
returns is drawn.
"""
from __future__ import annotations

import sys
import warnings
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from dashboards import figures, report
from trainables.errors import ConfigError
from trainables.io import FAILED, FINISHED, read_json, read_jsonl
from trainables.tasks import task_of, view_of

def read(out: Path, storage: str | None = None) -> "TrainResult | GridResult | SearchResult":
    """The result of the verb that wrote the local directory `out` (report.detect decides which)."""
    kind = report.detect(out)
    cfg = report.read_config(out / "config.yaml") or {}
    if kind == "train":
        return TrainResult(out, cfg)
    frame = report.results(out, kind, report.member_dirs(out))
    return GridResult(out, cfg, frame) if kind == "grid" else SearchResult(out, cfg, frame, storage)


@dataclass(repr=False)
class _Result:
    out: Path  # the directory the files are in (for a bucket, its local mirror)
    config: dict  # config.yaml, resolved: every key the run used

    @property
    def name(self) -> str:
        return self.config.get("name") or self.out.name

    def _task(self):
        """The task of config.yaml; None where it cannot be loaded here (a task registered in another process)."""
        try:
            return task_of(self.config)
        except ConfigError:
            return None

    def _headline(self) -> tuple[str, ...]:
        return () if (task := self._task()) is None else view_of(task).headline

    def _repr_html_(self) -> str:
        return f"<p><b>{type(self).__name__}</b> {self.name} <code>[{self.out}]</code></p>" + self._table().to_html()

    def __repr__(self) -> str:
        return f"{type(self).__name__} {self.name} [{self.out}]\n{self._table().to_string(index=False)}"

    def _table(self) -> pd.DataFrame:
        raise NotImplementedError


@dataclass(repr=False)
class _Members(_Result):
    """A grid's or search's: members under out/trials/<member>/."""

    def history(self, member: str | Mapping) -> pd.DataFrame:
        """One member's curves: its metrics.jsonl, one row per evaluation (step, then each metric). `member`: its id
        (the `member` column of `.df` or `.members`), or a row of those tables.

            >>> grid = hs.load("runs/debug_grid")
            >>> grid.history(grid.df.iloc[0])[["step", "ood/acc"]]
        """
        member_id = member["member"] if isinstance(member, (Mapping, pd.Series)) else member
        path = self.out / "trials" / str(member_id) / "metrics.jsonl"
        if not path.exists():
            raise KeyError(f"no member {member_id!r} with metrics in {self.out}/trials")
        return pd.DataFrame(read_jsonl(path))


@dataclass(repr=False)
class TrainResult(_Result):
    """One trained member: `.metrics` (result.json: the final metrics, status, steps, seconds), `.history`
    (metrics.jsonl: one row per evaluation), `.arrays` (attention.npz: name -> array), `.config`, `.out`.

        >>> run = hs.train(hs.config("configs/debug.yaml", "seed=1"))
        >>> run.metrics["ood/acc"], run.history[["step", "train/loss"]].tail(3)
    """

    @cached_property
    def metrics(self) -> dict:
        return read_json(self.out / "result.json") or {}

    @cached_property
    def history(self) -> pd.DataFrame:
        return pd.DataFrame(read_jsonl(self.out / "metrics.jsonl"))  # empty without the file

    @cached_property
    def arrays(self) -> dict[str, np.ndarray]:
        path = self.out / "attention.npz"
        if not path.exists():
            return {}
        with np.load(path) as arrays:
            return {name: arrays[name] for name in arrays.files}

    def _table(self) -> pd.DataFrame:
        shown = [k for k in (*self._headline(), "status", "steps", "seconds") if k in self.metrics]
        return pd.DataFrame([{k: self.metrics[k] for k in shown or self.metrics}])


@dataclass(repr=False)
class GridResult(_Members):
    """A grid: `.df` (results.csv: one row per member, its point, seed, member id, status, error, seconds and final
    metrics), `.failed` (the rows of members that failed for good or never finished), `.history(member)`,
    `.phase_diagram()`, `.config`, `.out`.

        >>> grid = hs.grid(hs.config("configs/debug_grid.yaml"), out="runs/debug_grid")
        >>> grid.df.groupby("task.lengths.low")["ood/acc"].mean()
    """

    df: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def failed(self) -> pd.DataFrame:
        return self.df[self.df["status"].isin(FAILED)] if "status" in self.df else self.df.iloc[:0]

    @property
    def keys(self) -> list[str]:
        """The swept keys (the axes'), then seed."""
        return [axis["key"] for axis in (self.config.get("sweep") or {}).get("axes", [])] + ["seed"]

    def phase_diagram(self) -> Figure | None:
        """The phase diagram of report.html and phase_diagram.png (the sweep's phase_diagram section; a one-axis grid:
        the metric against its key) as a matplotlib Figure; None where it cannot be drawn (nothing finished)."""
        finished = self.df[self.df["status"].isin(FINISHED)] if "status" in self.df else self.df
        return _drawn_in_ipython(report.draw_phase_diagram(finished, self.config, view_of(task_of(self.config)))[0])

    def _table(self) -> pd.DataFrame:
        """The table `headsweep grid` prints: swept keys (short), the headline metrics, status."""
        shown = [c for c in (*self.keys, *self._headline(), "status") if c in self.df.columns]
        return self.df[shown].rename(columns=lambda c: c.rsplit(".", 1)[-1] if c in self.keys else c)

    def __repr__(self) -> str:
        counts = self.df["status"].value_counts().to_dict() if "status" in self.df else {}
        return (super().__repr__() + f"\n{len(self.df)} members: "
                + ", ".join(f"{n} {status}" for status, n in counts.items()))


@dataclass(repr=False)
class SearchResult(_Members):
    """A search: `.table` (min_diversity.csv: per slice K*_q with its interval, the seeds behind it; best.csv for a
    distribution search), `.members` (trials.csv: one row per member, a seed trained at a candidate: its point, seed,
    Optuna trial, status and metrics; `.trials` before, still read with a DeprecationWarning), `.curve`
    (success_curve.csv: the pass probability at every knob value of every slice, with its interval), `.studies` (the
    Optuna studies, by name), `.history(member)`, `.success_curves()`, `.config`, `.out`.

        >>> found = hs.search(hs.config("configs/debug_search.yaml"), out="runs/debug_search")
        >>> found.table[["task.lengths.low", "diversity_star", "diversity_star_low", "diversity_star_high"]]
    """

    members: pd.DataFrame = field(default_factory=pd.DataFrame)
    storage: str | None = None  # the studies' storage when not the default journal (search --storage)

    @property
    def trials(self) -> pd.DataFrame:
        """`.members` under its name before: its rows are members, not Optuna trials (DESIGN.md, "Words")."""
        warnings.warn("SearchResult.trials is now SearchResult.members", DeprecationWarning, stacklevel=2)
        return self.members

    @cached_property
    def table(self) -> pd.DataFrame:
        for name in ("min_diversity.csv", "best.csv"):
            if (self.out / name).exists():
                return report.read_table(self.out / name)
        return pd.DataFrame()

    @cached_property
    def curve(self) -> pd.DataFrame:
        return report.read_table(self.out / "success_curve.csv")

    @cached_property
    def studies(self) -> dict[str, Any]:
        """Study name -> its optuna.Study (one per slice), opened from the search's storage."""
        import optuna

        from sweep.search.studies import storage_for  # Optuna and Ray: only when asked for

        storage = storage_for(self.storage, self.out.resolve(), create=False)
        names = list(dict.fromkeys(self.table.get("study", pd.Series(dtype=str)).tolist()))
        return {} if storage is None else {name: optuna.load_study(study_name=name, storage=storage)
                                           for name in names}

    @property
    def search(self) -> dict:
        return self.config.get("search") or {}

    def success_curves(self) -> Figure | None:
        """The success curves of report.html (p(K) per slice, K*_q with its interval) as a matplotlib Figure; None
        for a search without them (a distribution search, nothing trained yet)."""
        if self.curve.empty or "diversity_star" not in self.table:
            return None
        return _drawn_in_ipython(report.draw_success_curves(self.curve, self.table, self.config))

    def _table(self) -> pd.DataFrame:
        """The table `headsweep search` prints."""
        if self.table.empty:
            return self.table
        if report.minimized(self.search):
            return self.table.drop(columns=["study"], errors="ignore")
        axis = "" if (task := self._task()) is None else task.diversity_axis
        return figures.answer_table(self.table, [a["key"] for a in self.search.get("slices", [])], axis)


def _drawn_in_ipython(figure: Figure | None) -> Figure | None:
    """The figure, after making sure that IPython (a Jupyter cell) draws a Figure a cell returns. IPython does that only
    once matplotlib's inline support is on (pyplot imported in the kernel, or `%matplotlib inline`); our figures are
    made without pyplot, so a returned one would show as `<Figure size ...>`. Where no format is chosen for Figure
    yet, PNG is, as the inline backend chooses; a format the user chose is kept. Outside IPython: nothing."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if figure is not None and ipython is not None else None
    if shell is None:
        return figure
    formatters = shell.display_formatter.formatters
    if not any(Figure in formatter for formatter in formatters.values()):  # (in: the formatter has a printer)
        from IPython.core.pylabtools import print_figure

        formatters["image/png"].for_type(Figure, partial(print_figure, fmt="png", base64=True))
    return figure

