"""Verdict-aware stopping through the CLI on a real local Ray (trainables/verdicts.py): a search that stops training
once verdicts are known gives the answers of one that trains everything, in fewer steps, and says in trials.csv
and results.csv what stopped where and why."""
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.conftest import CONFIGS
from tests.integration.conftest import headsweep

EVERYTHING = ["search.stop.streak=0", "search.stop.decided=false"]  # train every seed to its last step


def search(config: Path, out: Path, *overrides: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    proc = headsweep("search", config, "--out", out, *overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return pd.read_csv(out / "min_diversity.csv"), pd.read_csv(out / "trials.csv")


def test_seeds_of_a_decided_candidate_are_not_trained_and_the_answers_do_not_change(tmp_path):
    """The one-step model trains a trial's seeds one after another: once seed 0 fails (2 of 2 needed), seed 1 is
    not trained at all. Same diversity* per slice, fewer training steps."""
    two_seeds = ["search.success.seeds=[0,1]", "search.success.min_seeds=2"]
    stopped, stopped_trials = search(CONFIGS / "debug_search.yaml", tmp_path / "stopped", *two_seeds)
    full, full_trials = search(CONFIGS / "debug_search.yaml", tmp_path / "full", *two_seeds, *EVERYTHING)
    assert list(stopped["diversity_star"]) == list(full["diversity_star"])
    assert set(full_trials["status"]) == {"completed"}
    skipped = stopped_trials[stopped_trials["status"] == "verdict_known"]
    assert len(skipped) and (skipped["steps"] == 0).all()
    assert skipped["stopped_because"].str.startswith("its candidate failed: 1 of 2 seeds failed").all()
    assert stopped_trials["steps"].sum() < full_trials["steps"].sum()
    report = (tmp_path / "stopped" / "report.html").read_text()
    assert "verdict_known" in report  # the trial table shows why a seed has no verdict of its own


@pytest.fixture(scope="module")
def transformer_search(tmp_path_factory) -> Path:
    """A one-slice search of the debug transformer: the smallest longest length at which it fits its training
    data (id/acc >= 0.9) in 300 steps, with 2 of 2 seeds."""
    spec = yaml.safe_load((CONFIGS / "debug.yaml").read_text())
    spec["search"] = {"knob": {"key": "task.lengths.high", "low": 3, "high": 6},
                      "success": {"metric": "id/acc", "threshold": 0.9, "seeds": [0, 1], "min_seeds": 2},
                      "budget": {"per_slice": 3}, "resources": {"cpu": 1, "gpu": 0}}
    path = tmp_path_factory.mktemp("verdicts") / "search.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_seeds_that_passed_stop_early_with_the_answer_of_full_training(transformer_search, tmp_path):
    stopped, stopped_trials = search(transformer_search, tmp_path / "stopped", "search.stop.streak=2")
    full, full_trials = search(transformer_search, tmp_path / "full", *EVERYTHING)
    assert list(stopped["diversity_star"]) == list(full["diversity_star"])
    succeeded = stopped_trials[stopped_trials["status"] == "succeeded"]
    assert len(succeeded) and (succeeded["steps"] < 300).all() and (succeeded["id/acc"] >= 0.9).all()
    assert succeeded["stopped_because"].str.startswith("id/acc >= 0.9 at 2 evaluations in a row").all()
    assert stopped_trials["steps"].sum() < full_trials["steps"].sum() == 300 * len(full_trials)


def test_a_grid_row_says_it_is_from_an_early_stop(tmp_path):
    spec = yaml.safe_load((CONFIGS / "debug.yaml").read_text())
    spec["eval"]["threshold"] = 0.4  # ood/acc 0.57, 0.66, 0.66 at steps 100, 150, 200 (the debug model's shortcut)
    spec["sweep"] = {"axes": [{"key": "task.lengths.high", "values": [6]}], "seeds": [0], "stop": {"streak": 2}}
    (tmp_path / "grid.yaml").write_text(yaml.safe_dump(spec))
    proc = headsweep("grid", tmp_path / "grid.yaml", "--out", tmp_path / "grid")
    assert proc.returncode == 0, proc.stderr[-3000:]
    [row] = pd.read_csv(tmp_path / "grid" / "results.csv").to_dict("records")
    assert row["status"] == "succeeded" and row["steps"] == 150
    assert row["stopped_because"] == "ood/acc >= 0.4 at 2 evaluations in a row (steps 100-150)"


def test_a_grid_refuses_to_decide_candidates(tmp_path):
    out = tmp_path / "grid"
    proc = headsweep("grid", CONFIGS / "debug_grid.yaml", "--out", out, "sweep.stop.decided=true")
    assert proc.returncode == 2 and not out.exists()
    assert proc.stderr.strip().splitlines()[-1].startswith("headsweep: error: sweep.stop.decided: is for searches")
