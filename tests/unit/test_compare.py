"""`headsweep compare`: the thresholds of several searches against the theory's reference value of each slice."""
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from dashboards.compare import compare
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


def test_each_slice_is_a_point_at_the_theory_value_with_its_measured_threshold(tmp_path):
    two = search_dir(tmp_path, "two", [], [  # N_trg = 2: the theory's scale is 1/2
        {"task.lengths.low": 2, "diversity_star": 4, "data/max_sum_ratio": 0.31},
        {"task.lengths.low": 4, "diversity_star": np.nan, "below_star": 5, "data/max_sum_ratio": np.nan}])
    four = search_dir(tmp_path, "four", ["task.n_triggers=4", "task.vocab_size=20"], [
        {"task.lengths.low": 2, "diversity_star": 6, "data/max_sum_ratio": 0.2}])
    figure, table = compare([two, four], tmp_path / "figures" / "thresholds.png")
    points = pd.read_csv(table)
    assert list(points["search"]) == ["two (one_step)", "two (one_step)", "four (one_step)"]
    assert list(points["theory"]) == [0.5, 0.5, 0.25]
    measured = points["measured"]
    assert measured.iloc[0] == 0.31 and np.isnan(measured.iloc[1]) and measured.iloc[2] == 0.2
    # the slice without a threshold: R at the widest width it tried (5: Unif{4..8}), as a trial of it reports R
    widest = config.load(CONFIGS / "debug_search.yaml", ["task.lengths.low=4", "task.lengths.width=5"])
    assert points["bound"].iloc[1] == pytest.approx(task_of(widest).diversity(widest.task)["data/max_sum_ratio"])
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
        {"task.lengths.low": 2, "diversity_star": 4, "data/max_sum_ratio": 0.31, "study": "two.low=2"},
        {"task.lengths.low": 4, "diversity_star": np.nan, "below_star": 5, "study": "two.low=4"}])
    seed = lambda study, width, status, id_acc: {"study": study, "task.lengths.width": width, "status": status,
                                                 "id/acc": id_acc}
    pd.DataFrame([seed("two.low=4", 5, "completed", 1.0), seed("two.low=4", 5, "completed", 0.4),
                  seed("two.low=4", 5, "verdict_known", 0.3), seed("two.low=4", 4, "completed", 0.2),
                  seed("two.low=4", 5, "error", np.nan), seed("two.low=2", 4, "succeeded", 1.0)]
                 ).to_csv(two / "trials.csv", index=False)
    _, table = compare([two], tmp_path / "f.png")
    fitted = pd.read_csv(table)["fitted_at_widest"]
    assert np.isnan(fitted.iloc[0]) and fitted.iloc[1] == 0.5
