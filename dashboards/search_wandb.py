"""A threshold search's own W&B run: its answer, beside the one run per trained seed (trainables/logger.py).

`log_search(out)` mirrors what the search wrote in `out` (config.yaml, min_diversity.csv, success_curve.csv) to one
run, job_type "search": both tables as `wandb.Table`s, the success curves and the threshold figure as images (uint8
RGB: W&B renders a float array black), and each slice's K*_q with its interval in the summary (`star/<slice>`,
`star_low/<slice>`, `star_high/<slice>`; None where blank, i.e. past the widest value), beside `finished/<slice>`
and `seeds/<slice>`. The CSVs stay the source of truth. The run lives in <out>/wandb, offline unless logged in
(`resolve_wandb_mode`, never a prompt); a later call on the same dir (a search extended with --extend) continues the
same run, as a retried member continues its own.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from dashboards import figures
from dashboards import report
from dashboards.report import read_config, theory_values
from trainables import logger
from trainables.io import flat
from trainables.logger import _run_id, resolve_wandb_mode
from trainables.tasks import task_of


def log_search(out: str | Path) -> Path | None:
    """Mirror the threshold search in `out` to one W&B run when its config.yaml says `logging.wandb: true` (mode from
    `logging.mode`). Returns the run's directory (<out>/wandb/<offline-run-...|run-...>), or None when nothing was
    logged: W&B off or disabled, or no min_diversity.csv yet."""
    out = Path(out).resolve()
    cfg = read_config(out / "config.yaml") or {}
    logging = cfg.get("logging") or {}
    if not logging.get("wandb") or not (out / "min_diversity.csv").exists():
        return None
    mode, why = resolve_wandb_mode(logging.get("mode", "auto"))
    if mode == "disabled":
        return None
    search = cfg.get("search") or {}
    slice_keys = [axis["key"] for axis in search.get("slices", [])]
    minimal = pd.read_csv(out / "min_diversity.csv")
    curve = pd.read_csv(out / "success_curve.csv") if (out / "success_curve.csv").exists() else None
    images = _figures(cfg, minimal, curve, slice_keys)  # drawn first: a figure that fails leaves no half-made run

    import wandb  # here, not at the top: logging.wandb=false must import nothing from wandb

    run_id, resume = _run_id(out / "wandb", resume=True)
    name = cfg.get("name") or out.name
    run = wandb.init(
        project=logging.get("project") or "headsweep", entity=logging.get("entity") or None, group=name,
        job_type="search", name=f"{name} (search)", config=flat(cfg), id=run_id, resume="allow" if resume else None,
        tags=list(dict.fromkeys(tag[:64] for tag in ["search", (cfg.get("task") or {}).get("name", ""),
                                                     (cfg.get("model") or {}).get("name", ""),
                                                     *logging.get("tags", [])] if tag)),
        dir=str(out), mode=mode, reinit="create_new",
        settings=wandb.Settings(console="off", silent=True, x_disable_stats=True, x_disable_machine_info=True))
    exit_code = 1
    try:
        record = {"min_diversity": wandb.Table(dataframe=minimal)}
        if curve is not None:
            record["success_curve"] = wandb.Table(dataframe=curve)
        record |= {key: wandb.Image(figures.rgb(figure), caption=caption) for key, (figure, caption) in images.items()}
        run.log(record)
        run.summary.update(summary(minimal, slice_keys))
        exit_code = 0
    finally:
        run.finish(exit_code=exit_code)
    run_dir = Path(run.dir).parent
    if mode == "offline":
        print(logger.offline_notice("search run", why, logger.shown_path(run_dir)), file=sys.stderr)
    return run_dir


def summary(minimal: pd.DataFrame, slice_keys: list[str]) -> dict:
    """Per slice of min_diversity.csv: `star/<slice>`, `star_low/<slice>`, `star_high/<slice>` (the knob value; None
    where blank), `finished/<slice>` and `seeds/<slice>`; <slice> as the study names it after its prefix
    ("key=value,..." of the slice; "all" without slices)."""
    plain = lambda value: None if pd.isna(value) else value.item() if hasattr(value, "item") else value
    values = {}
    for _, row in minimal.iterrows():
        label = figures.slice_title(row, slice_keys).replace(", ", ",") or "all"
        for key, column in (("star", "diversity_star"), ("star_low", "diversity_star_low"),
                            ("star_high", "diversity_star_high"), ("finished", "finished"), ("seeds", "seeds")):
            if column in row:
                values[f"{key}/{label}"] = plain(row[column])
    return values


def _figures(cfg: dict, minimal: pd.DataFrame, curve: pd.DataFrame | None,
             slice_keys: list[str]) -> dict[str, tuple]:
    """{media key: (figure, caption)}: the success curves, and the diversity measure at diversity* per slice."""
    search = cfg.get("search") or {}
    success, knob = search.get("success") or {}, (search.get("knob") or {}).get("key")
    drawn = {}
    if knob and curve is not None and not curve.empty:
        q = float(success.get("rate", 0.5))
        drawn["success_curves"] = (report.draw_success_curves(curve, minimal, cfg),
                                   f"p(K) per slice with its interval; K*_q (q = {q:g}) and its interval shaded")
    axis = task_of(cfg).diversity_axis
    if slice_keys and axis in minimal and minimal[axis].notna().any():
        theory = theory_values(cfg, minimal, slice_keys, axis)
        drawn["threshold"] = (figures.threshold(minimal, slice_keys, axis, theory),
                              f"{axis} at diversity* with its interval (dashed: the theory's scale)")
    return drawn
