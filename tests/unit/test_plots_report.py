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
from PIL import Image

from dashboards.html import Section, gallery, write_report
from trainables.figures import phase_diagram, png_bytes, save_png

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
