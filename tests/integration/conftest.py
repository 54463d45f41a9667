"""Shared integration fixtures: a real Ray head started on 127.0.0.1 for the session and stopped by its own process
group (PostgreSQL: tests/postgres_server.py, shared with e2e); the `headsweep` CLI as a subprocess."""
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from filelock import FileLock

from tests import warm_cli
from tests.e2e.conftest import FOREIGN_RAY_VARS, start_head, stop_head

HEADSWEEP = str(Path(sys.executable).parent / "headsweep")
CONFIGS = Path(__file__).resolve().parents[2] / "configs"
# The debug search with two slices searched independently (no guide), so two drivers can each take one, and with
# `search.pack=2` their members pack while both ask; l_min = 5 (widths 1-4, none generalizes) ends a round before
# l_min = 2, whose last round then trains alone. ~20 s on 2 cores.
UNGUIDED_SEARCH = [CONFIGS / "debug_search.yaml", "search.guide.metric=",
                   "search.slices=[{key: task.lengths.low, values: [2, 5]}]"]


# The client environment of the session's shared Ray head, as JSON. In os.environ, not in a module global: the tests
# import this file as tests.integration.conftest, a second module beside the one pytest loaded as `conftest`.
SHARED_RAY_VAR = "HEADSWEEP_TESTS_SHARED_RAY"


@pytest.fixture(scope="session", autouse=True)
def shared_ray():
    """One real Ray head (`ray start --head` on 127.0.0.1, token auth) that the session's `headsweep` runs join
    through RAY_ADDRESS, as a driver on a cluster's head does, instead of each starting and stopping a Ray of its own
    (4-5 s of every run). What is about the Ray a command starts itself (its servers, its files, killed drivers and
    workers) runs with its own: `headsweep(..., own_ray=True)` or a subprocess of the test's own.
    One CPU: each xdist worker has a head of its own, so two heads of one CPU are the machine's two cores. A second
    slot would buy no speed on a machine already busy with the other worker's tests, and would cost a trial worker of
    its own (~5 s of imports) in every grid or search round of two trials or more, and a prestarted Ray worker no
    trial uses (Ray starts one per CPU for each driver: ~0.6 s). Two drivers of one search need a slot each
    (docs/CONFIG.md, "Storage and several drivers"): test_concurrent_search.py's start Rays of their own."""
    head = start_head(num_cpus=1, dashboard=False)
    os.environ[SHARED_RAY_VAR] = json.dumps(head.env)
    try:
        yield head
    finally:
        os.environ.pop(SHARED_RAY_VAR, None)
        survivors = stop_head(head)
        assert not survivors, f"processes of the shared ray head survived SIGKILL: {survivors}"


def headsweep(*args, timeout: float = 900, env: dict | None = None,
              own_ray: bool = False) -> subprocess.CompletedProcess:
    """The CLI as a user runs it, without a terminal (a prompt would fail, not hang); its output captured. It joins
    the session's Ray head unless own_ray (then a grid or search starts a Ray of its own, as on a laptop). Forked
    from a warm interpreter (tests/warm_cli.py) unless it starts a Ray of its own."""
    env = dict(os.environ if env is None else env)
    env.pop(SHARED_RAY_VAR, None)
    if own_ray:
        return warm_cli.cold_run(list(map(str, args)), env, timeout)
    env = {k: v for k, v in env.items() if k not in FOREIGN_RAY_VARS} | json.loads(os.environ[SHARED_RAY_VAR])
    return warm_cli.run(list(map(str, args)), env, timeout)


@pytest.fixture(scope="session")
def unguided_search(tmp_path_factory, worker_id) -> Path:
    """The output directory of one uninterrupted, unpacked run of UNGUIDED_SEARCH: the answer others must give (read
    only). Run once for the whole run: pytest-xdist's workers share the run's temporary folder, and the first to ask
    runs it while the others wait on the lock."""
    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    out = shared / "unguided" / "out"
    with FileLock(shared / "unguided.lock"):
        if not (out / "min_diversity.csv").exists():
            proc = headsweep("search", *UNGUIDED_SEARCH, "--out", out)
            assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def assert_report_rebuilds_the_same(out: Path, scratch: Path) -> None:
    """`headsweep report` on a copy of a finished output dir writes the report the verb wrote (but the time stamp):
    one builder, whoever calls it."""
    copy = scratch / "copy"
    shutil.copytree(out, copy)
    written = (copy / "report.html").read_text()
    proc = headsweep("report", copy)
    assert proc.returncode == 0, proc.stderr[-2000:]
    undated = lambda text: re.sub(r"Generated [^<]*", "", text)
    assert undated((copy / "report.html").read_text()) == undated(written)


JUDGED = {"completed", "succeeded", "verdict_known"}  # statuses of seeds that ended as planned


def assert_tiny_search_answers(config_text: str, metric: str, tmp_path: Path) -> None:
    """A task's tiny threshold search through the CLI: every trial completed with `metric` read, and
    min_diversity.csv gives K*_q inside its interval, fitted to every seed trained (none, when none passed); its
    success curve, report and study written."""
    config_file, out = tmp_path / "search.yaml", tmp_path / "search"
    config_file.write_text(config_text)
    proc = headsweep("search", config_file, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = pd.read_csv(out / "trials.csv")
    assert len(trials) >= 1 and set(trials["status"]) <= JUDGED and trials[metric].notna().all()
    [answer] = pd.read_csv(out / "min_diversity.csv").to_dict("records")
    curve = pd.read_csv(out / "success_curve.csv")
    assert answer["seeds"] == len(trials) == curve["trained"].sum()
    # less diverse first
    order = list(curve[yaml.safe_load((out / "config.yaml").read_text())["search"]["knob"]["key"]])
    rank = lambda column: math.inf if pd.isna(answer[column]) else order.index(answer[column])  # blank: past the widest
    assert rank("diversity_star_low") <= rank("diversity_star") <= rank("diversity_star_high")
    if not (trials["feasible"] == True).any():  # noqa: E712 (a column of True, False and NaN)
        assert pd.isna(answer["diversity_star_high"])  # no seed passed: that no value reaches q is not ruled out
    assert (out / "report.html").stat().st_size > 0 and (out / "study.journal").exists()
