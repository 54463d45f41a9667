"""`headsweep grid` on a real local Ray: outputs, resumption after a killed driver, a crashed worker, bad resources."""
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from tests.conftest import CONFIGS
from trainables import config
from trainables.train import train

HEADSWEEP = str(Path(sys.executable).parent / "headsweep")
# A grid of small transformer trials, run one at a time, slow enough (a few seconds each) to be interrupted.
SLOW_GRID = """
name: slow_grid
task: {vocab_size: 12, max_len: 16, n_triggers: 1, n_pairs_per_cell: 1, lengths: {low: 2, high: 6}}
model: {name: transformer, n_layers: 2}
optim: {lr: 0.01, max_steps: 400}
eval: {every: 50, n_id: 128, n_ood: 128, patience: 0}
sweep:
  axes: [{key: task.lengths.high, values: [4, 5, 6]}]
  seeds: [0, 1]
  max_concurrent: 1
"""


def headsweep(*args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([HEADSWEEP, *map(str, args)], capture_output=True, text=True, timeout=600, **kwargs)


def finished(out: Path) -> dict[str, int]:
    """trial name -> mtime of its result.json, for every finished trial."""
    return {p.parent.name: p.stat().st_mtime_ns for p in (out / "trials").glob("*/result.json")}


def steps_logged(trial_dir: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (trial_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def debug_grid(tmp_path_factory):
    out = tmp_path_factory.mktemp("grid") / "debug"
    return out, headsweep("grid", CONFIGS / "debug_grid.yaml", "--out", out)


def test_debug_grid_writes_results_diagram_and_report(debug_grid):
    out, proc = debug_grid
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "8 trials: 8 completed" in proc.stdout
    frame = pd.read_csv(out / "results.csv")
    assert len(frame) == 8 and set(frame["status"]) == {"completed"}
    assert {"task.lengths.low", "task.lengths.high", "seed", "ood/acc", "data/max_sum_ratio", "error", "seconds"} <= set(frame.columns)
    assert sorted(zip(frame["task.lengths.low"], frame["task.lengths.high"], frame["seed"])) == [
        (low, high, seed) for low in (2, 5) for high in (6, 8) for seed in (0, 1)]
    # one row per trial, and each row is that trial's own result.json
    for _, row in frame.iterrows():
        result = json.loads((out / "trials" / row["trial"] / "result.json").read_text())
        assert result["ood/acc"] == pytest.approx(row["ood/acc"])
    assert (out / "phase_diagram.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "data:image/png;base64," in (out / "report.html").read_text()
    assert (out / "ray" / "grid").is_dir() and (out / "config.yaml").exists()


def test_rerunning_a_finished_grid_reruns_nothing(debug_grid):
    out, _ = debug_grid
    before = finished(out)
    proc = headsweep("grid", CONFIGS / "debug_grid.yaml", "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert finished(out) == before and len(before) == 8


def test_a_gpu_request_on_a_cluster_without_gpus_fails_before_anything_runs(tmp_path):
    out = tmp_path / "never"
    proc = headsweep("grid", CONFIGS / "debug_grid.yaml", "sweep.resources.gpu=0.5", "--out", out)
    assert proc.returncode == 2 and "sweep.resources.gpu" in proc.stderr and "0 GPU" in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 or proc.stderr.strip().splitlines()[-1].startswith("headsweep: error:")
    assert not out.exists()


def test_a_killed_driver_resumes_without_rerunning_finished_trials(tmp_path):
    config_file = tmp_path / "slow_grid.yaml"
    config_file.write_text(SLOW_GRID)
    out = tmp_path / "out"
    driver = subprocess.Popen([HEADSWEEP, "grid", str(config_file), "--out", str(out)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    # Killed right after the first trial finishes: Tune has not generated every trial yet, the hardest restore.
    while len(finished(out)) < 1 and time.time() < deadline and driver.poll() is None:
        time.sleep(0.2)
    os.killpg(driver.pid, signal.SIGKILL)  # the driver and the local Ray it started: nothing gets to clean up
    driver.wait()
    done_before = finished(out)
    assert 1 <= len(done_before) < 6, "the grid should have been killed midway"

    proc = headsweep("grid", config_file, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = finished(out)
    assert len(after) == 6
    assert {name: after[name] for name in done_before} == done_before  # finished trials were not run again
    for trial in (out / "trials").iterdir():
        assert steps_logged(trial) == list(range(50, 401, 50))  # every evaluation logged exactly once
    frame = pd.read_csv(out / "results.csv")
    assert len(frame) == 6 and set(frame["status"]) == {"completed"}


def test_a_crashed_worker_continues_its_packed_members_from_their_last_checkpoint(tmp_path):
    """A SIGKILLed worker's trial (two members packed as one population) is retried from the last checkpoint the
    driver registered. Which one that is depends on timing (a metrics line is written before Tune has registered the
    checkpoint that goes with it), so the test asserts what holds whatever it was: each member resumed from a
    checkpoint no later than what was logged before the kill, logs every evaluation exactly once, and ends where an
    uninterrupted run of its config ends."""
    config_file = tmp_path / "slow_grid.yaml"
    config_file.write_text(SLOW_GRID.replace("values: [4, 5, 6]", "values: [5]") + "  pack: 2\n")
    out = tmp_path / "out"
    driver = subprocess.Popen([HEADSWEEP, "grid", str(config_file), "--out", str(out)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    trials = [out / "trials" / f"high=5,seed={seed}" for seed in (0, 1)]
    deadline = time.time() + 300
    while time.time() < deadline and driver.poll() is None:
        if all((t / "metrics.jsonl").exists() and len(steps_logged(t)) >= 4 for t in trials):
            break
        time.sleep(0.2)
    logged_before_kill = {t: steps_logged(t)[-1] for t in trials}
    workers = [p for p in psutil.Process(driver.pid).children(recursive=True)
               if "ImplicitFunc" in " ".join(p.cmdline())]
    assert len(workers) == 1, [p.cmdline() for p in psutil.Process(driver.pid).children(recursive=True)]
    workers[0].kill()  # SIGKILL the process running the trial, as an out-of-memory kill would
    output, _ = driver.communicate(timeout=300)
    assert driver.returncode == 0, output[-3000:]
    for trial in trials:
        result = json.loads((trial / "result.json").read_text())
        assert result["status"] == "completed" and result["steps"] == 400
        assert 50 <= result["resumed_from_step"] <= logged_before_kill[trial]  # from a checkpoint, not step 0
        assert steps_logged(trial) == list(range(50, 401, 50))
        alone = train(config.load(trial / "config.yaml")).metrics  # the same config, never interrupted or packed
        assert set(result) - {"resumed_from_step"} == set(alone)
        for key, value in alone.items():
            if key != "seconds" and isinstance(value, float) and math.isfinite(value):
                assert result[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key  # threads, batched kernels
            elif key != "seconds":
                assert result[key] == value or (result[key] is None and not math.isfinite(value)), key
