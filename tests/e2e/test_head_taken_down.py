"""A driver and the Ray head it joined, stopped together (what a Slurm requeue or preemption does: SIGTERM to every
process of the job at once): the driver still writes what finished and says it stopped. It failed before: Ray ends
a driver at once (exit 1, nothing printed) when the node holding objects it owns goes, and tune.with_parameters had
put the trainable's arguments in the head's object store."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd

from tests.conftest import CONFIGS
from tests.e2e.conftest import log_tail, start_head, stop_head

HEADSWEEP = str(Path(sys.executable).parent / "headsweep")
TIMEOUT_S = 120


def test_a_driver_stopped_with_its_head_writes_what_finished_and_says_so(tmp_path):
    head = start_head(num_cpus=1, dashboard=False)  # drivers only: no jobs API
    out, log = tmp_path / "out", tmp_path / "grid.log"
    grid = None
    try:
        # One member a trial, one trial at a time, 1-2 s each (n_samples): seven of eight are left when the first ends.
        with open(log, "wb") as output:
            grid = subprocess.Popen([HEADSWEEP, "grid", str(CONFIGS / "debug_grid.yaml"), "sweep.max_concurrent=1",
                                     "sweep.pack=1", "model.n_samples_V=131072", "model.n_samples_KQ=131072",
                                     "--out", str(out), "--address", head.address],
                                    env=head.client_env(), stdout=output, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + TIMEOUT_S
        while not list(out.glob("trials/*/result.json")):
            assert grid.poll() is None and time.monotonic() < deadline, log_tail(log, 80)
            time.sleep(0.2)
        # `ray start --block` stops its raylet, then its GCS, which tells the driver the node is gone (SIGTERM to
        # all of them at once, the GCS may go first and never tell: the driver did not die that way).
        head.process.send_signal(signal.SIGTERM)
        grid.send_signal(signal.SIGTERM)

        assert grid.wait(timeout=TIMEOUT_S) == 128 + signal.SIGTERM, log_tail(log, 80)
        text = log.read_text()
        assert "stopped: the table so far" in text and "headsweep: stopped (SIGTERM)" in text, text[-4000:]
        frame = pd.read_csv(out / "results.csv")
        assert len(frame) == 8 and "completed" in set(frame["status"]), frame
        assert (out / "report.html").exists()
    finally:
        if grid is not None and grid.poll() is None:
            os.killpg(grid.pid, signal.SIGKILL)
            grid.wait(timeout=30)
        survivors = stop_head(head)
        assert not survivors, f"processes of the test's ray head survived SIGKILL: {survivors}"
