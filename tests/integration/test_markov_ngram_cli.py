"""The Markov n-gram task end to end through the installed console script: `headsweep train` of its debug config and
a 2-point `headsweep grid` over the pool size."""
import json

import numpy as np
import pandas as pd
import pytest

from tests.conftest import CONFIGS
from tests.integration.conftest import assert_tiny_search_answers, headsweep

TASK_METRICS = ["id/bayes_loss", "id/gap", "ood/loss", "ood/bayes_loss", "ood/unigram_loss", "ood/bigram_loss",
                "ood/gap", "ood/stage", "attn/lag_L0H0", "attn/lag_L0H1", "attn/parent_coverage", "data/pool_size",
                "data/inv_pool", "ood/success"]
# Two tiny trials over the pool size, one at a time on one CPU each.
TINY_GRID = """
name: tiny_markov_grid
task: {name: markov_ngram, vocab_size: 3, order: 2, alpha: 0.5, seq_len: 12, loss_on: last}
model: {name: transformer, n_layers: 2, n_heads: 1, embedding: learned, d_model: 8, positional: relative}
optim: {lr: 0.01, batch_size: 16, max_steps: 20}
eval: {every: 10, n_id: 32, n_ood: 32, patience: 0, threshold: 0.05}
logging: {wandb: false}
sweep:
  axes: [{key: task.pool_size, values: [2, 0]}]
  seeds: [0]
  resources: {cpu: 1, gpu: 0}
  max_concurrent: 1
"""
TINY_SEARCH = TINY_GRID.replace("name: tiny_markov_grid", "name: tiny_markov_search").split("sweep:")[0] + """
search:
  knob: {key: task.pool_size, values: [1, 0]}   # one table, then a fresh table per sequence (more diverse)
  success: {threshold: 0.5, seeds: [0]}   # ood/gap <= 0.5 nats
  batch: 1
  budget: {trainings: 6}   # the threshold sampler: the fewest that can rule a value in or out
  max_concurrent: 1   # tiny trials: see configs/debug_search.yaml
"""


def test_debug_train_writes_the_tasks_metrics_and_arrays(tmp_path):
    out = tmp_path / "debug"
    proc = headsweep("train", CONFIGS / "debug_markov_ngram.yaml", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "ood/gap=" in proc.stdout and str(out) in proc.stdout
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [50, 100, 150]
    assert all(set(TASK_METRICS) <= set(r) for r in records)
    # the strategies' losses are a property of the fixed evaluation sets: the same at every evaluation
    assert len({r["ood/bayes_loss"] for r in records}) == 1
    assert records[0]["ood/bayes_loss"] < records[0]["ood/bigram_loss"] < records[0]["ood/unigram_loss"]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "completed" and result["steps"] == 150
    assert result["ood/gap"] == pytest.approx(result["ood/loss"] - result["ood/bayes_loss"])
    assert result["mi/argmax_is_parents"] == 1.0 and "ood/first_step_at_bayes" in result
    assert result["mi/standard_1_2"] == pytest.approx(result["mi/standard_1_2_3"])
    arrays = np.load(out / "attention.npz")
    assert arrays["lag_profile"].shape == (2, 2, 24)  # (layers, heads, offsets)
    assert np.allclose(arrays["lag_profile"].sum(-1), 1.0)
    assert arrays["mi_lags"].shape == (7, 3) and arrays["patterns"].shape[1:3] == (2, 2)
    assert "data:image/png;base64," in (out / "report.html").read_text()


def test_tiny_grid_over_the_pool_size(tmp_path):
    config_file = tmp_path / "tiny_markov_grid.yaml"
    config_file.write_text(TINY_GRID)
    out = tmp_path / "grid"
    proc = headsweep("grid", config_file, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = pd.read_csv(out / "results.csv")
    assert sorted(frame["task.pool_size"]) == [0, 2] and set(frame["status"]) == {"completed"}
    assert {"ood/gap", "id/gap", "ood/bayes_loss", "data/inv_pool", "ood/success"} <= set(frame.columns)
    by_pool = frame.set_index("task.pool_size")
    assert by_pool.loc[2, "data/inv_pool"] == 0.5 and by_pool.loc[0, "data/inv_pool"] == 0.0
    assert (out / "report.html").exists()


def test_a_tiny_search_over_the_knob_writes_its_tables_and_report(tmp_path):
    """The task searches through the same CLI: task.pool_size as the knob, its success metric ood/gap read from every
    trial."""
    assert_tiny_search_answers(TINY_SEARCH, "ood/gap", tmp_path)
