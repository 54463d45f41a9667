"""In-context linear regression, a continuous task, end to end through the installed console script: a packed
`headsweep grid` over the pool size with W&B offline (its figures, the report). A search reads the task's metrics as
any task's (their names: tests/unit/test_dry_run.py; a search through the CLI: the other tasks' files)."""
import numpy as np
import pandas as pd

from tests.integration.conftest import headsweep

# Two pool sizes, trained as one pack (their members differ only in task.n_tasks, a member field of the sampler).
TINY_GRID = """
name: tiny_regression_grid
task: {name: linear_regression, dim: 2, n_points: 4, noise: 0.25}
model: {name: transformer, n_layers: 2, n_heads: 1, embedding: linear, d_model: 8, positional: learned_abs}
optim: {lr: 0.01, batch_size: 16, max_steps: 20}
eval: {every: 10, n_id: 32, n_ood: 32, patience: 0, threshold: 0.5}
logging: {wandb: true}
sweep:
  axes: [{key: task.n_tasks, values: [2, 256]}]
  seeds: [0]
  pack: 2
  resources: {cpu: 1, gpu: 0}
"""
def test_a_packed_grid_over_the_pool_logs_to_wandb_and_reports_the_regression(tmp_path):
    config_file, out = tmp_path / "grid.yaml", tmp_path / "grid"
    config_file.write_text(TINY_GRID)
    proc = headsweep("grid", config_file, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = pd.read_csv(out / "results.csv").set_index("task.n_tasks")
    assert list(frame.index.sort_values()) == [2, 256] and set(frame["status"]) == {"completed"}
    assert {"ood/mse", "ood/ridge_mse", "ood/dmmse_mse", "ood/ridge_gap", "id/dmmse_gap", "ood/mse_at_4"} <= set(frame)
    assert not [c for c in frame if c.endswith("/acc")]
    # The baselines are the model's yardstick on the same fixed OOD sequences whatever the pool: ridge's MSE is equal
    # in both members; dMMSE's (the pool's posterior) is not.
    assert frame.loc[2, "ood/ridge_mse"] == frame.loc[256, "ood/ridge_mse"]
    assert frame.loc[2, "ood/dmmse_mse"] > frame.loc[256, "ood/dmmse_mse"]
    member = out / "trials" / frame.loc[2, "member"]
    arrays = np.load(member / "attention.npz")
    assert arrays["ood_mse_by_k"].shape == arrays["ood_ridge_mse_by_k"].shape == (4,)
    [run] = (member / "wandb").glob("offline-run-*")  # its figures logged as W&B media
    assert list(run.glob("files/media/images/regression/mse_by_k_*.png")) and list(run.glob("run-*.wandb"))
    report = (out / "report.html").read_text()
    assert "MSE by context length" in report and "data:image/png;base64," in report

