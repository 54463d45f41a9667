"""`headsweep report DIR`: (re)build the self-contained report.html of any train, grid or search output directory.

Everything is read back from the files the verbs leave (DESIGN's output-dir contract), so a report can be rebuilt
after the fact, on another machine, or while a grid is still running: result.json / results.csv / trials.csv for the
numbers, metrics.jsonl for the curves, attention.npz for the attention gallery (drawn by trainables.media, the same
figures the W&B runs get), min_diversity.csv or best.csv when a search left one, config.yaml for the figures' axes.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from omegaconf import OmegaConf

from dashboards.report import Section, gallery, write_report
from trainables import media
from trainables.errors import ConfigError

GALLERY_TRIALS = 4  # trials whose attention figures a grid/search report shows, spread from least to most diverse
RESULT_COLUMNS = ["ood/acc", "id/acc", "ood/pseudo_rate", "mech/induction_score", "mech/positional_score",
                  "data/max_sum_ratio", "data/width", "status", "steps", "seconds"]
RATIO = "data/max_sum_ratio"
AGAINST_RATIO = ["ood/acc", "mech/induction_score", "ood/pseudo_rate"]  # final values plotted against R


def build(out: str | Path) -> Path:
    """Write out/report.html for a train, grid or search output dir and return its path. ConfigError (naming DIR)
    when `out` is not one; then nothing is written."""
    out = Path(out)
    kind = detect(out)
    name = _experiment_name(out)
    trials = [out] if kind == "train" else trial_dirs(out)
    frame = _results(out, kind, trials)

    sections = [Section("Summary", html=_summary_html(kind, frame))]
    if kind == "grid":
        sections += _phase_diagram(out, frame)
    elif kind == "search":
        sections += _search_diagrams(out, frame)
    for table_file, heading in (("min_diversity.csv", "Minimal diversity for OOD generalization"),
                                ("best.csv", "Cheapest distribution that generalizes, beside the reference")):
        if (out / table_file).exists():
            sections.append(Section(f"{heading} ({table_file})", table=pd.read_csv(out / table_file)))
    sections += _curves(trials, frame)
    sections += _gallery(trials, frame, kind)
    if not frame.empty:
        heading = "Result" if kind == "train" else "Results (one row per trial)"
        sections.append(Section(heading, table=frame[[c for c in _table_columns(out, frame)]]))
    if (out / "config.yaml").exists():
        sections.append(Section("Config", text=(out / "config.yaml").read_text()))
    return write_report(out / "report.html", f"headsweep {kind}: {name}", sections)


def detect(out: Path) -> str:
    """'train', 'grid' or 'search' from the files in `out`; ConfigError if it holds none of a verb's outputs."""
    if not out.is_dir():
        raise ConfigError("DIR", f"{out} is not a directory")
    if (out / "results.csv").exists():
        return "grid"
    if any((out / f).exists() for f in ("trials.csv", "study.journal", "min_diversity.csv")):
        return "search"
    if (out / "result.json").exists() or (out / "metrics.jsonl").exists():
        return "train"
    if trial_dirs(out):
        return "grid"  # a grid still running: its trials are there, results.csv not yet
    raise ConfigError("DIR", f"{out} holds no headsweep output (result.json, metrics.jsonl, results.csv, trials.csv "
                             "or trials/*/metrics.jsonl)")


def trial_dirs(out: Path) -> list[Path]:
    """Trial directories of a grid or search: trials/<name>/ holding a metrics.jsonl."""
    return sorted(path.parent for path in out.glob("trials/*/metrics.jsonl"))


def read_metrics(path: Path) -> list[dict]:
    """The records of a metrics.jsonl; a torn last line (a trial killed mid-write) is skipped."""
    records = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records


def _experiment_name(out: Path) -> str:
    if (out / "config.yaml").exists():
        name = OmegaConf.load(out / "config.yaml").get("name")
        if name:
            return str(name)
    return out.name


def _results(out: Path, kind: str, trials: list[Path]) -> pd.DataFrame:
    """One row per trial: results.csv / trials.csv when there, else each trial's result.json."""
    for table in ("results.csv", "trials.csv"):
        if kind != "train" and (out / table).exists():
            return pd.read_csv(out / table)
    rows = []
    for trial in trials:
        if (trial / "result.json").exists():
            rows.append({"trial": trial.name} | json.loads((trial / "result.json").read_text()))
    return pd.DataFrame(rows)


def _summary_html(kind: str, frame: pd.DataFrame) -> str:
    if frame.empty or "status" not in frame.columns:
        return "<p>No finished trial yet.</p>"
    if kind == "train":
        row = frame.iloc[0]
        fields = [f"{k} = {row[k]:.3f}" for k in ("ood/acc", "id/acc", "mech/induction_score", RATIO)
                  if k in row and isinstance(row[k], float)]
        return f"<p>Status: {row['status']}; " + ", ".join(fields) + ".</p>"
    counts = frame["status"].value_counts().to_dict()
    return f"<p>{len(frame)} trials: " + ", ".join(f"{n} {status}" for status, n in counts.items()) + ".</p>"


def _phase_diagram(out: Path, frame: pd.DataFrame) -> list[Section]:
    """Drawn from the results and the sweep's phase_diagram settings; else the phase_diagram.png left there."""
    from sweep import plots  # matplotlib figures of results tables live with the grid code

    sweep = OmegaConf.load(out / "config.yaml").get("sweep") if (out / "config.yaml").exists() else None
    if sweep is not None and not frame.empty and "status" in frame.columns:
        keys = [axis["key"] for axis in sweep.get("axes", [])]
        diagram = sweep.get("phase_diagram", {})
        x, y = diagram.get("x", "task.lengths.low"), diagram.get("y", "task.lengths.high")
        metric, level = diagram.get("metric", "ood/acc"), diagram.get("ratio_level", 0.0)
        finished = frame[frame["status"].isin(["completed", "early_stopped", "diverged"])]
        if x in keys and y in keys and len(finished):
            try:
                figure = plots.phase_diagram(finished, x, y, metric, ratio_level=level or None,
                                             panels=[k for k in keys if k not in (x, y)])
            except ValueError:
                figure = None  # columns missing or an axis averaged over: fall back to the saved picture
            if figure is not None:
                return [Section(f"Phase diagram: mean {metric} over seeds", image_png=media.png_bytes(figure),
                                alt=f"phase diagram of {metric} over {x} and {y}")]
    if (out / "phase_diagram.png").exists():
        return [Section("Phase diagram", image_png=(out / "phase_diagram.png").read_bytes(), alt="phase diagram")]
    return []


def _search_diagrams(out: Path, trials: pd.DataFrame) -> list[Section]:
    """The search's own figures (sweep/search_outputs.py): its traces over the phase diagram of what it evaluated,
    and R at diversity* per slice."""
    from sweep import plots, search_outputs

    search = OmegaConf.load(out / "config.yaml").get("search") if (out / "config.yaml").exists() else None
    if search is None or trials.empty or "status" not in trials.columns:
        return []
    if (out / "best.csv").exists():
        return _shape_diagrams(out, trials, search)
    if not (out / "min_diversity.csv").exists():
        return []
    minimal = pd.read_csv(out / "min_diversity.csv")
    slice_keys = [axis["key"] for axis in search.get("slices", [])]
    knob, metric = search["knob"]["key"], search.get("success", {}).get("metric", "ood/acc")
    finished = trials[trials["status"].isin(["completed", "early_stopped", "diverged"])]
    if not slice_keys or finished.empty:
        return []
    try:
        figure = plots.phase_diagram(finished, slice_keys[0], knob, metric, panels=slice_keys[1:])
        search_outputs.draw_traces(figure, finished, minimal, slice_keys, knob)
        sections = [Section("Search traces over the points they evaluated (numbers: evaluation order; star: "
                            "diversity*)", image_png=media.png_bytes(figure), alt="search traces")]
        if minimal["data/max_sum_ratio"].notna().any():
            sections.append(Section("Measured threshold: max-sum ratio R at diversity*",
                                    image_png=media.png_bytes(search_outputs.threshold_figure(minimal, slice_keys)),
                                    alt="max-sum ratio at the minimal diversity"))
        return sections
    except (KeyError, ValueError) as e:  # a results table this code does not know: say so, keep the rest
        return [Section("Search traces", text=f"not drawn: {type(e).__name__}: {e}")]


def _shape_diagrams(out: Path, trials: pd.DataFrame, search) -> list[Section]:
    """A search that minimised a metric (sweep/best_outputs.py): cost against R, its progress, the best shapes."""
    from sweep import best_outputs
    from sweep.search import SearchConfig

    best = pd.read_csv(out / "best.csv")
    for column in ("q", "reference q"):
        if column in best.columns:
            best[column] = best[column].map(best_outputs.parse_shape)
    try:
        section = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SearchConfig), search))
        return best_outputs.figure_sections(trials, best, section)
    except (KeyError, ValueError) as e:  # a table or config this code does not know: say so, keep the rest
        return [Section("Search figures", text=f"not drawn: {type(e).__name__}: {e}")]


def _curves(trials: list[Path], frame: pd.DataFrame) -> list[Section]:
    """Final metrics against R (grid, search), and curves over steps when trials evaluated more than once."""
    sections = []
    finished = frame[frame["status"].isin(["completed", "early_stopped", "diverged"])] if "status" in frame else frame
    shown = [m for m in AGAINST_RATIO if m in finished.columns]
    if len(trials) > 1 and RATIO in finished.columns and shown and len(finished):
        x = pd.to_numeric(finished[RATIO], errors="coerce").to_numpy()
        figure = media.against(x, {m: pd.to_numeric(finished[m], errors="coerce").to_numpy() for m in shown},
                               f"{RATIO} (small = diverse)")
        sections.append(Section(f"Final metrics against {RATIO}, one point per trial",
                                image_png=media.png_bytes(figure), alt=f"final metrics against {RATIO}"))
    runs = {trial.name: read_metrics(trial / "metrics.jsonl") for trial in trials}
    runs = {name: records for name, records in runs.items() if records}
    if not runs or (len(runs) > 1 and max(len(records) for records in runs.values()) < 2):
        return sections  # one evaluation per trial (the one-step model): the scatter above says it all
    if len(runs) == 1:
        figure = media.curves(runs)
        return sections + [Section("Learning curves (metrics.jsonl)", image_png=media.png_bytes(figure),
                                   alt="loss and accuracy over training steps")]
    ratios = {name: records[-1].get(RATIO) for name, records in runs.items()}
    figure = media.curves(runs, colour_by=ratios, colour_label=f"{RATIO} (small = diverse)")
    return sections + [Section(f"Learning curves of {len(runs)} trials, coloured by {RATIO}",
                               image_png=media.png_bytes(figure),
                               alt="loss and accuracy over training steps, one line per trial")]


def _gallery(trials: list[Path], frame: pd.DataFrame, kind: str) -> list[Section]:
    """Every attention figure of the chosen trials: all of a train run; a few trials of a grid, spread over R."""
    with_arrays = [t for t in trials if (t / "attention.npz").exists()]
    if not with_arrays:
        return []
    chosen = with_arrays if kind == "train" else _spread(with_arrays)
    parts = []
    for trial in chosen:
        with np.load(trial / "attention.npz") as npz:
            arrays = dict(npz)
        result = json.loads((trial / "result.json").read_text()) if (trial / "result.json").exists() else {}
        facts = ", ".join(f"{k} = {result[k]:.3f}" for k in ("ood/acc", RATIO, "mech/induction_score")
                          if isinstance(result.get(k), float))
        figures = [(media.png_bytes(figure), key) for key, figure in media.figures(arrays).items()]
        heading = None if kind == "train" else f"{trial.name}" + (f" ({facts})" if facts else "")
        parts.append(gallery(figures, heading))
    title = "Attention gallery (attention.npz)" if kind == "train" else \
        f"Attention gallery: {len(chosen)} of {len(with_arrays)} trials, from most to least diverse"
    note = ("<p>Attention at the query per layer and head: first trigger ▼, output token ○ (the induction head's "
            "target), shortcut position □. W_KQ: the one-step model's key-query matrix with its position, token and "
            "previous-token blocks. Accuracy by (l1, l2): every OOD length pair; training lengths sit on the "
            "diagonal.</p>")
    return [Section(title, html=note + "\n".join(parts))]


def _spread(trials: list[Path]) -> list[Path]:
    """Up to GALLERY_TRIALS trials evenly spread over their max-sum ratio, most diverse (smallest R) first."""
    def ratio(trial: Path) -> float:
        records = read_metrics(trial / "metrics.jsonl")
        value = records[-1].get(RATIO) if records else None
        return value if value is not None else float("inf")

    ordered = sorted(trials, key=lambda t: (ratio(t), t.name))
    if len(ordered) <= GALLERY_TRIALS:
        return ordered
    picks = np.linspace(0, len(ordered) - 1, GALLERY_TRIALS).round().astype(int)
    return [ordered[i] for i in dict.fromkeys(picks.tolist())]


def _table_columns(out: Path, frame: pd.DataFrame) -> list[str]:
    """Swept keys and trial name first, then the headline metrics present, then the error if any."""
    swept = [c for c in frame.columns if "." in c and "/" not in c]
    first = swept + [c for c in ("seed", "trial", "number") if c in frame.columns and c not in swept]
    if not (out / "trials").is_dir():
        first = [c for c in first if c != "trial"]  # a train dir: the row is the run itself
    metrics = [c for c in RESULT_COLUMNS if c in frame.columns]
    error = ["error"] if "error" in frame.columns and frame["error"].fillna("").astype(str).str.len().any() else []
    return list(dict.fromkeys(first + metrics + error))
