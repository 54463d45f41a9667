"""The W&B workspace and report reviewers open, defined with wandb-workspaces.

Both are built offline (pure pydantic objects); only `push` talks to the server. Panels name metrics exactly as the
trials log them (`ood/acc`, `mech/induction_score`, ...) and group runs by the diversity measures that WandbSink
copies into each run's config (`data/width`, `data/max_sum_ratio`): flat keys without dots, which wandb-workspaces
maps onto W&B's config paths unambiguously.
"""
from __future__ import annotations

import json
from pathlib import Path

import wandb_workspaces.reports.v2 as wr
import wandb_workspaces.workspaces as ws

GROUP_BY = "data/width"  # support width K of the length distribution: few distinct values, ordered by diversity
MECHANISM = ["mech/induction_score", "mech/positional_score", "mech/kq_induction_peak", "mech/kq_positional_peak"]
# Media keys WandbSink logs (trainables.media.figures); attention keys exist per layer and head, the first few here.
MEDIA = ["attention/query_L0H0", "attention/query_L1H0", "mech/W_KQ", "ood/acc_by_pair",
         "attention/pattern_L0H0", "attention/pattern_L1H0"]
WORKSPACE_NAME = "headsweep: diversity vs induction heads"
REPORT_TITLE = "When does a transformer learn an induction head? Data diversity sweeps"


def sections() -> list[tuple[str, list]]:
    """(section name, panels), shared by the workspace and the report."""
    diversity = wr.Config(GROUP_BY)
    return [
        ("OOD generalization by diversity", [
            wr.LinePlot(title="ood/acc, grouped by support width K", y=["ood/acc"], groupby=diversity,
                        groupby_aggfunc="mean", groupby_rangefunc="minmax"),
            wr.LinePlot(title="ood/loss, grouped by support width K", y=["ood/loss"], groupby=diversity,
                        groupby_aggfunc="mean", groupby_rangefunc="minmax"),
            wr.ScatterPlot(title="max-sum ratio R against final ood/acc", x=wr.SummaryMetric("data/max_sum_ratio"),
                           y=wr.SummaryMetric("ood/acc")),
            wr.LinePlot(title="Shortcut answers on OOD sequences", y=["ood/pseudo_rate", "ood/leftmost_rate"],
                        groupby=diversity, groupby_aggfunc="mean"),
        ]),
        ("Mechanism", [
            wr.LinePlot(title=metric, y=[metric], groupby=diversity, groupby_aggfunc="mean") for metric in MECHANISM
        ] + [
            wr.ScatterPlot(title="max-sum ratio R against the induction score",
                           x=wr.SummaryMetric("data/max_sum_ratio"), y=wr.SummaryMetric("mech/induction_score")),
        ]),
        ("Attention maps", [wr.MediaBrowser(title=key, media_keys=[key], num_columns=3) for key in MEDIA]),
        ("Training", [wr.LinePlot(title=metric, y=[metric]) for metric in ("train/loss", "id/loss", "id/acc")]),
    ]


def workspace(entity: str, project: str, group: str | None = None) -> ws.Workspace:
    """The project workspace: the sections above, runs grouped by W&B group (experiment), optionally one group."""
    return ws.Workspace(
        entity=entity,
        project=project,
        name=WORKSPACE_NAME + (f" ({group})" if group else ""),
        sections=[ws.Section(name=name, panels=panels, is_open=True) for name, panels in sections()],
        settings=ws.WorkspaceSettings(x_axis="Step", max_runs=200),
        runset_settings=ws.RunsetSettings(
            filters=f"Metric('group') == '{group}'" if group else "",
            pinned_columns=["run:displayName", "summary:ood/acc", "summary:data/max_sum_ratio",
                            "summary:mech/induction_score", "summary:status"],
        ),
    )


def report(entity: str, project: str, group: str | None = None, resolve_runsets: bool = False) -> wr.Report:
    """A report walking through the same panels, with the question each section answers.

    A run set that names its project makes wandb-workspaces look the project up on the server when the spec is
    built, so offline the run sets name none (W&B then reads the report's own project); `push` resolves them.
    """
    where = {"entity": entity, "project": project} if resolve_runsets else {}
    runset = wr.Runset(name=group or "all runs", filters=f"Metric('group') == '{group}'" if group else "", **where)
    intro = {
        "OOD generalization by diversity": "A model that learned the induction head copies the right token when the "
        "trigger moves (ood/acc near 1); one that learned the positional shortcut does not. Theorem 5 predicts the "
        "switch at a max-sum ratio R of order 1/N_trg.",
        "Mechanism": "Attention mass at the query on the output token (induction) and on the shortcut position; for "
        "the one-step model, the two peaks of W_KQ (Lemma 7).",
        "Attention maps": "Per trial, at the end of training: attention at the query per layer and head with the "
        "first trigger and the output token marked, the one-step W_KQ with its blocks, and OOD accuracy by (l1, l2).",
        "Training": "In-distribution fit: every trial should solve its training distribution.",
    }
    blocks: list = [wr.P(text="Every trial of headsweep's sweeps is one run here (group = experiment, "
                              "job type = verb). Raw matrices are in each run's attention artifact.")]
    for name, panels in sections():
        blocks += [wr.H2(text=name), wr.P(text=intro[name]), wr.PanelGrid(runsets=[runset], panels=panels)]
    return wr.Report(entity=entity, project=project, title=REPORT_TITLE + (f": {group}" if group else ""),
                     description="OOD accuracy, mechanism scores and attention maps against data diversity.",
                     blocks=blocks)


def specs(entity: str, project: str, group: str | None = None) -> dict[str, dict]:
    """The JSON specs W&B stores for the workspace and the report (what `push` would save), built offline."""
    return {
        "workspace": workspace(entity, project, group)._to_model().model_dump(mode="json", by_alias=True,
                                                                              exclude_none=True),
        "report": report(entity, project, group)._to_model().model_dump(mode="json", by_alias=True,
                                                                        exclude_none=True),
    }


def write_specs(out: Path, entity: str, project: str, group: str | None = None) -> list[Path]:
    """workspace.json and report.json in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, spec in specs(entity, project, group).items():
        path = out / f"{name}.json"
        path.write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n")
        paths.append(path)
    return paths


def push(entity: str, project: str, group: str | None = None) -> dict[str, str]:
    """Save the workspace and the report to W&B (needs credentials and the network); their URLs."""
    saved_workspace = workspace(entity, project, group).save()
    saved_report = report(entity, project, group, resolve_runsets=True).save()
    return {"workspace": saved_workspace.url, "report": saved_report.url}
