"""`ray job submit -- headsweep grid ...` against a real head started by the test, as docs/CLUSTER.md says."""
import json
import uuid
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]


def test_a_grid_submitted_as_a_job_runs_on_the_head_and_leaves_its_results(ray_head, tmp_path):
    out = tmp_path / "debug_grid"  # absolute: the job runs in an ephemeral copy of the working dir
    job_id = f"headsweep-grid-{uuid.uuid4().hex[:8]}"
    runtime_env = json.dumps({"working_dir": str(ROOT), "env_vars": {"WANDB_MODE": "offline"}})
    proc = ray_head.ray("job", "submit", "--submission-id", job_id, "--runtime-env-json", runtime_env,
                        "--", "headsweep", "grid", "configs/debug_grid.yaml", "--out", str(out), timeout=400)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert f"Job '{job_id}' succeeded" in proc.stdout, proc.stdout[-4000:]
    assert "8 members: 8 completed" in proc.stdout  # the driver's summary, streamed back by the jobs CLI

    frame = pd.read_csv(out / "results.csv")
    assert len(frame) == 8 and set(frame["status"]) == {"completed"}
    assert (out / "report.html").exists() and (out / "phase_diagram.png").exists()
    # the driver joined the head's Ray (through the RAY_ADDRESS the job manager sets) instead of starting its own
    actors = ray_head.ray("list", "actors", "--detail", "--limit", "1000")
    assert actors.returncode == 0 and actors.stdout.count("ImplicitFunc") >= 1, actors.stdout[-3000:]
