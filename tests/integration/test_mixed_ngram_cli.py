"""The mixed n-gram task end to end through the CLI: `headsweep train` of its debug config, and a two-point
`headsweep grid` over the in-context share alpha, and a tiny `headsweep search` with alpha as its (float) knob."""
import json
import math

import numpy as np
import pandas as pd

from tests.conftest import CONFIGS
from tests.integration.conftest import assert_tiny_search_answers, headsweep

COMPONENT_METRICS = ["lazy/loss", "lazy/acc", "icl/loss", "icl/acc", "ood/icl_loss", "ood/icl_acc",
                     "mech/induction_score", "mech/prev_token", "data/alpha", "data/icl_target_share"]
SUMMARY = ["lazy/fit_step", "icl/transition_step", "icl/plateau_steps"]
TINY_GRID = """
name: tiny_mixed_grid
task: {name: mixed_ngram, n_lazy_tokens: 3, n_icl_tokens: 8, seq_len: 16, period_low: 2, period_high: 4,
       ood_period_high: 8}
model: {name: transformer, n_layers: 2, n_heads: 1, embedding: learned, d_model: 16, positional: relative}
optim: {lr: 0.003, batch_size: 16, max_steps: 60}
eval: {every: 30, n_id: 64, n_ood: 64, patience: 0}
logging: {wandb: false}
sweep:
  axes: [{key: task.alpha, values: [0.2, 0.8]}]
  seeds: [0]
  resources: {cpu: 1}
  max_concurrent: 1
"""
TINY_SEARCH = TINY_GRID.replace("name: tiny_mixed_grid", "name: tiny_alpha_search").split("sweep:")[0] + """
search:
  knob: {key: task.alpha, values: [0.2, 0.8]}
  success: {threshold: 0.01, seeds: [0]}
  batch: 1
  budget: {trainings: 6}   # the threshold sampler: the fewest that can rule a value in or out
  max_concurrent: 1   # tiny trials: see configs/debug_search.yaml
"""


def test_debug_train_logs_each_component_and_the_transition(tmp_path):
    out = tmp_path / "debug"
    proc = headsweep("train", CONFIGS / "debug_mixed_ngram.yaml", "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "icl/transition_step=" in proc.stdout and "ood/icl_acc=" in proc.stdout
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [50, 100, 150, 200]
    assert all(set(COMPONENT_METRICS) <= set(r) for r in records)
    result = json.loads((out / "result.json").read_text())
    assert set(COMPONENT_METRICS + SUMMARY) <= set(result) and result["status"] == "completed"
    assert result["lazy/loss"] < records[0]["lazy/loss"] < math.log(3)  # the 4-gram is being learned
    assert result["data/alpha"] == 0.5
    arrays = np.load(out / "attention.npz")
    assert arrays["patterns"].shape[1:] == (2, 2, 16, 16)  # (examples, layers, heads, T, T)
    assert arrays["rule_table"].shape == (3, 3, 3) and (arrays["in_context"] == 1).all()
    assert "data:image/png;base64," in (out / "report.html").read_text()  # curves and the attention gallery


def test_a_grid_over_alpha_writes_the_transition_per_trial(tmp_path):
    config_file, out = tmp_path / "grid.yaml", tmp_path / "grid"
    config_file.write_text(TINY_GRID)
    proc = headsweep("grid", config_file, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = pd.read_csv(out / "results.csv")
    assert sorted(frame["task.alpha"]) == [0.2, 0.8] and set(frame["status"]) == {"completed"}
    assert set(SUMMARY + ["ood/icl_acc", "data/alpha", "icl/loss"]) <= set(frame.columns)
    assert list(frame.sort_values("task.alpha")["data/alpha"]) == [0.2, 0.8]
    report = (out / "report.html").read_text()
    assert "Final metrics against data/alpha" in report  # the transition step plotted against the knob


def test_a_tiny_search_over_the_knob_writes_its_tables_and_report(tmp_path):
    """The task searches through the same CLI: task.alpha as the knob, its success metric ood/icl_acc read from every
    trial."""
    assert_tiny_search_answers(TINY_SEARCH, "ood/icl_acc", tmp_path)
