"""Verdict-aware stopping through the CLI on a real local Ray (sweep/verdicts.py): a search that stops training
once verdicts are known gives the answers of one that trains everything, in fewer steps, and says in trials.csv
and results.csv what stopped where and why."""
from pathlib import Path

import pandas as pd
import pytest
import yaml

from sweep.space import member_dir
from tests.conftest import CONFIGS
from tests.integration.conftest import headsweep
from tests.integration.test_wandb import clean_env, exit_codes, offline_run, wandb_home
from trainables import config
from trainables.io import read_json

EVERYTHING = ["search.stop.streak=0", "search.stop.decided=false"]  # train every seed to its last step


def search(config_file: Path, out: Path, *overrides: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    proc = headsweep("search", config_file, "--out", out, *overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return pd.read_csv(out / "min_diversity.csv"), pd.read_csv(out / "trials.csv")


def points(trials: pd.DataFrame) -> list[dict]:
    """The sweep points of trials.csv rows (debug_search's slice and knob, and the seed)."""
    keys = ["task.lengths.low", "task.lengths.width", "seed"]
    return [{k: int(v) for k, v in row.items()} for row in trials[keys].to_dict("records")]


def test_seeds_of_a_decided_candidate_are_not_trained_and_the_answers_do_not_change(tmp_path):
    """The one-step model trains a trial's seeds one after another: once seed 0 fails (2 of 2 needed), seed 1 is
    not trained at all. Same diversity* per slice, fewer training steps."""
    two_seeds = ["search.sampler=bisection", "search.success.seeds=[0,1]", "search.success.min_seeds=2"]
    stopped, stopped_trials = search(CONFIGS / "debug_search.yaml", tmp_path / "stopped", *two_seeds)
    full, full_trials = search(CONFIGS / "debug_search.yaml", tmp_path / "full", *two_seeds, *EVERYTHING)
    assert list(stopped["diversity_star"]) == list(full["diversity_star"])
    assert set(full_trials["status"]) == {"completed"}
    skipped = stopped_trials[stopped_trials["status"] == "verdict_known"]
    assert len(skipped) and (skipped["steps"] == 0).all()
    assert skipped["stopped_because"].str.startswith("its candidate failed: 1 of 2 seeds failed").all()
    assert skipped["ood/acc"].isna().all() and skipped["data/max_sum_ratio"].notna().all()  # never measured
    skipped_dirs = [member_dir(tmp_path / "stopped", point) for point in points(skipped)]
    assert not any((d / "attention.npz").exists() or "ood/acc" in read_json(d / "result.json") for d in skipped_dirs)
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
                      "sampler": "bisection",
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


def test_a_seed_never_trained_leaves_no_metric_in_its_files_or_its_wandb_run(tmp_path, monkeypatch):
    """A trial of the one-step model (run_trial outside a Tune session: no checkpoint, reports dropped) trains seed 0,
    which fails with 2 of 2 needed; seed 1 is never trained. Its result.json and W&B run hold why it stopped and the
    data/* measures (in the run's config too, for grouping) but no metric, and it has no attention.npz or artifact."""
    from ray import tune

    from sweep.storage.copies import open_members
    from sweep.verdicts import Rule, stopper_of
    from trainables import trainable
    from trainables.io import VERDICT_KNOWN

    monkeypatch.setattr(tune, "get_checkpoint", lambda: None)
    monkeypatch.setattr(tune, "report", lambda *args, **kwargs: None)
    for key, value in clean_env(WANDB_MODE="offline", **wandb_home(tmp_path)).items():
        monkeypatch.setenv(key, value)
    base = config.to_dict(config.load(CONFIGS / "debug_search.yaml", ["logging.wandb=true"]))
    rule = Rule("ood/acc", 2.0, True, 0, group="candidate", needed=2, size=2).to_dict()
    members = [{"point": {"seed": seed}, "dir": str(tmp_path / f"seed={seed}"), "verdict": rule} for seed in (0, 1)]
    trainable.run_trial({"trial": "t", "members": members}, base, {}, open_members,
                        stopper_of=stopper_of)  # as sweep/tuner.py binds them
    trained, untrained = (tmp_path / "seed=0", tmp_path / "seed=1")
    result = read_json(untrained / "result.json")
    assert result["status"] == VERDICT_KNOWN and result["steps"] == 0
    assert "ood/acc" in read_json(trained / "result.json") and "ood/acc" not in result
    assert (trained / "attention.npz").exists() and not (untrained / "attention.npz").exists()
    for trial in (trained, untrained):  # wandb-core may still be writing a run file when run.finish returns
        assert exit_codes(next(trial.glob("wandb/offline-run-*/run-*.wandb"))) == [0]
    run = offline_run(untrained)
    assert run["summary"]["status"] == VERDICT_KNOWN and run["summary"]["data/width"] == result["data/width"]
    assert {key for key in run["summary"] if not key.startswith("_")} == set(result)  # "_wandb/...": W&B's own
    assert run["config"]["data/width"] == result["data/width"] and not run["history"] and not run["artifacts"]
    assert offline_run(trained)["summary"]["ood/acc"] == read_json(trained / "result.json")["ood/acc"]
