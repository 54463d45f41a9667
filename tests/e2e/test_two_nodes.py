"""Two Ray nodes on 127.0.0.1 (a head and a second node, 1 CPU each, each in its own session): a grid that loses its
second node midway still finishes every point (the trial it was training is retried on the head, from its last
registered checkpoint if any), and a grid whose output directory the second node does not see is refused before
anything runs."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil
import pytest

from tests import warm_cli
from tests.conftest import CONFIGS
from tests.e2e.conftest import (alive, cpu_held_on, log_tail, node_processes, start_head, start_node, stop_head,
                                stop_node)

HEADSWEEP = str(Path(sys.executable).parent / "headsweep")
CONFIG = CONFIGS / "debug_two_nodes.yaml"  # 4 points, 1 member per trial, checkpoint every 50 of 400 steps
POINTS = [f"high={high},seed={seed}" for high in (4, 5) for seed in (0, 1)]
GRID_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def head():
    head = start_head(num_cpus=1)
    try:
        yield head
    finally:
        survivors = stop_head(head)
        assert not survivors, f"processes of the test's ray head survived SIGKILL: {survivors}"


def test_a_grid_loses_its_second_node_and_still_finishes_every_point(head, tmp_path):
    node = grid = None
    try:
        node = start_node(head, num_cpus=1)
        # The head's CPU is held until a trial trains, so every trial should train on the second node: Ray places
        # trials where it likes, and ran all four on the head in 2 of 4 runs (then the grid proved nothing about losing
        # a node). On a loaded machine a grid still ended without a trial seen training on the second node (twice: in a
        # whole-suite run and beside other test files; in all 3 attempts of a whole run on 2026-12-02; why is still
        # open): such a grid proves nothing either, and runs again, at most 3 times. Each look that found a training
        # trial's metrics.jsonl held by no process of the node says who held it (`missed`), for the next failure.
        missed = []
        for attempt in range(3):
            out = (tmp_path / f"grid{attempt}").resolve()  # the same path on both nodes: one filesystem
            with cpu_held_on(head, [n["node_id"] for n in head.alive_nodes() if n["node_id"] != node.node_id]):
                with open(tmp_path / "grid.log", "wb") as log:
                    grid = subprocess.Popen([HEADSWEEP, "grid", str(CONFIG), "--out", str(out), "--address",
                                             head.address], env=head.client_env(), stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
                victim = frozen_with_a_training_trial(node, out, grid, missed)
            if victim is not None:
                break
            assert grid.wait(timeout=GRID_TIMEOUT_S) == 0, log_tail(tmp_path / "grid.log", 80)
        assert victim is not None, f"{log_tail(tmp_path / 'grid.log', 80)}\nlooks that missed: {missed[-8:]}"
        # The node is frozen mid-trial: the trial has not finished, so Tune must retry it.
        unfinished = not (victim / "result.json").exists()
        survivors = stop_node(node)  # SIGKILL its process group and every worker it started: the machine died
        assert not survivors, survivors

        assert grid.wait(timeout=GRID_TIMEOUT_S) == 0, log_tail(tmp_path / "grid.log", 80)
        frame = pd.read_csv(out / "results.csv")
        assert sorted(frame["member"]) == sorted(POINTS) and set(frame["status"]) == {"completed"}, frame
        for point in POINTS:
            assert (out / "trials" / point / "result.json").exists()
        if unfinished:
            assert failures(out)[victim.name] >= 1  # Tune saw it fail with the node, and retried it to its end
        assert not list(out.glob(".preflight-*"))  # the storage check passed on both nodes and left nothing
    finally:
        stop_driver(grid)
        survivors = stop_node(node) if node is not None else []
        assert not survivors, survivors


def test_a_node_that_does_not_see_the_output_directory_is_refused_before_anything_runs(head, tmp_path):
    # The second node runs in a mount namespace of its own, where a fresh tmpfs hides what is in `shared`: the
    # driver's --out is there for the driver and the head, and missing for that node (storage it does not share).
    shared = (tmp_path / "shared").resolve()
    shared.mkdir()
    out = shared / "grid"
    hide = ("unshare", "--mount", "--propagation", "private",
            "sh", "-c", 'mount -t tmpfs tmpfs "$0" && exec "$@"', str(shared))
    node = start_node(head, num_cpus=1, wrapper=hide)
    try:
        proc = warm_cli.run(["grid", str(CONFIG), "--out", str(out), "--address", head.address], head.client_env(),
                            GRID_TIMEOUT_S)  # forked from the warm interpreter: refused, it is signalled by no one
    finally:
        survivors = stop_node(node)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith(f"headsweep: error: --out: node 127.0.0.1/{node.node_id[:8]} cannot read {out} ("), error
    assert error.endswith("trial outputs must be on storage every node and the driver share (docs/CLUSTER.md)")
    assert not out.exists() and not list(shared.iterdir())  # nothing written, probe files gone
    assert not survivors, survivors


def stop_driver(grid: subprocess.Popen | None) -> None:
    """SIGKILL a driver still running (its own session; its Ray processes belong to the nodes)."""
    if grid is not None and grid.poll() is None:
        os.killpg(grid.pid, signal.SIGKILL)
        grid.wait(timeout=30)


def frozen_with_a_training_trial(node, out: Path, grid: subprocess.Popen, missed: list[str]) -> Path | None:
    """The node frozen (SIGSTOP) while one of its workers trains a trial that has logged an evaluation (whose
    checkpoint it has staged): that trial's directory. A trial whose metrics.jsonl is written and whose result.json is
    not is a candidate; the node is frozen and its processes' open files read (they cannot change while it is
    frozen): the trial is training there if a worker holds its metrics.jsonl open, else the node is thawed and the
    look goes on (who held the file then, if anyone, appended to `missed`). None if the grid ended first. (Reading
    every process's open files at each look instead missed four whole trials in one run on a loaded machine.)"""
    deadline = time.monotonic() + GRID_TIMEOUT_S
    while time.monotonic() < deadline and grid.poll() is None:
        for metrics in out.glob("trials/*/metrics.jsonl"):
            if metrics.stat().st_size > 0 and not (metrics.parent / "result.json").exists():
                signal_node(node, signal.SIGSTOP)
                if any(metrics == Path(f.path) for p in alive(node_processes(node)) for f in open_files(p)):
                    return metrics.parent
                missed.append(f"{metrics.parent.name} (the node's session: {node.process.pid}): held by "
                              f"{holders(metrics) or 'no process'}")
                signal_node(node, signal.SIGCONT)
        time.sleep(0.1)
    if grid.poll() is None:
        pytest.fail(f"no trial trained on the second node within {GRID_TIMEOUT_S} s")
    return None


def holders(path: Path) -> list[str]:
    """Every process with `path` open, read from /proc: 'pid (session sid, parent ppid) command line'."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd")):
                process = psutil.Process(int(pid))
                found.append(f"{pid} (session {os.getsid(int(pid))}, parent {process.ppid()}) "
                             f"{' '.join(process.cmdline())[:80]}")
        except (OSError, psutil.Error):
            continue
    return found


def open_files(process: psutil.Process) -> list:
    try:
        return process.open_files()
    except psutil.Error:
        return []


def signal_node(node, sig: signal.Signals) -> None:
    """SIGSTOP or SIGCONT every process of the node (workers have process groups of their own)."""
    os.killpg(node.process.pid, sig)
    for p in alive(node_processes(node)):
        try:
            p.send_signal(sig)
        except psutil.Error:
            pass


def failures(out: Path) -> dict[str, int]:
    """Trial id -> how many times Tune saw it fail, from the grid's experiment state."""
    state = json.loads(next((out / "ray" / "grid").glob("experiment_state-*.json")).read_text())
    return {json.loads(meta)["config"]["trial"]: json.loads(run)["num_failures"] for meta, run in state["trial_data"]}
