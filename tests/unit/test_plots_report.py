"""Phase diagram (sweep/plots.py) and the self-contained HTML report (dashboards/report.py)."""
import base64
import io
import math
import os
import warnings

import numpy as np
import pandas as pd
import pytest
from matplotlib.contour import ContourSet
from matplotlib.figure import Figure
from PIL import Image

from dashboards.html import Section, gallery, write_report
from dashboards.figures import phase_diagram, png_bytes, save_png

LOW, HIGH, N_TRG = "task.lengths.low", "task.lengths.high", "task.n_triggers"


def diagram(results, x, y, **options):
    """The phase diagram of ood/acc with the max-sum ratio as the contour's measure (what a trigger-copy grid draws)."""
    return phase_diagram(results, x, y, "ood/acc", ratio_metric="data/max_sum_ratio", ratio_label="R", **options)


def max_sum_ratio(low: int, high: int) -> float:
    """R of Unif{low..high} (SPEC §1), computed here independently of trainables."""
    return (1 / low) / sum(1 / l for l in range(low, high + 1))


def grid_results(lows=range(3, 8), highs=range(4, 10), n_triggers=(4, 8), seeds=(0, 1, 2), skip=()) -> pd.DataFrame:
    """Synthetic results.csv: low < high only, per-seed noise so the seed mean is not any single row."""
    rng = np.random.default_rng(0)
    rows = []
    for n in n_triggers:
        for low in lows:
            for high in highs:
                if low >= high or (low, high) in skip:
                    continue
                for seed in seeds:
                    rows.append({LOW: low, HIGH: high, N_TRG: n, "seed": seed,
                                 "ood/acc": float(rng.uniform()), "data/max_sum_ratio": max_sum_ratio(low, high),
                                 "status": "completed", "error": "", "seconds": 1.0, "trial": f"t{len(rows)}"})
    return pd.DataFrame(rows)


def panel_axes(fig):
    """The heatmap panels (the colour bar's axes hold no AxesImage)."""
    return [ax for ax in fig.axes if ax.images]


def contours(ax):
    return [c for c in ax.collections if isinstance(c, ContourSet)]


def test_heatmap_is_the_seed_mean_and_nan_where_no_trial_ran():
    df = grid_results(n_triggers=(4,), skip={(4, 8)})
    fig = diagram(df, LOW, HIGH, panels=[N_TRG])
    (ax,) = panel_axes(fig)
    shown = np.ma.filled(ax.images[0].get_array().astype(float), np.nan)  # (n_high, n_low), origin lower
    lows, highs = sorted(df[LOW].unique()), sorted(df[HIGH].unique())
    assert shown.shape == (len(highs), len(lows))
    for i, high in enumerate(highs):
        for j, low in enumerate(lows):
            accs = [r["ood/acc"] for _, r in df.iterrows() if r[LOW] == low and r[HIGH] == high]
            if accs:
                assert shown[i, j] == pytest.approx(sum(accs) / len(accs))
            else:  # the low >= high triangle and the skipped cell
                assert math.isnan(shown[i, j]), (low, high)
    assert math.isnan(shown[highs.index(8), lows.index(4)])
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(v) for v in lows]
    assert ax.get_xlabel() == LOW and ax.get_ylabel() == HIGH
    assert ax.get_ylim()[0] < ax.get_ylim()[1]  # high grows upwards, as in the papers' figures
    assert "ood/acc" in fig.get_suptitle()
    assert ax.images[0].get_clim() == (0.0, 1.0)


def test_one_panel_per_combination_of_further_axes():
    df = grid_results(n_triggers=(4, 8, 16))
    df = pd.concat([df.assign(**{"model.n_layers": n}) for n in (1, 2)], ignore_index=True)
    fig = diagram(df, LOW, HIGH, panels=[N_TRG, "model.n_layers"])
    titles = {ax.get_title() for ax in panel_axes(fig)}
    assert len(panel_axes(fig)) == 6
    assert "task.n_triggers = 16, model.n_layers = 2" in titles
    with pytest.raises(ValueError, match="model.n_layers"):  # would be averaged with the seeds
        diagram(df, LOW, HIGH, panels=[N_TRG])


def test_contour_drawn_only_when_the_level_is_inside_the_range():
    df = grid_results()
    inside = diagram(df, LOW, HIGH, ratio_level=0.4, panels=[N_TRG])
    assert all(len(contours(ax)) == 1 for ax in panel_axes(inside))
    assert any("R = 0.4" == t.get_text() for ax in panel_axes(inside) for t in ax.texts)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # skipping must be silent, not a matplotlib "no contour levels" warning
        outside = diagram(df, LOW, HIGH, ratio_level=0.9, panels=[N_TRG])
        single = diagram(grid_results(lows=[3]), LOW, HIGH, ratio_level=0.4, panels=[N_TRG])
    assert all(not contours(ax) for ax in panel_axes(outside))
    assert all(not contours(ax) for ax in panel_axes(single))
    assert panel_axes(single)[0].images[0].get_array().shape == (6, 1)


def test_png_bytes_decode_to_a_non_uniform_image(tmp_path):
    png = png_bytes(diagram(grid_results(), LOW, HIGH, ratio_level=0.4, panels=[N_TRG]))
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    pixels = np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 10
    path = save_png(diagram(grid_results(), LOW, HIGH, panels=[N_TRG]), tmp_path / "sub" / "phase.png")
    assert path.read_bytes().startswith(b"\x89PNG") and os.listdir(path.parent) == ["phase.png"]


def test_png_bytes_are_savefigs_drawn_once(monkeypatch):
    """The bytes savefig writes (a constrained layout, colour bars, tick labels), from one draw where savefig makes
    two (a layout pass, then the render); a plugin's Figure() without a canvas is drawn on Agg as savefig would."""
    def saved(figure) -> bytes:
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", metadata={"Software": None})
        return buffer.getvalue()

    draws = []
    real_draw = Figure.draw
    monkeypatch.setattr(Figure, "draw", lambda figure, renderer: draws.append(1) or real_draw(figure, renderer))
    png = png_bytes(diagram(grid_results(), LOW, HIGH, ratio_level=0.4, panels=[N_TRG]))
    assert len(draws) == 1
    assert png == saved(diagram(grid_results(), LOW, HIGH, ratio_level=0.4, panels=[N_TRG])) and len(draws) == 3

    def bare() -> Figure:
        figure = Figure(figsize=(2, 2), layout="constrained")
        figure.add_subplot().plot([0, 1], [1, 0])
        return figure

    assert png_bytes(bare()) == saved(bare())


def test_report_is_self_contained_and_escaped(tmp_path):
    png = png_bytes(diagram(grid_results(), LOW, HIGH, panels=[N_TRG]))
    table = pd.DataFrame({"trial": ["<script>alert(1)</script>", "b&c"], "ood/acc": [0.98765, float("nan")],
                          LOW: [3.0, 4.0]})
    path = write_report(tmp_path / "report.html", "Grid <one>", [
        Section("Phase diagram", image_png=png, alt="ood/acc"),
        Section("Results", table=table),
        Section("Config", text="task:\n  name: <trigger_copy>\n"),
        Section("Gallery", html=gallery([(png, "n_triggers <8>")], heading="a & b")),
    ])
    page = path.read_text(encoding="utf-8")
    assert "<title>Grid &lt;one&gt;</title>" in page
    assert f'<img src="data:image/png;base64,{base64.b64encode(png).decode()}"' in page
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "b&amp;c" in page
    assert ">0.988<" in page and ">\u2013<" in page and ">3<" in page  # whole-number key column stays an int
    assert "&lt;trigger_copy&gt;" in page
    assert "<figcaption>n_triggers &lt;8&gt;</figcaption>" in page and "<h3>a &amp; b</h3>" in page
    assert "http://" not in page and "https://" not in page
    assert page.index("Phase diagram") < page.index("Results") < page.index("Config")
    assert os.listdir(tmp_path) == ["report.html"]


def test_report_write_is_atomic(tmp_path, monkeypatch):
    path = write_report(tmp_path / "report.html", "first", [Section("a", text="x")])

    def crash(*_):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError):
        write_report(path, "second", [Section("a", text="y")])
    assert "first" in path.read_text() and os.listdir(tmp_path) == ["report.html"]  # old file whole, no .partial


def test_section_needs_exactly_one_body():
    with pytest.raises(ValueError):
        Section("empty")
    with pytest.raises(ValueError):
        Section("two", text="a", html="<b>b</b>")


def test_the_gallery_spreads_over_diversity_or_else_over_the_first_axis(tmp_path):
    """A grid whose trials share one diversity measure (a grid over the positional scheme) shows one trial per
    value of its first axis, not the first few by name; otherwise trials spread from the most to the least diverse."""
    import json

    import yaml

    from dashboards.report import _spread
    from trainables.tasks import TASKS

    def trials(ratios):
        made = []
        for scheme, ratio in ratios:
            trial = tmp_path / f"t{len(list(tmp_path.iterdir())):02d}"
            trial.mkdir()
            (trial / "metrics.jsonl").write_text(json.dumps({"step": 1, "data/max_sum_ratio": ratio}) + "\n")
            (trial / "config.yaml").write_text(yaml.safe_dump({"model": {"positional": scheme}}))
            made.append(trial)
        return made

    task = TASKS["trigger_copy"]
    same = trials([(scheme, 0.3) for scheme in ("relative", "none", "rotary", "learned_abs") for _ in range(2)])
    scheme = lambda trial: yaml.safe_load((trial / "config.yaml").read_text())["model"]["positional"]
    chosen, said = _spread(same, task, "model.positional")
    assert sorted(map(scheme, chosen)) == ["learned_abs", "none", "relative", "rotary"]
    assert said == "one per value of model.positional"
    two_values = trials([(s, float("nan")) for s in ("relative", "none") for _ in range(3)])  # NaN: one value too
    chosen, _ = _spread(two_values, task, "model.positional")
    assert len(chosen) == 4 and set(map(scheme, chosen[:2])) == {"relative", "none"}  # both, then filled up
    varied = trials([("relative", r) for r in (0.9, 0.1, 0.5, 0.3, 0.7, 0.2, 0.8, 0.4)])
    chosen, said = _spread(varied, task)
    ratios = [json.loads((t / "metrics.jsonl").read_text())["data/max_sum_ratio"] for t in chosen]
    assert ratios[0] == 0.1 and ratios[-1] == 0.9 and len(ratios) == 4 and said == "from most to least diverse"


def search_of_decided_candidates(out) -> None:
    """A threshold search's output dir as its trials leave it: at each of two widths, seed 0 of the one-step model
    trains and fails (2 of 2 seeds needed), so seed 1 stops before its first step (sweep/verdicts.py), then
    trials.csv merges each member's result.json (sweep/search/tables.py::member_rows)."""
    from sweep.verdicts import Rule, Verdicts
    from tests.conftest import CONFIGS
    from trainables import config
    from trainables.io import read_json
    from trainables.logger import member_logger
    from trainables.train import save, train_members

    base = config.load(CONFIGS / "debug_search.yaml")
    (out / "trials").mkdir(parents=True)
    (out / "config.yaml").write_text(config.to_yaml(base))
    rows = []
    for width in (1, 5):
        rule = Rule("ood/acc", 2.0, True, 0, f"width={width}", needed=2, size=2)
        verdicts = Verdicts({0: rule, 1: rule})
        for seed in (0, 1):
            cfg = config.with_point(config.to_dict(base), {"task.lengths.width": width, "seed": seed})
            trial = out / "trials" / f"width={width},seed={seed}"
            trial.mkdir()
            (trial / "config.yaml").write_text(config.to_yaml(cfg))
            with member_logger(cfg, trial) as logger:
                [result] = train_members([cfg], [logger], [None], stopper=verdicts.of([seed]))
            save(result, trial)
            rows.append({"task.lengths.width": width, "seed": seed} | read_json(trial / "result.json"))
    pd.DataFrame(rows).to_csv(out / "trials.csv", index=False)


def test_a_seed_never_trained_is_blank_in_the_results_and_absent_from_the_gallery(tmp_path):
    """A seed stopped before its first step was never measured: the results table leaves its metrics blank (not
    0.000, which would read as a trained seed that failed) and the attention gallery neither shows nor counts it."""
    import re

    from dashboards.html import MISSING
    from dashboards.report import build

    search_of_decided_candidates(tmp_path)
    page = build(tmp_path).read_text()
    results = page[page.index("<h2>Results (one row per member)</h2>"):]
    header = re.findall(r"<th>(.*?)</th>", results[:results.index("</thead>")])
    rows = [dict(zip(header, re.findall(r"<td[^>]*>(.*?)</td>", row)))
            for row in re.findall(r"<tr>(.*?)</tr>", results)]
    untrained = [row for row in rows if row.get("status") == "verdict_known"]
    assert len(untrained) == 2 and all(row["steps"] == "0" for row in untrained)
    assert all(row[metric] == MISSING for row in untrained for metric in ("ood/acc", "id/acc", "mech/induction_score"))
    assert all(row["data/max_sum_ratio"] != MISSING for row in untrained)  # known before training
    assert all(row["ood/acc"] != MISSING for row in rows if row.get("status") == "completed")
    gallery_html = page[page.index("<h2>Attention gallery"):page.index("<h2>Results")]
    assert "2 of 2 members" in gallery_html and "seed=1" not in gallery_html
    assert "width=1,seed=0" in gallery_html and "width=5,seed=0" in gallery_html


def threshold_search_dir(out, answers: dict) -> None:
    """A threshold search's output dir (debug_search.yaml: widths 1..5 over l_min in {2, 4}) with min_diversity.csv,
    success_curve.csv and trials.csv; answers: l_min -> (diversity*, its interval's low, high, finished), NaN for a
    blank (past the widest value)."""
    from sweep.search.config import load_search
    from tests.conftest import CONFIGS
    from trainables import config

    base, search = load_search(CONFIGS / "debug_search.yaml", [])
    out.mkdir(exist_ok=True)
    (out / "config.yaml").write_text(config.to_yaml(base, search=search))
    r = lambda low, width: max_sum_ratio(low, low + int(width) - 1) if width == width else float("nan")
    minimal, curve, trials = [], [], []
    for low, (star, star_low, star_high, finished) in answers.items():
        study = f"debug_search.low={low}"
        minimal.append({LOW: low, "diversity_star": star, "diversity_star_low": star_low,
                        "diversity_star_high": star_high, "data/max_sum_ratio": r(low, star),
                        "data/max_sum_ratio_low": r(low, star_high), "data/max_sum_ratio_high": r(low, star_low),
                        "widest_tried": 5, "p_at_widest": 0.7, "p_at_widest_low": 0.4, "p_at_widest_high": 0.95,
                        "seeds": 6, "finished": finished, "study": study})
        for width in range(1, 6):
            passes = star == star and width >= star
            trained = 2 if width in (1, 3, 5) else 0
            curve.append({"study": study, LOW: low, "task.lengths.width": width, "data/max_sum_ratio": r(low, width),
                          "trained": trained, "passed": trained if passes else 0, "p": 0.8 if passes else 0.2,
                          "p_low": 0.5 if passes else 0.01, "p_high": 0.99 if passes else 0.5})
            trials += [{"study": study, LOW: low, "task.lengths.width": width, "seed": seed, "candidate": width,
                        "state": "COMPLETE", "optuna_trial": width, "feasible": passes, "ood/acc": float(passes),
                        "data/max_sum_ratio": r(low, width), "status": "completed"}
                       for seed in range(trained)]
    pd.DataFrame(minimal).to_csv(out / "min_diversity.csv", index=False)
    pd.DataFrame(curve).to_csv(out / "success_curve.csv", index=False)
    pd.DataFrame(trials).to_csv(out / "trials.csv", index=False)


def test_a_threshold_search_report_shows_each_answer_with_its_interval_and_names_the_slices_not_finished(tmp_path):
    import re

    from dashboards.report import build

    nan = float("nan")
    threshold_search_dir(tmp_path / "open", {2: (3, 3, 4, True), 4: (nan, 5, nan, False)})
    page = build(tmp_path / "open").read_text()
    headings = re.findall(r"<h2>(.*?)</h2>", page)
    search = [h for h in headings if not h.startswith(("Summary", "Final metrics", "Results", "Config"))]
    assert [h.split(":")[0].split(" (")[0] for h in search] == [
        "Minimal diversity for OOD generalization", "Success curves", "Search traces over the points they evaluated",
        "Measured threshold", "Success curves"]  # the figure, then (after the figures) the table
    answers = page[page.index("<h2>Minimal diversity"):page.index("<h2>Success curves")]
    assert "Not finished: low=4: the answer may still move." in answers and "low=2" not in answers.split("</p>")[0]
    assert "q = 0.5" in answers and "95% interval" in answers  # the legend reads config.yaml's search.success
    for column in ("diversity_star_low", "diversity_star_high", "data/max_sum_ratio_low", "widest_tried",
                   "p_at_widest_high", "seeds", "finished"):
        assert f"<th>{column}</th>" in answers
    curve_table = page[page.rindex("<h2>Success curves"):]
    assert "<th>p_low</th>" in curve_table and "<th>trained</th>" in curve_table
    figures_part = page[page.index("<h2>Success curves"):page.rindex("<h2>Success curves")]
    assert figures_part.count("data:image/png;base64,") == 3 and "not drawn" not in page

    threshold_search_dir(tmp_path / "settled", {2: (3, 3, 4, True), 4: (4, 3, 5, True)})
    assert "Not finished" not in build(tmp_path / "settled").read_text()


def test_a_threshold_search_report_from_before_the_intervals_still_shows_its_table_and_traces(tmp_path):
    """An older min_diversity.csv (no interval columns, no `finished`) and no success_curve.csv."""
    from dashboards.report import build

    out = tmp_path / "old"
    threshold_search_dir(out, {2: (3, 3, 4, True), 4: (4, 3, 5, True)})
    (out / "success_curve.csv").unlink()
    minimal = pd.read_csv(out / "min_diversity.csv")
    minimal[[LOW, "diversity_star", "data/max_sum_ratio", "study"]].to_csv(out / "min_diversity.csv", index=False)
    page = build(out).read_text()
    assert "<h2>Minimal diversity" in page and "<h2>Search traces" in page and "<h2>Measured threshold" in page
    assert "Success curves" not in page and "Not finished" not in page and "not drawn" not in page


def test_a_results_table_shows_its_error_column_only_when_a_member_failed_and_warns_nothing(tmp_path):
    """A column of no errors is all NaN (float): filling it with a string warns now and raises in pandas 4."""
    from dashboards.report import _table_columns
    from trainables.tasks import DEFAULT, TASKS, view_of
    view = view_of(TASKS[DEFAULT])
    frame = pd.DataFrame({"seed": [0, 1], "status": ["completed", "error"], "error": [float("nan")] * 2})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "error" not in _table_columns(tmp_path, frame, view)
        assert "error" in _table_columns(tmp_path, frame.assign(error=[float("nan"), "ValueError: x"]), view)
