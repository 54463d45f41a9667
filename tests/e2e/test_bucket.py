"""Sweeps whose --out is a place in an S3-compatible bucket (moto's server on 127.0.0.1, checking credentials), on
two Ray nodes on 127.0.0.1 that share no writable directory: the second node runs in a mount namespace of its own
with private /tmp and /dev/shm and a read-only checkout (private_node).

A grid loses its second node midway, then its driver is killed; started again from another working directory with
an empty mirror, it resumes from the bucket alone and finishes with the results of the same grid on local disk, every
trial's files in the bucket. A search does the same with its studies in PostgreSQL. Bad input (a bucket that does
not exist, wrong credentials, an endpoint that does not answer, a search without a database) is one line naming the
option, exit 2, nothing written and no secret printed."""
import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import pandas as pd
import psutil
import pytest

import headsweep as hs
from tests import warm_cli
from tests.conftest import CONFIGS
from tests.e2e.conftest import cpu_held_on, log_tail, node_processes, start_head, start_node, stop_head, stop_node
from tests.s3_server import s3_server

HEADSWEEP = str(Path(sys.executable).parent / "headsweep")
GRID = CONFIGS / "debug_two_nodes.yaml"  # 4 points, 1 member per trial, a checkpoint every 50 steps
SHORT = "optim.max_steps=200"  # of 400: still 4 checkpoints per trial, half the suite's time
# Two slices searched side by side (no guide), 2 evaluations a slice: each round trains two trials at once, one on each
# node (every slot of the cluster: the config's one at a time would leave the second node idle).
SEARCH = [CONFIGS / "debug_search.yaml", "search.guide.metric=", "search.budget.trainings=6",
          "search.max_concurrent=0"]
TIMEOUT_S = 300
ROOT = Path(__file__).resolve().parents[2]  # the checkout: read-only for the second node
PRIVATE = "/tmp/headsweep-private-node"  # inside the second node's own /tmp only
MEMBER_FILES = {"config.yaml", "metrics.jsonl", "result.json", "attention.npz"}
COMPARED = ["member", "status", "steps", "id/acc", "ood/acc"]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with s3_server(tmp_path_factory.mktemp("s3") / "moto.log") as server:
        yield server


@pytest.fixture(scope="module")
def head(s3):
    """A head whose processes (and trials) hold the bucket's credentials, as a cluster's nodes would."""
    saved = {k: os.environ.get(k) for k in s3.credentials}
    os.environ.update(s3.credentials)
    try:
        head = start_head(num_cpus=1)
    finally:
        for key, value in saved.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)
    try:
        yield head
    finally:
        survivors = stop_head(head)
        assert not survivors, f"processes of the test's ray head survived SIGKILL: {survivors}"


def private_node(head, s3, secret: str | None = None):
    """A second node, with the bucket's credentials (or this secret), in a mount namespace of its own: a fresh tmpfs
    over /tmp (its Ray files, HOME and TMPDIR, where its trials keep their working copies; the test's directories and
    the drivers' local copies are gone from view) and over /dev/shm (Ray's object store), and the checkout (its
    Python) read-only. It shares no writable directory with the head and the drivers; the head's token is copied
    into its own /tmp, as onto another machine. The checkout is opened (fd 3) before the tmpfs hides a checkout under
    /tmp, and bound from that open directory onto a mount point made anew inside the tmpfs (--no-canonicalize: mount
    would otherwise read the path back from /proc/self/fd/3 and bind the empty mount point onto itself)."""
    private = ("unshare", "--mount", "--propagation", "private", "sh", "-c",
               'token=$(cat "$RAY_AUTH_TOKEN_PATH") && exec 3<"$0" && mount -t tmpfs tmpfs /tmp '
               '&& mount -t tmpfs tmpfs /dev/shm && mkdir -p "$0" '
               '&& mount --no-canonicalize -o bind,ro /proc/self/fd/3 "$0" && exec 3<&- '
               '&& for arg; do temp_dir=$arg; done '
               '&& mkdir -p "$temp_dir" "$HOME" "$TMPDIR" "$(dirname "$RAY_AUTH_TOKEN_PATH")" '
               '&& (umask 077 && printf %s "$token" > "$RAY_AUTH_TOKEN_PATH") && exec "$@"', str(ROOT))
    saved = {k: os.environ.get(k) for k in [*s3.credentials, "TMPDIR", "HOME"]}
    os.environ.update(s3.credentials | {"TMPDIR": f"{PRIVATE}/tmp", "HOME": f"{PRIVATE}/home"}
                      | ({"AWS_SECRET_ACCESS_KEY": secret} if secret else {}))
    try:
        return start_node(head, num_cpus=1, wrapper=private)
    finally:
        for key, value in saved.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)


def driver(head, s3, args: list, cache: Path, cwd: Path, log: Path) -> subprocess.Popen:
    """headsweep as a driver on the head's machine, in its own session, with its own mirror directory."""
    env = head.client_env(HEADSWEEP_CACHE=str(cache), OMP_NUM_THREADS="1", WANDB_MODE="offline", **s3.credentials)
    cwd.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as sink:
        return subprocess.Popen([HEADSWEEP, *map(str, args), "--address", head.address], env=env, cwd=cwd,
                                stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def wait_for(keys_found, what: str, proc: subprocess.Popen, log: Path, node=None) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not keys_found():
        if proc.poll() is not None or time.monotonic() > deadline:
            seen = (f"\nthe second node's processes: {process_titles(node)}\nits private files: {private_files(node)}"
                    if node is not None else "")
            pytest.fail(f"never saw {what} (driver exit {proc.poll()}):\n{log_tail(log, 60)}{seen}")
        time.sleep(0.3)


def training_on(node) -> bool:
    """Whether a trial's actor runs among the second node's processes (Ray titles it `ray::ImplicitFunc...`)."""
    return any(title.startswith("ray::ImplicitFunc") for title in process_titles(node))


def process_titles(node) -> list[str]:
    titles = []
    for proc in node_processes(node):
        with suppress(psutil.Error):
            titles.append(" ".join(proc.cmdline())[:120])
    return titles


def private_files(node) -> list[str]:
    """What the second node's trials keep in its private TMPDIR, seen through /proc/PID/root (the node's own view of
    the file system; the rest of the machine has no such directory)."""
    scratch = Path(f"/proc/{node.process.pid}/root{PRIVATE}/tmp")
    return sorted(str(p.relative_to(scratch)) for p in scratch.glob("headsweep-*/*"))


def kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def results(keys: list[str], name: str) -> set[str]:
    """The members that have `name` in the bucket."""
    return {k.split("/")[1] for k in keys if k.startswith("trials/") and k.endswith("/" + name)}


def cli(args: list, env: dict, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """A command no test signals or kills, forked from the warm interpreter (tests/warm_cli.py), its output captured;
    the drivers that are killed or lose a node are the `headsweep` executable (driver above)."""
    return warm_cli.run(list(map(str, args)), env, TIMEOUT_S, cwd)


def local_reference(head, args: list, out: Path) -> None:
    """The same sweep with its --out on local disk, on the test's head (its second node gone: nothing of a bucket)."""
    proc = cli([*args, "--out", out, "--address", head.address], head.client_env(OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_grid_in_a_bucket_survives_a_lost_node_and_a_killed_driver(head, s3, tmp_path):
    uri, prefix = s3.uri("grid"), "grid"
    args = ["grid", GRID, SHORT, "logging.wandb=true", "--out", uri]
    log = tmp_path / "driver.log"
    node, first = private_node(head, s3), None
    others = [n["node_id"] for n in head.alive_nodes() if n["node_id"] != node.node_id]
    try:
        # A trial trains on the second node (the head's CPU held until then: on a busy machine Ray once ran all four
        # trials on the head) and has pushed a checkpoint (its state.pt): then the second node dies, as its machine
        # would.
        with cpu_held_on(head, others):
            first = driver(head, s3, args, tmp_path / "cache-a", tmp_path / "first", log)
            wait_for(lambda: training_on(node), "a trial on the second node", first, log, node)
            wait_for(lambda: results(s3.keys(prefix), "state.pt"), "a checkpoint in the bucket", first, log, node)
        assert not stop_node(node)
        node = None
        # Some members finished, not all: then the driver dies too.
        wait_for(lambda: results(s3.keys(prefix), "result.json"), "a finished member", first, log)
        kill(first)
        finished_before = results(s3.keys(prefix), "result.json")
        assert 0 < len(finished_before) < 4, "the grid ended before its driver was killed: nothing left to resume"
    finally:
        if first is not None:
            kill(first)
        if node is not None:
            assert not stop_node(node)

    # Another working directory, an empty mirror: everything it knows comes from the bucket. A new node has joined,
    # with no more of the sweep on it than the first had.
    node = private_node(head, s3)
    second = driver(head, s3, args, tmp_path / "cache-b", tmp_path / "second", log)
    try:
        assert second.wait(timeout=TIMEOUT_S) == 0, log_tail(log, 80)
    finally:
        kill(second)
        assert not stop_node(node)
    keys = s3.keys(prefix)
    points = results(keys, "result.json")
    assert len(points) == 4
    for point in points:
        files = {k.split("/", 2)[2] for k in keys if k.startswith(f"trials/{point}/")}
        assert MEMBER_FILES <= files, (point, files)
        assert any(f.startswith("wandb/offline-run-") and f.endswith(".wandb") for f in files), (point, files)
        assert "state.pt" not in files  # a finished member's checkpoint is gone with its training
    assert {"config.yaml", "results.csv", "report.html", "ray/grid_plan.json"} <= set(keys)
    assert not [k for k in s3.keys(prefix, markers=True) if k.startswith(".preflight-")]  # every probe deleted

    frame = pd.read_csv(s3.client().get_object(Bucket=s3.bucket, Key=f"{prefix}/results.csv")["Body"])
    local_reference(head, ["grid", GRID, SHORT], tmp_path / "local")  # W&B or not: the same training
    reference = pd.read_csv(tmp_path / "local" / "results.csv")
    pd.testing.assert_frame_equal(frame[COMPARED].sort_values("member").reset_index(drop=True),
                                  reference[COMPARED].sort_values("member").reset_index(drop=True))
    assert [*(tmp_path / "cache-b" / s3.bucket / prefix).glob("headsweep-*/report.html")]  # its own local copy

    # From Python the bucket reads back as the grid it holds (headsweep.load pulls it into a local copy of its own).
    with pytest.MonkeyPatch.context() as mp:
        for key, value in (s3.credentials | {"HEADSWEEP_CACHE": str(tmp_path / "cache-python")}).items():
            mp.setenv(key, value)
        loaded = hs.load(uri)
    assert isinstance(loaded, hs.GridResult) and loaded.failed.empty
    pd.testing.assert_frame_equal(loaded.df[COMPARED].sort_values("member").reset_index(drop=True),
                                  frame[COMPARED].sort_values("member").reset_index(drop=True))

    # The report rebuilt from the bucket alone, anywhere.
    env = head.client_env(HEADSWEEP_CACHE=str(tmp_path / "cache-c"), **s3.credentials)
    proc = cli(["report", uri], env)
    assert proc.returncode == 0 and proc.stdout.startswith(f"s3://{s3.bucket}/{prefix}/report.html"), proc.stderr
    assert [*(tmp_path / "cache-c" / s3.bucket / prefix).glob("headsweep-*/report.html")]


def test_a_node_that_cannot_use_the_bucket_is_refused_before_anything_runs(head, s3, tmp_path):
    node = private_node(head, s3, secret="not-the-node-secret-0123456789")
    try:
        env = head.client_env(HEADSWEEP_CACHE=str(tmp_path / "cache"), **s3.credentials)
        proc = cli(["grid", GRID, "--out", s3.uri("refused/run"), "--address", head.address], env)
    finally:
        assert not stop_node(node)
    assert proc.returncode == 2, proc.stderr[-3000:]
    error = proc.stderr.strip().splitlines()[-1]
    assert error.startswith(f"headsweep: error: --out: node 127.0.0.1/{node.node_id[:8]} cannot use "
                            f"s3://{s3.bucket}/refused/run at {s3.endpoint} (access denied"), error
    assert "not-the-node-secret" not in proc.stdout + proc.stderr and s3.secret_key not in proc.stdout + proc.stderr
    assert s3.keys("refused", markers=True) == []  # nothing written: no probe, no config


def test_a_search_in_a_bucket_resumes_from_another_directory(head, s3, postgres, tmp_path):
    uri, prefix = s3.uri("search"), "search"
    args = ["search", *SEARCH, "--out", uri, "--storage", postgres.createdb("bucket_search")]
    log = tmp_path / "driver.log"
    node = private_node(head, s3)
    try:
        first = driver(head, s3, args, tmp_path / "cache-a", tmp_path / "first", log)
        try:
            wait_for(lambda: results(s3.keys(prefix), "result.json"), "a finished member", first, log)
        finally:
            kill(first)
        assert "min_diversity.csv" not in s3.keys(prefix), "the search ended before its driver was killed"
        second = driver(head, s3, args, tmp_path / "cache-b", tmp_path / "second", log)
        try:
            assert second.wait(timeout=TIMEOUT_S) == 0, log_tail(log, 80)
        finally:
            kill(second)
        actors = head.json("/api/v0/actors?limit=1000")["data"]["result"]["result"]
        assert any(a["class_name"] == "ImplicitFunc" and a["node_id"] == node.node_id
                   for a in actors)  # trials ran there
    finally:
        assert not stop_node(node)
    keys = s3.keys(prefix)
    assert {"config.yaml", "trials.csv", "min_diversity.csv", "report.html"} <= set(keys)
    local_reference(head, ["search", *SEARCH], tmp_path / "local")
    answer = pd.read_csv(s3.client().get_object(Bucket=s3.bucket, Key=f"{prefix}/min_diversity.csv")["Body"])
    reference = pd.read_csv(tmp_path / "local" / "min_diversity.csv")
    assert answer["diversity_star"].tolist() == reference["diversity_star"].tolist()

    # `headsweep show` prints the table from the bucket alone, from a machine that never saw it, writing nothing there
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | s3.credentials \
        | {"HEADSWEEP_CACHE": str(tmp_path / "cache-show")}
    shown = cli(["show", uri], env)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if "K*_q [interval]" in line)
    rows = [line.split() for line in lines[header + 1:header + 1 + len(answer)]]
    stars = ["-" if pd.isna(star) else f"{star:g}" for star in answer["diversity_star"]]
    assert [row[1] for row in rows] == stars, shown.stdout  # one slice key (task.lengths.low), then K*
    assert s3.keys(prefix) == keys


@pytest.mark.parametrize("case", ["missing bucket", "wrong secret", "silent endpoint", "journal"])
def test_bad_bucket_input_is_one_line_naming_the_option_and_writes_nothing(s3, tmp_path, case):
    credentials = s3.credentials | ({"AWS_SECRET_ACCESS_KEY": "not-the-secret-0123456789"} if case == "wrong secret"
                                    else {})
    uri = {"missing bucket": s3.uri("bad", bucket="no-such-bucket"),
           "silent endpoint": "s3://headsweep-tests/bad?endpoint_override=http://127.0.0.1:9"}.get(case, s3.uri("bad"))
    verb = ["search", *SEARCH] if case == "journal" else ["grid", GRID]
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | credentials | {
        "HEADSWEEP_CACHE": str(tmp_path / "cache")}
    proc = cli([*verb, "--out", uri], env, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    [line] = proc.stderr.strip().splitlines()
    option = "--storage" if case == "journal" else "--out"
    assert line.startswith(f"headsweep: error: {option}: "), line
    reason = {"missing bucket": "no such bucket (create it first)", "wrong secret": "access denied",
              "silent endpoint": "does not answer", "journal": "postgresql://"}[case]
    assert reason in line, line
    assert credentials["AWS_SECRET_ACCESS_KEY"] not in proc.stdout + proc.stderr
    assert s3.keys("bad") == [] and not (tmp_path / "cache").exists()
