"""The distribution search (TPE over params, minimising data/cost, Proposition 8 as reference) on a real local
Ray and a real Optuna journal, through the CLI."""
import shutil

import pandas as pd
import pytest

import headsweep as hs

from tests.conftest import CONFIGS
from tests.integration.test_search import headsweep, result_files
from trainables.tasks.lengths import data_cost

CONFIG = CONFIGS / "debug_optimal_distribution.yaml"


@pytest.fixture(scope="module")
def distribution_search(tmp_path_factory):
    out = tmp_path_factory.mktemp("distribution") / "out"
    proc = headsweep("search", CONFIG, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc


def distribution(text: str) -> dict[int, float]:
    return {int(l): float(q) for l, q in (pair.split(":") for pair in text.split())}


def test_best_csv_has_the_cheapest_feasible_distribution_beside_proposition_8(distribution_search):
    out, proc = distribution_search
    best = pd.read_csv(out / "best.csv")
    assert list(best["task.lengths.family"]) == ["power", "weights"]
    assert (best["n_trials"] == 6).all()
    trials = pd.read_csv(out / "trials.csv")
    for _, row in best.iterrows():
        rows = trials[trials["study"] == row["study"]]
        feasible = rows[rows["feasible"] == True]  # noqa: E712 (a column of True/False/NaN)
        assert row["n_feasible"] == feasible["optuna_trial"].nunique()
        if len(feasible):  # the best is the cheapest candidate that generalized, and its q has that cost
            assert row["data/cost"] == pytest.approx(feasible["data/cost"].min())
            assert row["success_rate"] == 1.0 and (feasible["ood/acc"] >= 0.9).all()
            assert data_cost(distribution(row["q"])) == pytest.approx(row["data/cost"], rel=1e-3)
        # Proposition 8 for N_trg = 2: q = (1/3, 2/3) on {1, 2}, cost 3, R = 1/2, trained once for both slices
        assert distribution(row["reference q"]) == pytest.approx({1: 1 / 3, 2: 2 / 3}, abs=1e-3)
        assert row["reference data/cost"] == pytest.approx(3.0)
        assert row["reference data/max_sum_ratio"] == pytest.approx(0.5)
    assert len(list((out / "trials").glob("family=optimal*"))) == 1
    assert "best.csv" in proc.stdout and "reference data/cost" in proc.stdout
    shown = repr(hs.load(out))  # from Python: best.csv's table, not a threshold search's answer table
    assert shown.startswith("SearchResult") and "reference data/cost" in shown, shown


def test_the_report_draws_cost_against_r_progress_and_distributions(distribution_search):
    out, _ = distribution_search
    html = (out / "report.html").read_text()
    for alt in ("data/cost against data/max_sum_ratio", "search progress", "best distributions"):
        assert f'alt="{alt}"' in html
    assert "Attention gallery" in html  # the one report builder: the same sections as any other search


def test_a_rerun_trains_nothing_and_reports_the_same_best(distribution_search):
    out, _ = distribution_search
    before, best_before = result_files(out), (out / "best.csv").read_text()
    proc = headsweep("search", CONFIG, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert result_files(out) == before
    assert (out / "best.csv").read_text() == best_before


def test_the_report_verb_redraws_the_distribution_figures_from_the_files(distribution_search, tmp_path):
    out, _ = distribution_search
    copy = tmp_path / "copy"
    shutil.copytree(out, copy, ignore=shutil.ignore_patterns("report.html"))
    proc = headsweep("report", copy)
    assert proc.returncode == 0, proc.stderr[-3000:]
    html = (copy / "report.html").read_text()
    for alt in ("data/cost against data/max_sum_ratio", "search progress", "best distributions"):
        assert f'alt="{alt}"' in html
    assert "best.csv" in html
