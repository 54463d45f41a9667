"""`headsweep compare`: the thresholds of several searches against the theory's reference value of each slice."""
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from dashboards.compare import compare, threshold_points
from sweep import cli
from sweep.search.config import load_search
from tests.conftest import CONFIGS
from trainables import config
from trainables.errors import ConfigError
from trainables.tasks import task_of


def search_dir(root, name, overrides, rows):
    """An output dir of a threshold search (debug_search.yaml, slices over task.lengths.low) with this table."""
    base, search = load_search(CONFIGS / "debug_search.yaml", [f"name={name}", *overrides])
    out = root / name
    out.mkdir()
    (out / "config.yaml").write_text(config.to_yaml(base, search=search))
    pd.DataFrame(rows).to_csv(out / "min_diversity.csv", index=False)
    return out


def answer(low, star, star_low, star_high, r=np.nan, r_low=np.nan, r_high=np.nan, widest=5, seeds=6, finished=True,
           **more) -> dict:
    """A row of min_diversity.csv (NaN: blank, i.e. past the widest value tried)."""
    return {"task.lengths.low": low, "diversity_star": star, "diversity_star_low": star_low,
            "diversity_star_high": star_high, "data/max_sum_ratio": r, "data/max_sum_ratio_low": r_low,
            "data/max_sum_ratio_high": r_high, "widest_tried": widest, "p_at_widest": 0.8, "p_at_widest_low": 0.5,
            "p_at_widest_high": 0.99, "seeds": seeds, "finished": finished} | more


def r_at(low: int, width: int) -> float:
    """R of the debug search's slice at that width, as a trial of it reports R."""
    cfg = config.load(CONFIGS / "debug_search.yaml", [f"task.lengths.low={low}", f"task.lengths.width={width}"])
    return task_of(cfg).diversity(cfg.task)["data/max_sum_ratio"]


def test_each_slice_is_a_point_at_the_theory_value_with_its_measured_threshold_and_interval(tmp_path):
    two = search_dir(tmp_path, "two", [], [  # N_trg = 2: the theory's scale is 1/2
        answer(2, 4, 3, 5, r=0.31, r_low=0.27, r_high=0.36, seeds=10),
        answer(4, np.nan, 4, np.nan, r_high=r_at(4, 4), finished=False)])  # K* past the widest value (5), >= 4
    four = search_dir(tmp_path, "four", ["task.n_triggers=4", "task.vocab_size=20"], [
        answer(2, 6, 6, np.nan, r=0.2, r_high=0.2)])  # the interval reaches past the widest value: R open below
    figure, table = compare([two, four], tmp_path / "figures" / "thresholds.png")
    points = pd.read_csv(table)
    assert list(points["search"]) == ["two (one_step)", "two (one_step)", "four (one_step)"]
    assert list(points["theory"]) == [0.5, 0.5, 0.25]
    measured = points["measured"]
    assert measured.iloc[0] == 0.31 and np.isnan(measured.iloc[1]) and measured.iloc[2] == 0.2
    assert points["measured_low"].iloc[0] == 0.27 and points["measured_high"].iloc[0] == 0.36
    assert points["measured_low"].iloc[[1, 2]].isna().all()  # open below: K*'s interval reaches past the widest
    assert points["measured_high"].iloc[1] == pytest.approx(r_at(4, 4)) and points["measured_high"].iloc[2] == 0.2
    assert list(points["seeds"]) == [10, 6, 6] and list(points["finished"]) == [True, False, True]
    # the slice without a threshold: R where the evidence puts K* at the earliest (its interval's low end, 4:
    # Unif{4..7}, not the widest value tried): the threshold lies past it
    assert points["bound"].iloc[1] == pytest.approx(r_at(4, 4)) != pytest.approx(r_at(4, 5))
    assert points["bound"].iloc[1] < 0.5 and points["bound"][[0, 2]].isna().all()
    image = np.asarray(Image.open(figure).convert("RGB"))
    assert image.std() > 10  # something is drawn


def test_a_dir_that_is_not_a_threshold_search_is_one_line_exit_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    assert cli.main(["compare", str(tmp_path / "empty"), "--out", str(tmp_path / "f.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("headsweep: error: DIR: ") and err.count("\n") == 1
    with pytest.raises(ConfigError, match="--out: must name a .png"):
        compare([tmp_path / "empty"], tmp_path / "f.jpg")


def test_a_task_without_theory_lines_is_compared_slice_by_slice(tmp_path):
    markov = tmp_path / "markov"
    markov.mkdir()
    cfg = config.load(CONFIGS / "markov_icl.yaml")
    (markov / "config.yaml").write_text(config.to_yaml(cfg))
    pd.DataFrame([{"diversity_star": 4, "data/inv_pool": 0.25}]).to_csv(markov / "min_diversity.csv", index=False)
    figure, table = compare([markov], tmp_path / "f.png")
    points = pd.read_csv(table)
    assert list(points["slice"]) == ["all"] and points["theory"].isna().all() and list(points["measured"]) == [0.25]
    assert np.asarray(Image.open(figure).convert("RGB")).std() > 10


def test_searches_of_different_diversity_measures_are_refused_and_nothing_written(tmp_path):
    two = search_dir(tmp_path, "two", [], [{"task.lengths.low": 2, "diversity_star": 4, "data/max_sum_ratio": 0.31}])
    (tmp_path / "markov").mkdir()
    cfg = config.load(CONFIGS / "markov_icl.yaml")
    (tmp_path / "markov" / "config.yaml").write_text(config.to_yaml(cfg))
    pd.DataFrame([{"diversity_star": 4}]).to_csv(tmp_path / "markov" / "min_diversity.csv", index=False)
    with pytest.raises(ConfigError, match="DIR: the searches measure different things"):
        compare([two, tmp_path / "markov"], tmp_path / "out" / "f.png")
    assert not (tmp_path / "out").exists()  # neither the figure nor its table, nor their folder


def test_a_slice_without_a_threshold_says_how_many_seeds_at_its_widest_value_fitted_their_training_data(tmp_path):
    """From trials.csv: at the widest width tried (5), 1 of the 2 seeds with a verdict of their own reached
    id/acc >= 0.99 (a seed stopped once its candidate was decided, and a narrower width, do not count)."""
    two = search_dir(tmp_path, "two", [], [
        answer(2, 4, 3, 5, r=0.31, study="two.low=2"), answer(4, np.nan, 5, np.nan, study="two.low=4")])
    seed = lambda study, width, status, id_acc: {"study": study, "task.lengths.width": width, "status": status,
                                                 "id/acc": id_acc}
    pd.DataFrame([seed("two.low=4", 5, "completed", 1.0), seed("two.low=4", 5, "completed", 0.4),
                  seed("two.low=4", 5, "verdict_known", 0.3), seed("two.low=4", 4, "completed", 0.2),
                  seed("two.low=4", 5, "error", np.nan), seed("two.low=2", 4, "succeeded", 1.0)]
                 ).to_csv(two / "trials.csv", index=False)
    _, table = compare([two], tmp_path / "f.png")
    fitted = pd.read_csv(table)["fitted_at_widest"]
    assert np.isnan(fitted.iloc[0]) and fitted.iloc[1] == 0.5


def test_a_slice_with_no_interval_end_is_bounded_at_the_widest_value_tried(tmp_path):
    """Where the evidence puts K* past every value tried (diversity_star_low blank too), the bound is R at the widest
    value tried; a table from before the intervals (no `_low`/`_high` columns) still gives its points, unbounded."""
    two = search_dir(tmp_path, "two", [], [answer(2, np.nan, np.nan, np.nan, widest=6),
                                           answer(4, np.nan, np.nan, np.nan, widest=np.nan, seeds=0)])
    points, axis = threshold_points(two)
    assert axis == "data/max_sum_ratio"
    assert points["bound"].iloc[0] == pytest.approx(r_at(2, 6)) and np.isnan(points["bound"].iloc[1])  # nothing tried
    assert points[["measured", "measured_low", "measured_high"]].isna().all().all()
    old = search_dir(tmp_path, "old", [], [{"task.lengths.low": 2, "diversity_star": 4, "data/max_sum_ratio": 0.31}])
    points, _ = threshold_points(old)
    assert points["measured"].iloc[0] == 0.31 and points[["measured_low", "measured_high", "bound"]].isna().all().all()
