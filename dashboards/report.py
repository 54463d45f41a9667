"""The one report builder: `build(DIR)` writes DIR/report.html for any train, grid, search or distribution-search
output directory, reading only the files there. Every verb calls it when it ends and `headsweep report DIR` calls it on
demand, so report.html is the same whoever wrote it; it can be rebuilt after the fact, on another machine, or while
a grid still runs.

What it reads (DESIGN's output-dir contract): config.yaml (the task, the model, the sweep or search section),
result.json / results.csv / trials.csv for the numbers, metrics.jsonl for the curves, attention.npz for the
attention gallery (drawn by the task's and the model's figures, as the W&B media are), min_diversity.csv or best.csv
for a search. What is task-specific (headline metrics, the diversity measure, the theory's reference values, the
figures' landmarks) comes from the task registry: the task, and how it is shown from its view (view_of); nothing
here names a task's keys.
"""
from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from matplotlib.figure import Figure

from dashboards import figures
from dashboards.html import Section, gallery, render_table, write_report
from trainables import config, readouts
from trainables.errors import ConfigError
from trainables.io import FINISHED, OWN_VERDICT, atomic_write, parse_distribution, read_json, read_jsonl
from trainables.tasks import DEFAULT, TASKS, Task, TaskView, task_of, view_of

GALLERY_MEMBERS = 4  # members whose attention figures a grid or search report shows, spread over the diversity measure
SEARCH_COLUMNS = ["study", "candidate", "state", "feasible"]


def build(out: str | Path) -> Path:
    """Write out/report.html (and a grid's phase_diagram.png) and return its path. ConfigError (naming DIR) when
    `out` holds no headsweep output; then nothing is written."""
    out = Path(out)
    kind = detect(out)
    cfg = read_config(out / "config.yaml")
    task = task_of(cfg) if cfg else TASKS[DEFAULT]
    view = view_of(task)  # how the task is shown: headline and table columns, labels, figures
    members = [out] if kind == "train" else member_dirs(out)
    frame = results(out, kind, members)
    finished = frame[frame["status"].isin(FINISHED)] if "status" in frame else frame

    sections = [Section("Summary", html=_summary_html(kind, frame, view))]
    if kind == "grid":
        sections += _phase_diagram(out, finished, cfg, view)
    elif (out / "best.csv").exists():
        sections += _distribution_search(out, frame, cfg, task)
    elif (out / "min_diversity.csv").exists():
        # a seed stopped once its candidate was decided has no verdict of its own: its metrics are no cell's evidence
        judged = finished[finished["status"].isin(OWN_VERDICT)] if "status" in finished else finished
        sections += _threshold_search(out, judged, cfg, task)
    sections += _curves(members, finished, view)
    sections += _gallery(members, kind, cfg, view)
    if not frame.empty:
        heading = "Result" if kind == "train" else "Results (one row per member)"
        sections.append(Section(heading, table=frame[_table_columns(out, frame, view)]))
    if (out / "config.yaml").exists():
        sections.append(Section("Config", text=(out / "config.yaml").read_text()))
    name = (cfg or {}).get("name") or out.name
    return write_report(out / "report.html", f"headsweep {kind}: {name}", sections)


def detect(out: Path) -> str:
    """'train', 'grid' or 'search' from the files in `out`; ConfigError if it holds none of a verb's outputs."""
    if not out.is_dir():
        raise ConfigError("DIR", f"{out} is not a directory")
    if (out / "results.csv").exists():
        return "grid"
    if any((out / f).exists() for f in ("trials.csv", "study.journal", "min_diversity.csv", "best.csv")):
        return "search"
    if (out / "result.json").exists() or (out / "metrics.jsonl").exists():
        return "train"
    if member_dirs(out):
        return "grid"  # a grid still running: its members are there, results.csv not yet
    raise ConfigError("DIR", f"{out} holds no headsweep output (result.json, metrics.jsonl, results.csv, trials.csv "
                             "or trials/*/metrics.jsonl)")


def member_dirs(out: Path) -> list[Path]:
    """Member directories of a grid or search: trials/<member>/ holding a metrics.jsonl."""
    return sorted(path.parent for path in out.glob("trials/*/metrics.jsonl"))


def read_config(path: Path) -> dict | None:
    """An output dir's config.yaml as a plain dict (None when there is none)."""
    return yaml.safe_load(path.read_text()) if path.exists() else None


def results(out: Path, kind: str, members: list[Path]) -> pd.DataFrame:
    """One row per member: results.csv / trials.csv when there, else each member's result.json. Its id is in column
    `member`; a results.csv written before that column had only `trial`, which then stands in for it."""
    for table in ("results.csv", "trials.csv"):
        if kind != "train" and (out / table).exists():
            frame = read_table(out / table)
            if "member" not in frame.columns and "trial" in frame.columns:
                frame = frame.rename(columns={"trial": "member"})
            return frame
    rows = [{"member": member.name} | read_json(member / "result.json") for member in members
            if (member / "result.json").exists()]
    return pd.DataFrame(rows)


def _summary_html(kind: str, frame: pd.DataFrame, view: TaskView) -> str:
    if frame.empty or "status" not in frame.columns:
        return "<p>Nothing finished yet.</p>"
    if kind == "train":
        row = frame.iloc[0]
        fields = [f"{k} = {row[k]:.3f}" for k in view.headline if isinstance(row.get(k), float)]
        return f"<p>Status: {row['status']}; " + ", ".join(fields) + ".</p>"
    counts = frame["status"].value_counts().to_dict()
    return f"<p>{len(frame)} members: " + ", ".join(f"{n} {status}" for status, n in counts.items()) + ".</p>"


def _phase_diagram(out: Path, finished: pd.DataFrame, cfg: dict | None, view: TaskView) -> list[Section]:
    """The sweep's phase diagram, drawn from the results and written to phase_diagram.png beside them; the saved
    picture when the results cannot be drawn (a grid from another version, a column missing)."""
    figure, metric = draw_phase_diagram(finished, cfg, view)
    if figure is not None:
        png = figures.png_bytes(figure)  # drawn once: a large diagram takes a good part of a second
        atomic_write(out / "phase_diagram.png", png)
        _, _, x, y = _diagram(cfg)
        return [Section(f"Phase diagram: mean {metric} over seeds", image_png=png,
                        alt=f"phase diagram of {metric} over {x} and {y}")]
    if (out / "phase_diagram.png").exists():
        return [Section("Phase diagram", image_png=(out / "phase_diagram.png").read_bytes(), alt="phase diagram")]
    return []


def draw_phase_diagram(finished: pd.DataFrame, cfg: dict | None, view: TaskView) -> tuple[Figure | None, str]:
    """A grid's phase diagram (the sweep section's x, y, metric and ratio level) from its finished members, and the
    metric it shows; no figure where the results cannot be drawn."""
    task, (keys, diagram, x, y) = view.task, _diagram(cfg)
    metric, level = diagram.get("metric") or task.success_metric, diagram.get("ratio_level") or None
    if not (x in keys and len(finished)) or (y is not None and y not in keys):
        return None, metric
    try:
        if y is None:  # a one-axis grid
            return figures.one_axis(finished, x, metric), metric
        return figures.phase_diagram(finished, x, y, metric, ratio_level=level, ratio_metric=task.diversity_axis,
                                     ratio_label=view.short_names.get(task.diversity_axis, ""),
                                     panels=[k for k in keys if k not in (x, y)]), metric
    except ValueError:
        return None, metric


def _diagram(cfg: dict | None) -> tuple[list[str], dict, str | None, str | None]:
    """The sweep's keys, its phase_diagram section, and the diagram's x and y (by default its first two keys)."""
    sweep = (cfg or {}).get("sweep") or {}
    keys = [axis["key"] for axis in sweep.get("axes", [])]
    diagram = sweep.get("phase_diagram", {})
    x, y = diagram.get("x") or (keys[0] if keys else None), diagram.get("y") or (keys[1] if len(keys) > 1 else None)
    return keys, diagram, x, y


def _threshold_search(out: Path, finished: pd.DataFrame, cfg: dict, task: Task) -> list[Section]:
    """min_diversity.csv (each slice's K*_q with its interval, a note naming the slices not finished), the success
    curves behind it (success_curve.csv, drawn and as a table), the search's traces over the phase diagram of what it
    evaluated, and the diversity measure at diversity* per slice, with its interval, beside the theory's value."""
    search = cfg.get("search") or {}
    minimal = pd.read_csv(out / "min_diversity.csv")
    success = search.get("success") or {}
    slice_keys = [axis["key"] for axis in search.get("slices", [])]
    knob, metric = search.get("knob", {}).get("key"), success.get("metric", task.success_metric)
    axis = task.diversity_axis
    sections = [Section("Minimal diversity for OOD generalization (min_diversity.csv)",
                        html=_open_note(minimal, slice_keys) + _answer_tables(minimal, slice_keys, axis)
                        + _answer_legend(success, axis, None if "diversity_star_low" in minimal
                                         else search.get("sampler", "m-of-n")))]
    curve = read_table(out / "success_curve.csv")
    if knob and not curve.empty:
        try:
            q = float(success.get("rate", 0.5))
            sections.append(_figure(f"Success curves: p(K) per slice, K*_q shaded with its interval (q = {q:g})",
                                    draw_success_curves(curve, minimal, cfg), "success curves"))
        except (KeyError, ValueError) as e:
            sections.append(Section("Success curves", text=f"not drawn: {type(e).__name__}: {e}"))
    if knob and not finished.empty:
        try:
            keys = slice_keys or ["study"]  # a single study: its one column, named by the study
            figure = figures.phase_diagram(finished, keys[0], knob, metric, panels=keys[1:])
            figures.search_traces(figure, finished, minimal, keys, knob)
            traces = "traces over the points they evaluated" if slice_keys else "trace over the points it evaluated"
            sections.append(_figure(f"Search {traces} (numbers: evaluation order; star: diversity*; red bracket: its "
                                    "interval)", figure, "search traces"))
            if slice_keys and axis in minimal and minimal[axis].notna().any():
                theory = theory_values(cfg, minimal, slice_keys, axis)
                sections.append(_figure(f"Measured threshold: {axis} at diversity* with its interval (dashed: the "
                                        "theory's scale)", figures.threshold(minimal, slice_keys, axis, theory),
                                        f"{axis} at the minimal diversity"))
        except (KeyError, ValueError) as e:  # a table this code does not know: say so, keep the rest
            sections.append(Section("Search figures", text=f"not drawn: {type(e).__name__}: {e}"))
    if not curve.empty:
        sections.append(Section("Success curves (success_curve.csv): seeds trained and passed at each knob value, "
                                "p with its interval", table=curve))
    return sections


def draw_success_curves(curve: pd.DataFrame, minimal: pd.DataFrame, cfg: dict) -> Figure:
    """A threshold search's success curves (success_curve.csv) with its answers (min_diversity.csv), one panel per
    slice. KeyError or ValueError where the tables cannot be drawn."""
    search = cfg.get("search") or {}
    success = search.get("success") or {}
    return figures.success_curves(curve, minimal, [axis["key"] for axis in search.get("slices", [])],
                                  search["knob"]["key"], float(success.get("rate", 0.5)), success.get("confidence"))


def _figure(heading: str, figure: Figure, alt: str) -> Section:
    return Section(heading, image_png=figures.png_bytes(figure), alt=alt)


def read_table(path: Path) -> pd.DataFrame:
    """A table of an output dir; empty where it is absent (a dir from before it was written) or holds nothing (a
    search stopped before any member ended)."""
    try:
        return pd.read_csv(path) if path.exists() else pd.DataFrame()
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def _open_note(minimal: pd.DataFrame, slice_keys: list[str]) -> str:
    """A visible paragraph naming the slices whose search stopped before their answer settled ("" when none)."""
    unfinished = minimal[figures.open_slices(minimal)]
    if unfinished.empty:
        return ""
    names = [figures.slice_title(row, slice_keys) if slice_keys else str(row.get("study", "the search"))
             for _, row in unfinished.iterrows()]
    return (f'<p style="color: {figures.OPEN_COLOUR}; font-weight: bold">Not finished: '
            f"{html.escape('; '.join(names))}: the answer may still move.</p>\n")


def _answer_tables(minimal: pd.DataFrame, slice_keys: list[str], axis: str) -> str:
    """The table the terminal prints (its column names, narrow enough for a laptop's window), then every column of
    min_diversity.csv folded away; the CSV alone where it predates the terminal's columns."""
    try:
        shown = render_table(figures.answer_table(minimal, slice_keys, axis))
    except KeyError:  # a min_diversity.csv written before p_at_widest
        return render_table(minimal)
    return (shown + "<details><summary>Every column of min_diversity.csv</summary>\n" + render_table(minimal)
            + "</details>\n")


def _answer_legend(success: dict, axis: str, m_of_n: str | None) -> str:
    """One paragraph saying what the table's columns mean, and their names in min_diversity.csv, with q and the
    confidence from config.yaml; `m_of_n`: the sampler's name where the table has no interval (its m-of-n answer)."""
    q, confidence = success.get("rate", 0.5), success.get("confidence", 0.95)
    level = f"{float(confidence):.0%}" if isinstance(confidence, (int, float)) else str(confidence)
    text = (f"K*_q: the smallest knob value at which a seed passes with probability at least q = {q} (the smallest "
            f"tried value whose monotone rate reaches q; -: past the widest value), with its {level} interval, whose "
            "ends are values seeds were trained at ('beyond': open, no value tried rules out 'none'); "
            f"{axis} at K* and at the interval's ends; p at widest: p at the widest value trained, with its interval; "
            "seeds: seeds trained behind the answer; stopped: settled, budget, plateau near q (rates around the "
            "crossing within 0.15 of q: more seeds will not settle it), failing (its evaluations kept failing: "
            "trials.csv's error says why) or 'no (open)' where the search stopped before the answer settled. In "
            "min_diversity.csv: diversity_star, diversity_star_low, diversity_star_high (blank: "
            f"past the widest value, or open), {axis}, {axis}_low, {axis}_high, widest_tried, p_at_widest, finished, "
            "stopped and to_settle: about how many more trainings (--extend) would settle it at the current rates.")
    if m_of_n is not None:
        text = (f"K*_q: the {m_of_n} sampler's m-of-n answer, the smallest value at which the required seeds "
                "succeeded with every wider value evaluated succeeding too (diversity_star in min_diversity.csv); no "
                "interval (it trains the same seeds at every value, which the interval's tests cannot treat as "
                "independent).")
    return f"<p>{html.escape(text)}</p>\n"


def _distribution_search(out: Path, members: pd.DataFrame, cfg: dict, task: Task) -> list[Section]:
    """best.csv and, for a search that minimised a metric (a distribution search): every candidate's objective
    against the diversity measure, the search's progress, and the best distributions against the reference's."""
    search = cfg.get("search") or {}
    best = pd.read_csv(out / "best.csv")
    reference = ", ".join(f"{k}={v}" for k, v in (search.get("reference") or {}).items()) or "none"
    metric = minimized(search)
    sections = [Section(f"Lowest {metric} that generalizes, per slice (best.csv; reference: {reference})", table=best)]
    for column in ("q", "reference q"):
        if column in best.columns:
            best[column] = best[column].map(parse_distribution)
    slice_keys = [axis["key"] for axis in search.get("slices", [])]
    success = search.get("success", {})
    min_rate = success.get("min_seeds", 1) / max(1, len(success.get("seeds", [0])))
    try:
        if "feasible" in members.columns and members["feasible"].notna().any():
            theory = theory_values(cfg, best, slice_keys, task.diversity_axis)
            cost = figures.distribution_cost(members, best, metric, task.diversity_axis, slice_keys, theory, min_rate)
            sections += [
                _figure(f"Every candidate: {metric} against {task.diversity_axis} (filled: generalizes; star: best; "
                        "diamond: reference; dashed: the theory's scale)", cost,
                        f"{metric} against {task.diversity_axis}"),
                _figure("Search progress: best feasible value after each evaluation (dashed: reference)",
                        figures.distribution_progress(members, best, metric, slice_keys), "search progress")]
        if "q" in best.columns and best["q"].map(lambda q: isinstance(q, dict)).any():
            sections.append(_figure("Best distribution found (bars) against the reference (line)",
                                    figures.distributions(best, slice_keys, "value"), "best distributions"))
    except (KeyError, ValueError) as e:
        sections.append(Section("Search figures", text=f"not drawn: {type(e).__name__}: {e}"))
    return sections


def minimized(search: dict) -> str | None:
    """The metric a search section minimised (a distribution search), else None; the flat key: written before
    search.tpe."""
    return (search.get("tpe") or {}).get("minimize") or search.get("minimize")


def theory_values(cfg: dict, rows: pd.DataFrame, slice_keys: list[str], metric: str) -> list[float | None]:
    """The task's reference value of `metric` for each row's slice (None where the theory says nothing)."""
    configs = slice_configs(cfg, rows, slice_keys)
    return [task_of(c).theory(c.task).get(metric) if c is not None else None for c in configs]


def slice_configs(cfg: dict, rows: pd.DataFrame, keys: list[str]) -> list[config.Config | None]:
    """For each row, the output dir's config (`cfg`, a plain dict) with the row's values of `keys` set; None where
    that is no valid config (a slice value the row leaves empty)."""
    trial = {k: v for k, v in cfg.items() if k not in config.ORCHESTRATION_SECTIONS}
    base = config.to_dict(config.from_layers([trial], check_device=False))
    configs = []
    for _, row in rows.iterrows():
        try:
            configs.append(config.with_point(base, {key: _plain(row[key]) for key in keys}, check_device=False))
        except ConfigError:
            configs.append(None)
    return configs


def _curves(members: list[Path], finished: pd.DataFrame, view: TaskView) -> list[Section]:
    """Final headline metrics against the diversity measure (several members), and curves over steps when members
    evaluated more than once."""
    sections = []
    axis = view.task.diversity_axis
    shown = [m for m in view.headline if not m.startswith("data/") and m in finished.columns]
    varies = axis in finished.columns and finished[axis].nunique() > 1  # a constant axis says nothing
    if len(members) > 1 and varies and shown:
        x = pd.to_numeric(finished[axis], errors="coerce").to_numpy()
        figure = figures.against(x, {m: pd.to_numeric(finished[m], errors="coerce").to_numpy() for m in shown},
                                 view.diversity_label or axis)
        sections.append(_figure(f"Final metrics against {axis}, one point per member", figure,
                                f"final metrics against {axis}"))
    runs = {member.name: records for member in members if (records := read_jsonl(member / "metrics.jsonl"))}
    if not runs or (len(runs) > 1 and max(len(records) for records in runs.values()) < 2):
        return sections  # one evaluation per member (the one-step model): the scatter above says it all
    if len(runs) == 1:
        return sections + [_figure("Learning curves (metrics.jsonl)", figures.curves(runs, view.curve_metrics),
                                   "loss and accuracy over training steps")]
    colours = {name: records[-1].get(axis) for name, records in runs.items()}
    figure = figures.curves(runs, view.curve_metrics, colour_by=colours, colour_label=view.diversity_label or axis)
    return sections + [_figure(f"Learning curves of {len(runs)} members, coloured by {axis}", figure,
                               "loss and accuracy over training steps, one line per member")]


def _gallery(members: list[Path], kind: str, cfg: dict | None, view: TaskView) -> list[Section]:
    """Every figure of the chosen members' attention.npz: all of a train run; a few members of a grid or search,
    spread from the most to the least diverse."""
    task, with_arrays = view.task, [t for t in members if (t / "attention.npz").exists()]
    if not with_arrays:
        return []
    first_axis = next(iter(((cfg or {}).get("sweep") or {}).get("axes", [])), {}).get("key")
    chosen, spread_over = (with_arrays, "") if kind == "train" else _spread(with_arrays, task, first_axis)
    parts = []
    for member in chosen:
        with np.load(member / "attention.npz") as npz:
            arrays = dict(npz)
        member_cfg = read_config(member / "config.yaml") or cfg
        if member_cfg is None:
            continue
        result = read_json(member / "result.json") or {}
        facts = ", ".join(f"{k} = {result[k]:.3f}" for k in (task.success_metric, task.diversity_axis)
                          if isinstance(result.get(k), float))
        drawn = [(figures.png_bytes(figure), key) for key, figure in readouts.trial_figures(member_cfg, arrays).items()]
        heading = None if kind == "train" else member.name + (f" ({facts})" if facts else "")
        if drawn:
            parts.append(gallery(drawn, heading))
    if not parts:  # a task and model with nothing to draw (no figures of their own, no attention)
        return []
    title = "Attention gallery (attention.npz)" if kind == "train" else \
        f"Attention gallery: {len(chosen)} of {len(with_arrays)} members, {spread_over}"
    return [Section(title, html=f"<p>{html.escape(view.figure_note)}</p>\n" + "\n".join(parts))]


def _spread(members: list[Path], task: Task, first_axis: str | None = None) -> tuple[list[Path], str]:
    """Up to GALLERY_MEMBERS members evenly spread over the task's diversity measure, the most diverse first; where
    every member has the same measure (a grid over something else), one member per value of the grid's first axis
    first. With how they were chosen, for the gallery's title."""
    sign = 1.0 if task.small_is_diverse else -1.0

    def measure(member: Path) -> float:
        records = read_jsonl(member / "metrics.jsonl")
        value = records[-1].get(task.diversity_axis) if records else None
        return sign * value if isinstance(value, (int, float)) and math.isfinite(value) else math.inf

    measures = {member: measure(member) for member in members}
    ordered = sorted(members, key=lambda t: (measures[t], t.name))
    said = "from most to least diverse"
    if len(ordered) <= GALLERY_MEMBERS:
        return ordered, said
    if first_axis and len(set(measures.values())) == 1:
        one_per_value = {}
        for member in ordered:
            one_per_value.setdefault(str(_dotted(read_config(member / "config.yaml") or {}, first_axis)), member)
        firsts = list(one_per_value.values())
        return (firsts + [t for t in ordered if t not in firsts])[:GALLERY_MEMBERS], f"one per value of {first_axis}"
    picks = np.linspace(0, len(ordered) - 1, GALLERY_MEMBERS).round().astype(int)
    return [ordered[i] for i in dict.fromkeys(picks.tolist())], said


def _dotted(cfg: dict, key: str):
    """The value at a dotted key of a plain config dict (None where it has none)."""
    for part in key.split("."):
        cfg = cfg.get(part) if isinstance(cfg, dict) else None
    return cfg


def _table_columns(out: Path, frame: pd.DataFrame, view: TaskView) -> list[str]:
    """Swept keys and the member's id first (a search's study, candidate and state too), then the task's table
    columns that are present, then the error if any member has one."""
    swept = [c for c in frame.columns if "." in c and "/" not in c]
    first = [c for c in SEARCH_COLUMNS if c in frame.columns] + swept
    first += [c for c in ("seed", "member") if c in frame.columns and c not in swept]
    if not (out / "trials").is_dir():
        first = [c for c in first if c != "member"]  # a train dir: the row is the run itself
    metrics = [c for c in (*view.table_columns, "status", "steps", "seconds") if c in frame.columns]
    # dropna, not fillna(""): a column of no errors is all NaN (float), which pandas 4 will not fill with a string
    error = ["error"] if "error" in frame.columns and frame["error"].dropna().astype(str).str.len().any() else []
    return list(dict.fromkeys(first + metrics + error))


def _plain(value):
    """A CSV cell as a config value: 4.0 -> 4 (integer columns with a gap come back as floats), numpy -> Python."""
    value = value.item() if isinstance(value, np.generic) else value
    return int(value) if isinstance(value, float) and value.is_integer() else value

