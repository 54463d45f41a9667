"""`headsweep grid` on a real local Ray: outputs, resumption after a killed driver, a crashed worker, bad resources."""
import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from tests.conftest import CONFIGS, assert_same_metrics
from tests.integration.conftest import HEADSWEEP, assert_report_rebuilds_the_same, headsweep
from trainables import config
from trainables.io import read_jsonl
from trainables.train import train

# A grid of small transformer trials, run one at a time, slow enough (a few seconds each) to be interrupted.
SLOW_GRID = """
name: slow_grid
task: {vocab_size: 12, max_len: 16, n_triggers: 1, n_pairs_per_cell: 1, lengths: {low: 2, high: 6}}
model: {name: transformer, n_layers: 2}
optim: {lr: 0.01, max_steps: 240}
eval: {every: 40, n_id: 128, n_ood: 128, patience: 0}
sweep:
  axes: [{key: task.lengths.high, values: [4, 5, 6]}]
  seeds: [0, 1]
  max_concurrent: 1
"""
EVALUATIONS = list(range(40, 241, 40))  # the steps a SLOW_GRID trial evaluates and logs at


def finished(out: Path) -> dict[str, int]:
    """trial name -> mtime of its result.json, for every finished trial."""
    return {p.parent.name: p.stat().st_mtime_ns for p in (out / "trials").glob("*/result.json")}


def steps_logged(member_dir: Path) -> list[int]:
    return [record["step"] for record in read_jsonl(member_dir / "metrics.jsonl")]  # a torn last line is skipped


@pytest.fixture(scope="module")
def debug_grid(tmp_path_factory):
    out = tmp_path_factory.mktemp("grid") / "debug"
    return out, headsweep("grid", CONFIGS / "debug_grid.yaml", "--out", out)


def test_the_report_verb_rebuilds_the_report_grid_wrote(debug_grid, tmp_path):
    assert_report_rebuilds_the_same(debug_grid[0], tmp_path)


def test_debug_grid_writes_results_diagram_and_report(debug_grid):
    out, proc = debug_grid
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "8 members: 8 completed" in proc.stdout
    assert "Last result" not in proc.stdout  # the progress view and the table only, no line per Tune trial
    frame = pd.read_csv(out / "results.csv")
    assert len(frame) == 8 and set(frame["status"]) == {"completed"}
    assert {"task.lengths.low", "task.lengths.high", "seed", "ood/acc", "data/max_sum_ratio", "error",
            "seconds"} <= set(frame.columns)
    assert sorted(zip(frame["task.lengths.low"], frame["task.lengths.high"], frame["seed"])) == [
        (low, high, seed) for low in (2, 5) for high in (6, 8) for seed in (0, 1)]
    # one row per member, and each row is that member's own result.json; `member` alone names it
    assert "trial" not in frame.columns
    for _, row in frame.iterrows():
        result = json.loads((out / "trials" / row["member"] / "result.json").read_text())
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
    assert proc.stderr.startswith("headsweep: error:") and proc.stderr.count("\n") == 1
    assert not out.exists()


# More members of about 1 GiB each (optim.batch_size=90000 of configs/debug.yaml) than this machine has GiB in all.
MEMBERS_BEYOND_MEMORY = psutil.virtual_memory().total // 2**30 + 2


@pytest.mark.parametrize("pack, batch_size, refusal", [
    (MEMBERS_BEYOND_MEMORY, 90_000, f"sweep.pack: {MEMBERS_BEYOND_MEMORY} members per pack need about"),  # each fits
    (1, 100_000_000, "optim.batch_size: a training run needs about"),  # not even one
])
def test_a_trial_or_packed_population_too_large_for_the_memory_fails_before_anything_runs(tmp_path, pack, batch_size,
                                                                                           refusal):
    out = tmp_path / "never"
    seeds = list(range((MEMBERS_BEYOND_MEMORY + 1) // 2))  # two lengths each: enough members to fill one trial
    proc = headsweep("grid", CONFIGS / "debug.yaml", "sweep.axes=[{key: task.lengths.high, values: [5, 6]}]",
                     f"sweep.seeds={seeds}", f"sweep.pack={pack}", f"optim.batch_size={batch_size}", "--out", out)
    assert proc.returncode == 2 and proc.stderr.startswith(f"headsweep: error: {refusal}"), proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1
    assert not out.exists()


def test_a_trial_that_fails_on_every_try_is_recorded_with_its_error_and_the_grid_finishes(tmp_path):
    """One member's directory is broken (its config.yaml is a directory: a disk that went wrong); its trial fails on
    every try, Tune retries it sweep.max_failures times, and the grid ends with the error in results.csv beside the
    good trial."""
    out = tmp_path / "out"
    (out / "trials" / "high=6,seed=0" / "config.yaml").mkdir(parents=True)
    proc = headsweep("grid", CONFIGS / "debug_grid.yaml", "sweep.axes=[{key: task.lengths.high, values: [5, 6]}]",
                     "sweep.seeds=[0]", "sweep.pack=1", "sweep.max_failures=1", "--out", out)
    assert proc.returncode == 1, proc.stderr[-3000:]  # some trial failed for good
    frame = pd.read_csv(out / "results.csv").set_index("task.lengths.high")
    assert frame.loc[5, "status"] == "completed"
    assert frame.loc[6, "status"] == "error"
    assert frame.loc[6, "error"].startswith("IsADirectoryError: "), frame.loc[6, "error"]
    # and beside the member, where a search reads why its candidate failed (tests/unit/test_search_loop.py)
    assert (out / "trials" / "high=6,seed=0" / "error.txt").read_text().startswith("IsADirectoryError: ")
    assert "1 completed, 1 error" in proc.stdout


def test_a_killed_driver_resumes_without_rerunning_finished_trials(tmp_path):
    """Packed and not: the six members go in a trial of five (a population) and a trial of one, in that order. The
    driver is killed once the first trial has finished and the second is training: Tune has not generated every trial
    yet (the hardest restore), and one member is cut off mid-training."""
    config_file = tmp_path / "slow_grid.yaml"
    config_file.write_text(SLOW_GRID + "  pack: 5\n")
    out = tmp_path / "out"
    last = out / "trials" / "high=6,seed=1"  # the trial of one, trained second
    driver = subprocess.Popen([HEADSWEEP, "grid", str(config_file), "--out", str(out)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline and driver.poll() is None and not (
            len(finished(out)) >= 1 and (last / "metrics.jsonl").exists() and steps_logged(last)):
        time.sleep(0.05)
    os.killpg(driver.pid, signal.SIGKILL)  # the driver and the local Ray it started: nothing gets to clean up
    driver.wait()
    done_before = finished(out)
    assert 1 <= len(done_before) < 6, "the grid should have been killed midway"

    proc = headsweep("grid", config_file, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(map(len, json.loads((out / "ray" / "grid_plan.json").read_text()).values())) == [1, 5]
    after = finished(out)
    assert len(after) == 6
    assert {name: after[name] for name in done_before} == done_before  # finished trials were not run again
    for trial in (out / "trials").iterdir():
        assert steps_logged(trial) == EVALUATIONS  # every evaluation logged exactly once
    frame = pd.read_csv(out / "results.csv")
    assert len(frame) == 6 and set(frame["status"]) == {"completed"}
    # What the resume trained ends as a grid never interrupted (those that had finished are untouched, above; that
    # packed members end as unpacked ones: tests/integration/test_packing.py)
    for name in set(after) - set(done_before):
        trial = out / "trials" / name
        assert_same_metrics(json.loads((trial / "result.json").read_text()),  # a Ray worker's threads, batched
                            train(config.load(trial / "config.yaml")).metrics, rel=1e-4)  # kernels: not bit-equal


def test_a_grid_stopped_by_ctrl_c_says_so_in_one_line_and_resumes(tmp_path):
    """A grid stopped by Ctrl-C once a trial has finished: exit 130, its table so far on stdout (`headsweep show`
    prints it again), one line on stderr saying what is kept and how to resume (no Ray stack dump, no Tune restore
    recipe, no traceback), and the same command again trains only what was left. A scheduler's SIGTERM ends the same
    way (sweep/stopping.py): in process in tests/unit/test_cli_args.py, and
    with a real grid and its local Ray in tests/e2e/test_slurm.py (a requeued job)."""
    stop = signal.SIGINT  # as a terminal sends it
    config_file, out = tmp_path / "slow_grid.yaml", tmp_path / "out"
    config_file.write_text(SLOW_GRID.replace("values: [4, 5, 6]", "values: [4, 6]"))  # 4 trials
    # Its own Ray, as on a laptop; SIGINT as a terminal leaves it (a test run in the background inherits it ignored,
    # and a Python started with SIGINT ignored keeps ignoring it, as a background job should).
    driver = subprocess.Popen([HEADSWEEP, "grid", str(config_file), "--out", str(out)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.time() + 300
        while time.time() < deadline and driver.poll() is None and not finished(out):
            time.sleep(0.05)
        driver.send_signal(stop)
        stdout, stderr = driver.communicate(timeout=300)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)  # whatever of its local Ray is left
    done_before = finished(out)
    assert 1 <= len(done_before) < 4, "the grid should have been stopped midway"
    assert driver.returncode == 128 + stop
    assert stderr.strip().splitlines() == [stderr.strip()], stderr  # one line
    assert stderr.startswith("headsweep: stopped (Ctrl-C); ")
    assert "run the same command again to resume" in stderr
    # the table so far on stdout: every member, those that had not finished marked so
    so_far = stdout[stdout.index("stopped: the table so far"):]
    assert "4 members: " in so_far and f"{len(done_before)} completed" in so_far and "unfinished" in so_far
    shown = headsweep("show", out, timeout=120)  # and again from its files, with nothing started
    assert shown.returncode == 0 and shown.stdout.strip() in so_far, shown.stdout + shown.stderr

    proc = headsweep("grid", config_file, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = finished(out)
    assert len(after) == 4 and {name: after[name] for name in done_before} == done_before


def is_trial_worker(process: psutil.Process) -> bool:
    """A Ray worker running a Tune function trial; a process that exits while we look (a zombie, gone) is none."""
    try:
        return "ImplicitFunc" in " ".join(process.cmdline())
    except psutil.Error:
        return False


def test_a_crashed_worker_continues_its_packed_members_from_their_last_checkpoint(tmp_path):
    """A SIGKILLed worker's trial (two members packed as one population) is retried from the last checkpoint the
    driver registered. Which one that is depends on timing (a checkpoint is reported once every member has logged its
    evaluation, and may not have reached the driver before the kill), so the test asserts what holds whatever it was:
    each member resumed from a checkpoint no later than what it had logged when killed, logs every evaluation exactly
    once, and ends where an uninterrupted run of its config ends."""
    config_file = tmp_path / "slow_grid.yaml"
    config_file.write_text(SLOW_GRID.replace("values: [4, 5, 6]", "values: [5]") + "  pack: 2\n")
    out = tmp_path / "out"
    driver = subprocess.Popen([HEADSWEEP, "grid", str(config_file), "--out", str(out)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
    trials = [out / "trials" / f"high=5,seed={seed}" for seed in (0, 1)]
    deadline, workers = time.time() + 300, []
    while time.time() < deadline and driver.poll() is None:
        if not workers and all((t / "metrics.jsonl").exists() for t in trials):  # the trial is training
            workers = [p for p in psutil.Process(driver.pid).children(recursive=True) if is_trial_worker(p)]
        if workers and all(len(steps_logged(t)) >= 3 for t in trials):
            break
        time.sleep(0.02)
    assert len(workers) == 1, [p.cmdline() for p in psutil.Process(driver.pid).children(recursive=True)]
    workers[0].suspend()  # frozen before anything is read: what it had done is what the kill takes away
    assert not any((t / "result.json").exists() for t in trials), "the trial should have been killed midway"
    workers[0].kill()  # SIGKILL the process running the trial, as an out-of-memory kill would
    workers[0].wait(timeout=30)
    logged_before_kill = {t: steps_logged(t)[-1] for t in trials}  # read after the kill: it may log until then
    output, _ = driver.communicate(timeout=300)
    assert driver.returncode == 0, output[-3000:]
    for trial in trials:
        result = json.loads((trial / "result.json").read_text())
        assert result["status"] == "completed" and result["steps"] == 240
        assert 40 <= result["resumed_from_step"] <= logged_before_kill[trial]  # from a checkpoint, not step 0
        assert steps_logged(trial) == EVALUATIONS
        alone = train(config.load(trial / "config.yaml")).metrics  # never interrupted or packed
        assert_same_metrics(result, alone, rel=1e-4)  # another process: threads and batched kernels differ
