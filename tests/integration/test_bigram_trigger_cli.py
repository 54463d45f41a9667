"""The bigram task with triggers end to end through the console script: `headsweep train` of its debug config and a
tiny `headsweep grid` over the positional scheme (the shape of configs/pe_length_generalization.yaml)."""
import json

import numpy as np
import pandas as pd

from tests.conftest import CONFIGS
from tests.integration.conftest import assert_tiny_search_answers, headsweep

TASK_METRICS = ["head/loss", "head/acc", "head/acc_early", "head/acc_late", "bigram/loss", "bigram/loss_early",
                "bigram/loss_late", "bigram/excess",
                "bigram/floor", "attn/prev_token", "attn/prev_token_early", "attn/prev_token_late", "attn/induction",
                "ood/head_acc", "ood/head_loss", "late/acc", "lengthgen/acc", "lengthgen/acc_beyond",
                "data/n_train_outputs", "ood/success"]
TINY_GRID = """
name: tiny_pe_grid
task: {name: bigram_trigger, seq_len: 24, test_len: 32, n_triggers: 3, triggers: fixed, n_train_outputs: 40,
       n_readout: 8}
model: {name: transformer, n_layers: 2, embedding: learned, d_model: 16, positional: relative}
optim: {lr: 0.01, batch_size: 16, max_steps: 20}
eval: {every: 10, n_id: 32, n_ood: 16, patience: 0, n_examples: 1}
logging: {wandb: false}
sweep:
  axes:
    - {key: model.positional, values: [random_abs, relative]}
    - {key: task.n_train_outputs, values: [40]}
  seeds: [0]
  resources: {cpu: 1, gpu: 0}
  max_concurrent: 1
  phase_diagram: {x: model.positional, y: task.n_train_outputs, metric: attn/prev_token_late}
"""
TINY_SEARCH = TINY_GRID.replace("name: tiny_pe_grid", "name: tiny_outputs_search").split("sweep:")[0] + """
search:
  knob: {key: task.n_train_outputs, low: 20, high: 40}
  success: {threshold: 0.01, seeds: [0]}
  batch: 1
  budget: {trainings: 6}   # the threshold sampler: the fewest that can rule a value in or out
  max_concurrent: 1   # tiny trials: see configs/debug_search.yaml
"""


def test_debug_train_writes_the_tasks_metrics_arrays_and_report(tmp_path):
    out = tmp_path / "debug"
    proc = headsweep("train", CONFIGS / "debug_bigram_trigger.yaml", "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "ood/head_acc=" in proc.stdout and "attn/prev_token_late=" in proc.stdout
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [50, 100]
    assert all(set(TASK_METRICS) <= set(r) for r in records)
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "completed" and {"bigram/step_learned", "head/step_learned"} <= set(result)
    assert result["bigram/excess"] < 1.0  # 100 steps learn most of the bigram (log 62 - floor = 1.9 nats at start)
    arrays = np.load(out / "attention.npz")
    assert arrays["acc_by_position"].shape == arrays["prev_token_by_position"].shape == (48,)  # task.test_len
    assert int(arrays["train_len"]) == 32 and arrays["patterns"].shape[1:3] == (2, 1)
    report = (out / "report.html").read_text()
    assert report.count("data:image/png;base64,") >= 3  # curves, the by-position figure, the patterns


def test_a_tiny_positional_grid_writes_results_and_the_previous_token_phase_diagram(tmp_path):
    config_file = tmp_path / "tiny_pe_grid.yaml"
    config_file.write_text(TINY_GRID)
    out = tmp_path / "grid"
    proc = headsweep("grid", config_file, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = pd.read_csv(out / "results.csv")
    assert sorted(frame["model.positional"]) == ["random_abs", "relative"] and set(frame["status"]) == {"completed"}
    assert {"attn/prev_token_early", "attn/prev_token_late", "late/acc", "ood/head_acc"} <= set(frame.columns)
    assert (out / "phase_diagram.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Phase diagram: mean attn/prev_token_late" in (out / "report.html").read_text()


def test_a_tiny_search_over_the_knob_writes_its_tables_and_report(tmp_path):
    """The task searches through the same CLI: task.n_train_outputs as the knob, its success metric ood/head_acc
    read from every trial."""
    assert_tiny_search_answers(TINY_SEARCH, "ood/head_acc", tmp_path)
