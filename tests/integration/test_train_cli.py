"""`headsweep train` end to end through the installed console script: outputs, resumption, bad input."""
import json

import numpy as np
import pytest

from tests.conftest import CONFIGS
from tests.integration.conftest import assert_report_rebuilds_the_same, headsweep

CONTRACT_METRICS = ["train/loss", "train/acc", "id/acc", "ood/loss", "ood/acc", "ood/pseudo_rate", "ood/leftmost_rate",
                    "data/max_sum_ratio", "data/width", "data/entropy", "data/inv_ratio", "mech/induction_score",
                    "mech/positional_score"]


@pytest.fixture(scope="module")
def debug_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("train") / "debug"
    return out, headsweep("train", CONFIGS / "debug.yaml", "seed=1", "--out", out)


def test_debug_train_writes_every_output(debug_run):
    out, proc = debug_run
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.strip().splitlines()) == 1 and "ood/acc=" in proc.stdout and str(out) in proc.stdout
    assert sorted(p.name for p in out.iterdir()) == ["attention.npz", "config.yaml", "metrics.jsonl", "report.html",
                                                       "result.json"]

    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [50, 100, 150, 200, 250, 300]  # eval.every = 50, max_steps = 300
    assert all(set(CONTRACT_METRICS) <= set(r) for r in records)

    result = json.loads((out / "result.json").read_text())
    assert set(CONTRACT_METRICS) <= set(result) and result["status"] == "completed" and result["steps"] == 300
    assert result["id/acc"] > 0.9  # the debug transformer learns the training task
    assert "seed: 1" in (out / "config.yaml").read_text()

    arrays = np.load(out / "attention.npz")
    assert arrays["acc_by_pair"].shape == (16, 16)  # (L, L)
    assert arrays["patterns"].shape[1:3] == (2, 1)  # (examples, layers, heads, T, T)
    assert arrays["query_attention_mean"].shape[:2] == (2, 1)  # (layers, heads, T)


def test_the_report_verb_rebuilds_the_report_train_wrote(debug_run, tmp_path):
    assert_report_rebuilds_the_same(debug_run[0], tmp_path)


def test_rerun_on_the_same_out_keeps_the_finished_run(debug_run):
    out, _ = debug_run
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    proc = headsweep("train", CONFIGS / "debug.yaml", "seed=1", "--out", out)
    assert proc.returncode == 0 and proc.stdout.startswith("already finished")
    shown = headsweep("show", out)  # the same line from the files, nothing trained
    assert shown.returncode == 0 and shown.stdout == proc.stdout.removeprefix("already finished: ")
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before


def test_show_refuses_what_is_no_output_in_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    for where, reason in ((tmp_path / "missing", "is not a directory"), (tmp_path / "empty", "holds no headsweep")):
        proc = headsweep("show", where)
        assert proc.returncode == 2 and proc.stderr.startswith("headsweep: error: DIR: ") and reason in proc.stderr
        assert proc.stderr.count("\n") == 1


def test_a_different_config_on_the_same_out_is_refused(debug_run):
    out, _ = debug_run
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    proc = headsweep("train", CONFIGS / "debug.yaml", "seed=2", "--out", out)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--out" in proc.stderr
    assert "(seed: 1 there, 2 here)" in proc.stderr  # the key that differs, with both values
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_usage_errors_are_one_line_exit_2(tmp_path):
    for args in (["train", CONFIGS / "debug.yaml"], ["fly"],
                 ["train", tmp_path / "missing.yaml", "--out", tmp_path / "o"]):
        proc = headsweep(*args)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "o").exists()
