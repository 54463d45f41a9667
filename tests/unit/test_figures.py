"""A trial's figures (trainables.figures, composed by the trigger-copy task and the one-step model): each shows what
it claims (landmarks, block boundaries, padding, colour bars) and renders to an image that is not one flat colour;
the report's gallery escapes its captions."""
import io

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from dashboards import figures as plots
from dashboards.html import gallery
from trainables import figures, readouts
from trainables.models.one_step import SPEC as ONE_STEP
from trainables.tasks.trigger_copy import figures as trigger_copy_figures

L, N = 12, 6  # max_len, vocab_size of the synthetic arrays
K, LAYERS, HEADS = 3, 2, 2  # examples, layers, heads
L1, L2 = np.array([1, 4, 2]), np.array([5, 2, 3])  # (K,) query at l1 + l2 + 2 = 8, 8, 7


def transformer_arrays() -> dict[str, np.ndarray]:
    """attention.npz of a transformer run, with each head attending to the output token at the query."""
    T = int((L1 + L2).max()) + 3
    query_attention = np.zeros((K, LAYERS, HEADS, T))
    query_attention[np.arange(K), :, :, L1 + 1] = 1.0  # an induction head: all mass on the output token
    patterns = np.tril(np.ones((K, LAYERS, HEADS, T, T)))
    patterns /= patterns.sum(-1, keepdims=True)  # uniform causal attention
    acc = np.full((L, L), np.nan)
    for a in range(1, L):
        for b in range(1, L):
            if a + b + 3 <= L - 1:
                acc[a, b] = 1.0 if a == b else 0.25
    return {"acc_by_pair": acc, "query_attention": query_attention, "query_attention_mean": query_attention.mean(0),
            "tokens": np.zeros((K, T), dtype=np.int64), "l1": L1, "l2": L2, "patterns": patterns}


def one_step_arrays() -> dict[str, np.ndarray]:
    arrays = transformer_arrays()
    del arrays["patterns"]
    arrays["query_attention"] = arrays["query_attention"][:, :1, :1]  # one layer, one head
    D = L + 2 * N
    W_KQ = np.zeros((D, D))
    W_KQ[L + N, L] = 5.0  # induction block: key prev token 0, query token 0
    W_KQ[3, L - 1] = -2.0  # a positional entry
    return arrays | {"W_KQ": W_KQ, "W_V": np.zeros((N, D))}


def pixels(figure) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(figures.png_bytes(figure))).convert("RGB"))


def assert_not_flat(image: np.ndarray) -> None:
    packed = image.astype(np.int64)
    colours = np.unique(packed[..., 0] << 16 | packed[..., 1] << 8 | packed[..., 2])
    assert len(colours) > 50 and image.std() > 10, "the figure rendered as (nearly) one flat colour"


def colour_bar_labels(figure) -> list[str]:
    return [ax.get_ylabel() for ax in figure.axes[1:]]


def test_figures_are_keyed_as_the_wandb_media_keys():
    transformer = {"task": {"name": "trigger_copy"}, "model": {"name": "transformer"}}
    one_step = {"task": {"name": "trigger_copy"}, "model": {"name": "one_step"}}
    assert list(readouts.trial_figures(transformer, transformer_arrays())) == [
        *(f"attention/query_L{l}H{h}" for l in range(LAYERS) for h in range(HEADS)),
        *(f"attention/pattern_L{l}H{h}" for l in range(LAYERS) for h in range(HEADS)),
        "ood/acc_by_pair",
    ]
    assert list(readouts.trial_figures(one_step, one_step_arrays())) == [
        "attention/query_L0H0", "ood/acc_by_pair", "mech/W_KQ"]


def test_query_attention_marks_trigger_and_output_per_example_and_blanks_padding():
    figure = trigger_copy_figures.query_attention(transformer_arrays(), layer=1, head=0)
    ax = figure.axes[0]
    marks = {c.get_label(): c.get_offsets() for c in ax.collections}
    rows = np.arange(K)
    assert np.array_equal(marks["first trigger"], np.c_[L1, rows])
    assert np.array_equal(marks["output (induction target)"], np.c_[L1 + 1, rows])
    # (l1 + l2) even only for the first two examples: l̄ + 2 (1-indexed) = (l1 + l2) // 2 + 1 (0-indexed)
    assert np.array_equal(marks["shortcut position"], np.c_[((L1 + L2) // 2 + 1)[:2], rows[:2]])
    blank = np.ma.getmaskarray(np.ma.masked_invalid(ax.get_images()[0].get_array()))  # (K, T)
    assert blank[2, 8] and not blank[2, 7] and not blank[0, 8]  # example 2 ends at its query, position 7
    assert ax.get_xlabel() == "key position (0-indexed)" and colour_bar_labels(figure) == ["attention"]
    assert_not_flat(pixels(figure))


def test_attention_pattern_is_cropped_to_the_example_and_marks_its_landmarks():
    figure = trigger_copy_figures.pattern(transformer_arrays(), layer=0, head=1, example=1)
    ax = figure.axes[0]
    assert ax.get_images()[0].get_array().shape == (9, 9)  # T = l1 + l2 + 3 of example 1
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert lines["first trigger"].get_xdata()[0] == L1[1]
    assert lines["output (induction target)"].get_xdata()[0] == L1[1] + 1
    assert_not_flat(pixels(figure))


def test_w_kq_draws_the_three_embedding_blocks_on_a_symmetric_scale():
    arrays = one_step_arrays()
    figure = ONE_STEP.figures(arrays)["mech/W_KQ"]
    ax = figure.axes[0]
    vertical = [line for line in ax.get_lines() if line.get_xdata()[0] == line.get_xdata()[1]]
    edges = sorted({float(line.get_xdata()[0]) for line in vertical})
    assert edges == [L - 0.5, L + N - 0.5]  # position | token | previous token
    assert [t.get_text() for t in ax.get_xticklabels()] == ["position", "token", "prev token"]
    low, high = ax.get_images()[0].get_clim()
    assert low == -high == -5.0  # zero is white whatever the signs
    assert_not_flat(pixels(figure))


def test_accuracy_by_pair_puts_l1_across_l2_up_and_leaves_invalid_cells_blank():
    acc = transformer_arrays()["acc_by_pair"]
    figure = trigger_copy_figures.accuracy_by_pair(acc)
    ax = figure.axes[0]
    grid = ax.get_images()[0].get_array()  # (l2, l1), cropped to the valid cells
    assert grid.shape == (L - 4, L - 4)
    assert grid[2, 1] == acc[1, 2] and grid.mask[7, 7]  # l1 = 1, l2 = 2 is valid; 7 + 7 + 3 > L - 1 is not
    assert "mean 0.3" in ax.get_title()
    assert_not_flat(pixels(figure))


def test_curves_show_single_evaluations_and_colour_runs_by_a_value():
    runs = {"a": [{"step": 2, "ood/acc": 0.5, "train/loss": 1.0}],
            "b": [{"step": s, "ood/acc": s / 10, "train/loss": None} for s in (1, 2, 3, 4)]}
    figure = plots.curves(runs, metrics=("train/loss", "ood/acc", "absent/metric"), colour_by={"a": 0.2, "b": 0.5},
                          colour_label="R")
    assert [ax.get_title() for ax in figure.axes[:2]] == ["train/loss", "ood/acc"]  # absent metrics get no panel
    assert figure.axes[0].get_lines()[0].get_marker() == "o"  # a single point stays visible
    assert figure.axes[1].get_lines()[0].get_color() != figure.axes[1].get_lines()[1].get_color()
    assert colour_bar_labels(figure)[-1] == "R"


def test_rgb_is_uint8_so_wandb_does_not_render_it_black():
    image = figures.rgb(trigger_copy_figures.accuracy_by_pair(transformer_arrays()["acc_by_pair"]))
    assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3
    assert_not_flat(image)


def test_gallery_escapes_captions():
    png = figures.png_bytes(trigger_copy_figures.accuracy_by_pair(transformer_arrays()["acc_by_pair"]))
    html = gallery([(png, "<script>alert(1)</script>")], heading="a & b")
    assert "<script>" not in html and "&lt;script&gt;" in html and "<h3>a &amp; b</h3>" in html
    assert html.count("data:image/png;base64,") == 1


def test_wandb_images_are_the_figures_as_uint8_heatmaps_with_captions():
    for arrays, model in ((transformer_arrays(), "transformer"), (one_step_arrays(), "one_step")):
        cfg = {"task": {"name": "trigger_copy"}, "model": {"name": model}}
        images = readouts.member_images(cfg, arrays)
        assert list(images) == list(readouts.trial_figures(cfg, arrays))  # the same media keys
        for key, (image, caption) in images.items():
            assert image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] == 3 and caption, key
    query = readouts.member_images({"task": {"name": "trigger_copy"}, "model": {"name": "transformer"}},
                                  transformer_arrays())["attention/query_L1H0"][0]
    cell = figures.IMAGE_CELL
    assert query.shape == (K * cell, int((L1 + L2).max() + 3) * cell, 3)
    middle = lambda row, col: query[row * cell + cell // 2, col * cell + cell // 2]
    assert tuple(middle(0, L1[0])) == trigger_copy_figures.MARK_RGB["first trigger"]
    assert tuple(middle(1, L1[1] + 1)) == trigger_copy_figures.MARK_RGB["output"]
    assert tuple(middle(2, 8)) == figures.BLANK_RGB  # example 2 ends at its query, position 7: the rest is blank


def test_heatmap_image_colours_cells_blanks_nan_marks_and_flips():
    image = figures.heatmap_image(np.array([[0.0, 1.0], [np.nan, 0.5]]), 0.0, 1.0, "viridis",
                                  marks=[([0], [1], (255, 0, 0))], cell=6)
    assert image.shape == (12, 12, 3)
    assert tuple(image[8, 2]) == figures.BLANK_RGB  # the NaN cell
    assert tuple(image[3, 9]) == (255, 0, 0) and tuple(image[0, 6]) != (255, 0, 0)  # the mark fills the middle only
    assert tuple(image[0, 0]) != tuple(image[0, 6]) != tuple(image[6, 6])  # 0, 1 and 0.5 get different colours
    assert np.array_equal(figures.heatmap_image(np.eye(2), 0, 1, flip=True, cell=1),
                          figures.heatmap_image(np.eye(2), 0, 1, cell=1)[::-1])


# --- a threshold search's answer with its interval (sweep/search/tables.py::min_diversity_rows) ---------------------

KNOB, LOW, N_TRG = "task.lengths.width", "task.lengths.low", "task.n_triggers"
NAN = float("nan")
# (low, n_triggers): diversity* and its interval, finished; NaN = blank in min_diversity.csv (past the widest value)
ANSWERS = {(2, 2): (3, 2, 4, True),  # settled
           (4, 2): (5, 4, NAN, False),  # the interval reaches past the widest value (6); not finished
           (2, 4): (NAN, 6, NAN, True),  # the median is past the widest value, the interval starts at it
           (4, 4): (NAN, NAN, NAN, False)}  # every value tried is ruled out


def search_tables() -> tuple:
    """min_diversity.csv and success_curve.csv of a search over widths 1..6 in four slices (ANSWERS); R of a width
    is 1 / width here, so R falls as the width grows and R_high comes from the interval's low end."""
    minimal, curve = [], []
    r = lambda width: 1.0 / width if width == width else NAN
    for (low, n), (star, star_low, star_high, finished) in ANSWERS.items():
        study = f"s.low={low},n={n}"
        minimal.append({LOW: low, N_TRG: n, "diversity_star": star, "diversity_star_low": star_low,
                        "diversity_star_high": star_high, "data/max_sum_ratio": r(star),
                        "data/max_sum_ratio_low": r(star_high), "data/max_sum_ratio_high": r(star_low),
                        "widest_tried": 6, "seeds": 9, "finished": finished, "study": study})
        for width in range(1, 7):
            trained = width % 3  # 0, 1 or 2 seeds: some values never trained
            passes = star == star and width >= star
            curve.append({"study": study, LOW: low, N_TRG: n, KNOB: width, "data/max_sum_ratio": r(width),
                          "trained": trained, "passed": trained if passes else 0, "p": 0.8 if passes else 0.2,
                          "p_low": 0.6 if passes else 0.05, "p_high": 0.95 if passes else 0.4})
    return pd.DataFrame(minimal), pd.DataFrame(curve)


def labelled(ax, label: str) -> list:
    return [a for a in (*ax.lines, *ax.collections, *ax.patches) if a.get_label() == label]


def arrows(ax) -> list:
    return [t for t in ax.texts if getattr(t, "arrow_patch", None) is not None]


def test_success_curves_show_p_with_its_band_the_seeds_q_and_k_star_with_its_interval():
    minimal, curve = search_tables()
    figure = plots.success_curves(curve, minimal, [LOW, N_TRG], KNOB, q=0.5, confidence=0.95)
    panels = {ax.get_title(): ax for ax in figure.axes}
    assert len(panels) == 4  # columns: low; rows: n_triggers
    settled = panels["low=2, n_triggers=2\nK* = 3 [2, 4]"]
    [band] = labelled(settled, "p: 95% interval")
    assert band.get_paths()[0].vertices[:, 1].min() == pytest.approx(0.05)
    [dots] = labelled(settled, "passed / trained (area: seeds)")
    curve_of = curve[curve["study"] == "s.low=2,n=2"]
    trained = curve_of[curve_of["trained"] > 0]
    assert np.array_equal(dots.get_offsets()[:, 0], trained[KNOB])  # none where nothing was trained
    assert np.array_equal(dots.get_offsets()[:, 1], trained["passed"] / trained["trained"])
    sizes = dict(zip(trained["trained"], dots.get_sizes()))
    assert sizes[2] > sizes[1]  # more seeds, a bigger dot
    [q] = labelled(settled, "q = 0.5")
    assert list(q.get_ydata()) == [0.5, 0.5] and q.get_linestyle() == "--"
    [span] = labelled(settled, "K*: 95% interval")
    assert (span.get_x(), span.get_x() + span.get_width()) == (1.5, 4.5)  # widths 2 to 4, to the cells' edges
    [star] = labelled(settled, "K*")
    assert (star.get_xdata()[0], star.get_ydata()[0]) == (3, 0.5)
    assert all(tick <= 6 for tick in settled.get_xticks())  # no knob value is named in the "beyond" strip
    # an open end runs to the right edge, through the "beyond" strip; not finished: said in the title, in orange
    open_high = panels["low=4, n_triggers=2\nK* = 5 [4, beyond] (not finished)"]
    [span] = labelled(open_high, "K*: 95% interval")
    assert span.get_x() == 3.5 and span.get_x() + span.get_width() == open_high.get_xlim()[1]
    assert open_high.title.get_color() == plots.OPEN_COLOUR
    past = panels["low=2, n_triggers=4\nK* = \u2013 [6, beyond]"]
    assert labelled(past, "K* past the widest value") and not labelled(past, "K*")
    ruled_out = panels["low=4, n_triggers=4\nK* = \u2013 [beyond, beyond] (not finished)"]
    [span] = labelled(ruled_out, "K*: 95% interval")
    assert span.get_x() == 6.5  # only the "beyond" strip
    assert_not_flat(pixels(figure))


def test_the_terminal_prints_each_answer_with_its_interval_as_the_figures_title_does():
    minimal, _ = search_tables()
    minimal["p_at_widest"], minimal["p_at_widest_low"], minimal["p_at_widest_high"] = 0.8, 0.5, 0.95
    shown = plots.answer_table(minimal, [LOW, N_TRG], "data/max_sum_ratio")
    assert list(shown["K*_q [interval]"]) == ["3 [2, 4]", "5 [4, beyond]", "- [6, beyond]", "- [beyond, beyond]"]
    assert shown["data/max_sum_ratio [interval]"][0] == "0.333 [0.250, 0.500]"
    assert list(shown["stopped"]) == ["finished", "no (open)", "finished", "no (open)"]
    minimal["stopped"], minimal["widest_tried"] = ["settled", "open", "plateau near q", "open"], 6
    shown = plots.answer_table(minimal, [LOW, N_TRG], "data/max_sum_ratio")
    assert list(shown["stopped"]) == ["settled", "no (open)", "plateau near q", "no (open)"]
    assert shown["p at widest [interval]"][0] == "0.80 [0.50, 0.95] at 6"
    assert plots.interval_text(minimal.drop(columns=["diversity_star_low"]).iloc[0], "diversity_star") == "3"


def test_success_curves_of_a_search_without_slices_have_one_panel_named_by_its_study():
    minimal, curve = search_tables()
    one = minimal.iloc[[0]].drop(columns=[LOW, N_TRG])
    figure = plots.success_curves(curve[curve["study"] == one["study"].iloc[0]], one, [], KNOB, q=0.5)
    assert [ax.get_title() for ax in figure.axes] == ["s.low=2,n=2\nK* = 3 [2, 4]"]
    assert labelled(figure.axes[0], "K*: interval")


def test_threshold_draws_each_interval_with_arrows_on_open_sides_and_hollow_markers_past_the_widest_value():
    minimal, _ = search_tables()
    figure = plots.threshold(minimal, [LOW, N_TRG], "data/max_sum_ratio", [0.5, 0.5, 0.25, 0.25])
    ax = figure.axes[0]
    bars = [line for line in ax.lines if len(line.get_xdata()) == 2 and line.get_xdata()[0] == line.get_xdata()[1]
            and line.get_linestyle() == "-"]
    spans = sorted(tuple(sorted(line.get_ydata())) for line in bars)
    assert (pytest.approx(1 / 4), pytest.approx(1 / 2)) in spans  # settled: R from K = 4 up to K = 2
    assert (pytest.approx(1 / 5), pytest.approx(1 / 4)) in spans  # open below: from R* up to R at K = 4
    hollow = [line for line in ax.lines if line.get_markerfacecolor() == "white"]
    assert [line.get_ydata()[0] for line in hollow] == [pytest.approx(1 / 6)]  # K* past 6: R* below R at 6
    assert len(arrows(ax)) == 2  # down from the open-high slice's point and from the hollow marker
    assert all(a.xyann[1] < 0 for a in arrows(ax))  # R falls as K grows: an open K side is open downwards in R
    assert labelled(ax, "not finished") and "1 slice(s) with no bound" in ax.get_title()
    assert_not_flat(pixels(figure))


def test_search_traces_bracket_each_interval_and_run_open_ends_to_the_top():
    minimal, _ = search_tables()
    finished = pd.DataFrame([{LOW: low, N_TRG: n, KNOB: width, "candidate": width, "optuna_trial": t,
                              "ood/acc": float(width >= 3)}
                             for t, (low, n, width) in enumerate((l, n, w) for l in (2, 4) for n in (2, 4)
                                                                 for w in (1, 3, 6))])
    figure = plots.phase_diagram(finished, LOW, KNOB, "ood/acc", panels=[N_TRG])
    plots.search_traces(figure, finished, minimal, [LOW, N_TRG], KNOB)
    first, second = figure.axes[:2]  # n_triggers = 2, 4; rows: widths 1, 3, 6 at y = 0, 1, 2
    brackets = [line for line in first.lines if line.get_color() == "red" and len(line.get_xdata()) >= 2]
    settled = next(line for line in brackets if line.get_xdata()[1] < 1)  # column 0: low = 2
    assert min(settled.get_ydata()) == pytest.approx(0.5 - 0.4)  # width 2: between the cells of 1 and 3
    assert max(settled.get_ydata()) == pytest.approx(1 + 1 / 3 + 0.4)  # width 4: a third of the way from 3 to 6
    assert len(arrows(first)) == 1 and len(arrows(second)) == 2  # open high ends: run to the top with an arrow
    stars = [(line.get_xdata()[0], line.get_ydata()[0]) for line in first.lines if line.get_marker() == "*"]
    assert stars == [(0, 1)]  # low = 2 at width 3; low = 4's diversity* (5) was never evaluated, so no cell to star


def test_thresholds_against_theory_draw_the_measured_intervals_and_keep_the_bound_hollow():
    points = pd.DataFrame({"search": ["a", "a", "a"], "slice": ["low=2", "low=4", "low=6"], "theory": [0.5] * 3,
                           "measured": [0.3, 0.25, NAN], "measured_low": [0.27, NAN, NAN],
                           "measured_high": [0.36, 0.28, 0.22], "finished": [True, False, True],
                           "bound": [NAN, NAN, 0.22], "fitted_at_widest": [NAN, NAN, 1.0]})
    figure = plots.thresholds_against_theory(points, "data/max_sum_ratio")
    ax = figure.axes[0]
    bars = sorted(tuple(line.get_ydata()) for line in ax.lines
                  if len(line.get_xdata()) == 2 and line.get_xdata()[0] == line.get_xdata()[1])
    assert bars == [(0.25, 0.28), (0.27, 0.36)]  # (the second slice's bar: from its point up to its bounded end)
    assert len(arrows(ax)) == 1 and arrows(ax)[0].xyann[1] < 0  # open below
    hollow = [c for c in ax.collections if "bound on it" in c.get_label()]
    assert len(hollow) == 1 and list(hollow[0].get_offsets()[:, 1]) == [0.22]
    assert labelled(ax, "not finished: the answer may still move")
    assert "100%" in [t.get_text() for t in ax.texts]
    assert_not_flat(pixels(figure))


def test_a_one_axis_grid_draws_its_metric_against_the_key_on_a_log_axis_when_geometric():
    """What GridResult.phase_diagram() and phase_diagram.png show for a grid with one axis (the commonest grid): a dot
    per seed and the mean per value; values spanning a factor of 30 or more (8, 64, 1024) on a log axis, others not."""
    from dashboards import report
    from trainables.tasks import TASKS, view_of

    cfg = {"task": {"name": "trigger_copy"},
           "sweep": {"axes": [{"key": "task.n_pairs_per_cell", "values": [8, 64, 1024]}]}}
    results = pd.DataFrame({"task.n_pairs_per_cell": [8, 8, 64, 64, 1024, 1024], "seed": [0, 1] * 3,
                            "ood/acc": [0.1, 0.2, 0.5, 0.7, 1.0, 0.9]})
    figure, metric = report.draw_phase_diagram(results, cfg, view_of(TASKS["trigger_copy"]))
    [ax] = figure.axes
    assert metric == "ood/acc" and ax.get_xscale() == "log" and ax.get_xlabel() == "task.n_pairs_per_cell"
    mean_line = ax.get_lines()[0]
    assert list(mean_line.get_ydata()) == pytest.approx([0.15, 0.6, 0.95])
    narrow = results.assign(**{"task.n_pairs_per_cell": [1, 1, 2, 2, 3, 3]})
    cfg["sweep"]["axes"][0]["values"] = [1, 2, 3]
    assert report.draw_phase_diagram(narrow, cfg, view_of(TASKS["trigger_copy"]))[0].axes[0].get_xscale() == "linear"
