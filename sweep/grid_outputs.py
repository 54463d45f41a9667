"""What a grid leaves beside ray/: results.csv, phase_diagram.png and a self-contained report.html."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from dashboards.report import Section, write_report
from sweep import plots
from sweep.results import write_csv
from sweep.space import SweepConfig

SUMMARY_COLUMNS = ["ood/acc", "id/acc", "ood/pseudo_rate", "mech/induction_score", "mech/positional_score",
                   "data/max_sum_ratio", "status", "seconds"]


def write(out: Path, frame: pd.DataFrame, base, sweep: SweepConfig, resolved_yaml: str) -> None:
    write_csv(frame, out / "results.csv")
    sections = []
    diagram = sweep.phase_diagram
    keys = [axis.key for axis in sweep.axes]
    finished = frame[frame["status"].isin(["completed", "early_stopped", "diverged"])]
    if diagram.x in keys and diagram.y in keys and len(finished):
        figure = plots.phase_diagram(finished, diagram.x, diagram.y, diagram.metric,
                                     ratio_level=diagram.ratio_level or None,
                                     panels=[k for k in keys if k not in (diagram.x, diagram.y)])
        plots.save_png(figure, out / "phase_diagram.png")
        sections.append(Section(f"Phase diagram: mean {diagram.metric} over seeds", image_png=plots.figure_to_png(figure),
                                alt=f"phase diagram of {diagram.metric} over {diagram.x} and {diagram.y}"))
    counts = frame["status"].value_counts().to_dict()
    sections.append(Section("Trials", html=f"<p>{len(frame)} trials: "
                            + ", ".join(f"{n} {status}" for status, n in counts.items()) + "</p>"))
    columns = keys + ["seed"] + [c for c in SUMMARY_COLUMNS if c in frame.columns] + ["error"]
    sections.append(Section("Results (one row per trial; all metrics in results.csv)", table=frame[columns]))
    sections.append(Section("Config", text=resolved_yaml))
    write_report(out / "report.html", f"headsweep grid: {base.name}", sections)
