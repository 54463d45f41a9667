"""`ray job submit` of a grid whose task and model are a plugin installed nowhere: the example's package shipped to
the head in the job's runtime environment (`py_modules`) and named by module path, as docs/EXTENDING.md says.

The example is installed in the test environment (as `headsweep_zoology`), so the shipped copy goes under a name no
environment has, which the test checks before submitting."""
import importlib.util
import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "examples" / "headsweep-zoology" / "src" / "headsweep_zoology"
SHIPPED = "zoology_shipped"
GRID = f"""
name: shipped_plugin_grid
task: {{name: "{SHIPPED}.mqar:TASK", n_keys: 12, n_values: 8, n_pairs: 2, n_queries: 2, n_train_keys: 2}}
model: {{name: "{SHIPPED}.base_conv:SPEC", d_model: 16, n_layers: 1}}
optim: {{lr: 0.01, batch_size: 16, max_steps: 20}}
eval: {{every: 10, n_id: 32, n_ood: 32, n_examples: 2}}
logging: {{wandb: false}}
sweep:
  axes: [{{key: task.n_train_keys, values: [2, 8]}}]
  seeds: [0]
  pack: 2
"""


def test_a_grid_of_a_plugin_shipped_with_the_job_runs_on_the_head(ray_head, tmp_path):
    shipped = tmp_path / "modules" / SHIPPED
    shutil.copytree(PACKAGE, shipped, ignore=shutil.ignore_patterns("__pycache__"))
    config = tmp_path / "grid.yaml"
    config.write_text(GRID)
    assert importlib.util.find_spec(SHIPPED) is None  # not importable here...
    probe = subprocess.run([sys.executable, "-c", f"import {SHIPPED}"], capture_output=True, cwd=tmp_path)
    assert probe.returncode != 0  # ...nor in the head's environment (the same interpreter), nor from the job's cwd

    out = tmp_path / "out"
    job_id = f"headsweep-plugin-{uuid.uuid4().hex[:8]}"
    runtime_env = json.dumps({"py_modules": [str(shipped)], "env_vars": {"OMP_NUM_THREADS": "1"}})
    proc = ray_head.ray("job", "submit", "--submission-id", job_id, "--runtime-env-json", runtime_env,
                        "--", "headsweep", "grid", str(config), "--out", str(out), timeout=400)
    assert proc.returncode == 0 and f"Job '{job_id}' succeeded" in proc.stdout, proc.stdout[-4000:]

    frame = pd.read_csv(out / "results.csv")
    assert len(frame) == 2 and set(frame["status"]) == {"completed"}
    assert sorted(frame["data/n_train_keys"]) == [2, 8]  # the plugin's default diversity axis: its knob
    assert (out / "report.html").exists()
    saved = (out / "trials").glob("*/config.yaml")
    assert all(f"{SHIPPED}.mqar:TASK" in path.read_text() for path in saved)
