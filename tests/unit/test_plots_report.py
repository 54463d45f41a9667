"""Phase diagrams and the self-contained HTML report: the numbers drawn are the numbers measured."""
import base64
import io

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from dashboards.report import Section, write_report
from sweep import plots


def synthetic_results(seed: int = 0) -> pd.DataFrame:
    """low < high in [3, 8], two n_triggers, two seeds; ood/acc rises with the width; R as in SPEC §1."""
    rng = np.random.default_rng(seed)
    rows = []
    for n_triggers in (4, 8):
        for low in range(3, 9):
            for high in range(low + 1, 9):
                ratio = (1 / low) / sum(1 / l for l in range(low, high + 1))
                for s in (0, 1):
                    acc = float(np.clip((0.45 - ratio) * 3 + rng.normal(0, 0.05), 0, 1))
                    rows.append({"task.lengths.low": low, "task.lengths.high": high, "task.n_triggers": n_triggers,
                                 "seed": s, "ood/acc": acc, "data/max_sum_ratio": ratio})
    return pd.DataFrame(rows)


def heatmap(ax) -> np.ndarray:
    return np.ma.filled(ax.images[0].get_array().astype(float), np.nan)


def test_cells_are_seed_means_and_missing_cells_are_nan():
    results = synthetic_results()
    fig = plots.phase_diagram(results, "task.lengths.low", "task.lengths.high", panels=["task.n_triggers"])
    panel = results[results["task.n_triggers"] == 4]
    expected = panel.groupby(["task.lengths.high", "task.lengths.low"])["ood/acc"].mean()
    grid = heatmap(fig.axes[0])  # (len(highs), len(lows)) with highs 4..8 and lows 3..7
    assert grid[0, 0] == pytest.approx(expected[(4, 3)])
    assert grid[4, 2] == pytest.approx(expected[(8, 5)])
    assert grid.shape == (5, 5) and np.isnan(grid[0, 4])  # low 7, high 4: never run


def test_one_panel_per_further_axis_value_and_the_contour_only_when_in_range():
    results = synthetic_results()
    fig = plots.phase_diagram(results, "task.lengths.low", "task.lengths.high", ratio_level=0.3,
                              panels=["task.n_triggers"])
    panels = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in panels] == ["task.n_triggers = 4", "task.n_triggers = 8"]
    assert all(ax.collections for ax in panels)  # the R = 0.3 contour
    fig = plots.phase_diagram(results, "task.lengths.low", "task.lengths.high", ratio_level=5.0,
                              panels=["task.n_triggers"])
    assert not any(ax.collections for ax in fig.axes if ax.images)  # R never reaches 5: no contour


def test_an_axis_that_varies_but_is_not_plotted_is_refused():
    with pytest.raises(ValueError, match="task.n_triggers"):
        plots.phase_diagram(synthetic_results(), "task.lengths.low", "task.lengths.high")


def test_png_is_a_real_picture():
    png = plots.figure_to_png(plots.phase_diagram(synthetic_results(), "task.lengths.low", "task.lengths.high",
                                                  panels=["task.n_triggers"]))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    image = np.asarray(Image.open(io.BytesIO(png)).convert("L"))
    assert image.std() > 10  # not one flat colour


def test_report_is_self_contained_and_escaped(tmp_path):
    png = plots.figure_to_png(plots.phase_diagram(synthetic_results(), "task.lengths.low", "task.lengths.high",
                                                  panels=["task.n_triggers"]))
    table = pd.DataFrame({"trial": ["<script>alert(1)</script>"], "ood/acc": [np.nan], "R": [0.123456]})
    path = write_report(tmp_path / "report.html", "grid <b>test</b>",
                        [Section("Diagram", image_png=png, alt="phase"), Section("Results", table=table),
                         Section("Config", text="name: x\n")])
    page = path.read_text()
    assert f"data:image/png;base64,{base64.b64encode(png).decode()}" in page
    assert "<script>alert" not in page and "&lt;script&gt;" in page
    assert "grid &lt;b&gt;test&lt;/b&gt;" in page and "0.123" in page and "\u2013" in page
    assert "http://" not in page and "https://" not in page
    assert not list(tmp_path.glob("*.partial"))
