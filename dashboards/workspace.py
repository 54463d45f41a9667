"""The W&B workspace and report reviewers open, defined with wandb-workspaces.

Both are built offline (pure pydantic objects); only `push` talks to the server. The panels are the task's view's
(`view_of(task).dashboard`, plain data): they name metrics exactly as the members log them and group runs by the
diversity measures that WandbSink copies into each run's config (`data/width`, ...): flat keys without dots, which
wandb-workspaces maps onto W&B's config paths unambiguously.
"""
from __future__ import annotations

import json
from pathlib import Path

import wandb_workspaces.reports.v2 as wr
import wandb_workspaces.workspaces as ws

from trainables.io import atomic_write
from trainables.tasks import Panel, PanelSection, Task, view_of

WORKSPACE_NAME = "headsweep: diversity vs induction heads"
REPORT_TITLE = "When does a transformer learn an induction head? Data diversity sweeps"


def panel(spec: Panel):
    """The wandb-workspaces panel of a task's plain-data Panel."""
    if spec.kind == "line":
        grouping = {"groupby": wr.Config(spec.group_by), "groupby_aggfunc": "mean",
                    "groupby_rangefunc": "minmax"} if spec.group_by else {}
        return wr.LinePlot(title=spec.title, y=list(spec.metrics), **grouping)
    if spec.kind == "scatter":
        x, y = spec.metrics
        return wr.ScatterPlot(title=spec.title, x=wr.SummaryMetric(x), y=wr.SummaryMetric(y))
    if spec.kind == "media":
        return wr.MediaBrowser(title=spec.title, media_keys=list(spec.metrics), num_columns=3)
    raise ValueError(f"unknown panel kind {spec.kind!r}")


# Every task's runs trained by `optim:` log the learning rate of their last step at each evaluation (a model that
# trains itself, such as the one-step model's Algorithm 1, logs none and leaves this panel empty).
LEARNING_RATE = PanelSection("Learning rate", "The learning rate at each evaluation: optim.lr on optim.schedule after "
                             "optim.warmup_steps.", (Panel("line", ("train/lr",), "train/lr"),))


def sections(task: Task) -> list[tuple[str, str, list]]:
    """(section name, the question it answers, panels) of a task, shared by the workspace and the report."""
    return [(section.name, section.intro, [panel(p) for p in section.panels])
            for section in (*view_of(task).dashboard, LEARNING_RATE)]


def workspace(task: Task, entity: str, project: str, group: str | None = None) -> ws.Workspace:
    """The project workspace: the task's sections, runs grouped by W&B group (experiment), optionally one group."""
    return ws.Workspace(
        entity=entity,
        project=project,
        name=WORKSPACE_NAME + (f" ({group})" if group else ""),
        sections=[ws.Section(name=name, panels=panels, is_open=True) for name, _, panels in sections(task)],
        settings=ws.WorkspaceSettings(x_axis="Step", max_runs=200),
        runset_settings=ws.RunsetSettings(
            filters=f"Metric('group') == '{group}'" if group else "",
            pinned_columns=["run:displayName", *(f"summary:{m}" for m in view_of(task).headline), "summary:status"],
        ),
    )


def report(task: Task, entity: str, project: str, group: str | None = None,
           resolve_runsets: bool = False) -> wr.Report:
    """A report walking through the same panels, with the question each section answers.

    A run set that names its project makes wandb-workspaces look the project up on the server when the spec is
    built, so offline the run sets name none (W&B then reads the report's own project); `push` resolves them.
    """
    where = {"entity": entity, "project": project} if resolve_runsets else {}
    runset = wr.Runset(name=group or "all runs", filters=f"Metric('group') == '{group}'" if group else "", **where)
    blocks: list = [wr.P(text="Every member of headsweep's sweeps (one training run) is one run here (group = "
                              "experiment, job type = verb). Raw matrices are in each run's attention artifact.")]
    for name, intro, panels in sections(task):
        blocks += [wr.H2(text=name), wr.P(text=intro), wr.PanelGrid(runsets=[runset], panels=panels)]
    return wr.Report(entity=entity, project=project, title=REPORT_TITLE + (f": {group}" if group else ""),
                     description=f"{task.name}: OOD generalization, mechanism and attention against data diversity.",
                     blocks=blocks)


def specs(task: Task, entity: str, project: str, group: str | None = None) -> dict[str, dict]:
    """The JSON specs W&B stores for the workspace and the report (what `push` would save), built offline."""
    dump = lambda spec: spec._to_model().model_dump(mode="json", by_alias=True, exclude_none=True)
    return {"workspace": dump(workspace(task, entity, project, group)),
            "report": dump(report(task, entity, project, group))}


def write_specs(out: Path, task: Task, entity: str, project: str, group: str | None = None) -> list[Path]:
    """workspace.json and report.json in the directory `out`."""
    return [atomic_write(out / f"{name}.json", json.dumps(spec, indent=2, sort_keys=True) + "\n")
            for name, spec in specs(task, entity, project, group).items()]


def push(task: Task, entity: str, project: str, group: str | None = None) -> dict[str, str]:
    """Save the workspace and the report to W&B (needs credentials and the network); their URLs."""
    return {"workspace": workspace(task, entity, project, group).save().url,
            "report": report(task, entity, project, group, resolve_runsets=True).save().url}
