"""A real Ray head for end-to-end tests: `ray start --head --block` on 127.0.0.1, token auth on, stopped by us alone.

What Ray 2.60 needs, found by reading its source and trying it (docs/CLUSTER.md has the long version):
- Token auth: the head reads `RAY_AUTH_MODE=token` and the token from `RAY_AUTH_TOKEN` or the file at
  `RAY_AUTH_TOKEN_PATH` (default ~/.ray/auth_token, which any local `ray.init()` creates). A client needs BOTH the
  mode and the token: a token without `RAY_AUTH_MODE=token` sends no header and gets 401. We write our own token
  file so the test neither reads nor writes ~/.ray.
- Loopback only: Ray rewrites `--node-ip-address=127.0.0.1` to the machine's routable IP and then binds GCS and
  raylet on all interfaces. `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` makes Ray use 127.0.0.1 as the node IP (single
  node only); a client process calling `ray.init()` needs the same variable or it looks for the GCS on the other IP.
- Teardown: SIGTERM makes `ray start --block` ask the GCS to drain the node for 30 s first, but the GCS got the same
  signal, so it hangs ~30 s; `RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=0` skips the drain (stop takes ~5 s).
- Workers get their own process group (same session) and job drivers their own session: the group signal misses
  them, so teardown also kills every descendant it saw before signalling.
- A second node on 127.0.0.1 cannot come from `ray start --address` (it refuses, or rewrites 127.0.0.1 to the
  routable IP): `start_node` runs ray_worker_node.py, the same Node call, in its own session.
"""
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import warnings
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

RAY = str(Path(sys.executable).parent / "ray")
WORKER_NODE = str(Path(__file__).with_name("ray_worker_node.py"))
START_TIMEOUT_S = 90
STOP_TIMEOUT_S = 30
# Inherited variables that would point a process at another cluster or another token; the head and clients drop them.
FOREIGN_RAY_VARS = ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def free_ports(n: int) -> list[int]:
    """n distinct ports free on 127.0.0.1 right now (all held open together so none repeats)."""
    with ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def scrubbed_environ() -> dict:
    return {k: v for k, v in os.environ.items() if k not in FOREIGN_RAY_VARS}


@dataclass
class RayHead:
    """A running head. `env` is what a client process adds to its environment (see `client_env`)."""
    address: str  # GCS address for ray.init / RAY_ADDRESS: "127.0.0.1:PORT"
    dashboard_url: str  # jobs API: "http://127.0.0.1:PORT"
    token: str
    token_path: Path
    temp_dir: Path
    log_path: Path
    env: dict = field(default_factory=dict)
    process: subprocess.Popen = None

    def client_env(self, **extra) -> dict:
        """A full environment for a client subprocess (jobs CLI, or a driver calling ray.init())."""
        return {**scrubbed_environ(), **self.env, **extra}

    def ray(self, *args, timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess:
        """Run the `ray` CLI against this head; stdout and stderr together in .stdout."""
        return subprocess.run([RAY, *map(str, args)], env=self.client_env() if env is None else env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)

    def get(self, path: str, token: str | None = None) -> int:
        """HTTP status of GET dashboard_url + path, with `Authorization: Bearer token` when a token is given."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            with urllib.request.urlopen(urllib.request.Request(self.dashboard_url + path, headers=headers),
                                        timeout=5) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def json(self, path: str) -> dict:
        """GET dashboard_url + path with the token, as JSON."""
        request = urllib.request.Request(self.dashboard_url + path, headers={"Authorization": f"Bearer {self.token}"})
        with urllib.request.urlopen(request, timeout=10) as r:
            return json.load(r)

    def alive_nodes(self) -> list[dict]:
        """The state API's record of every alive node (node_id, node_ip, resources_total, ...)."""
        nodes = self.json("/api/v0/nodes?limit=100")["data"]["result"]["result"]
        return [n for n in nodes if n["state"] == "ALIVE"]

    def log_tail(self, n: int = 60) -> str:
        return log_tail(self.log_path, n)

    def diagnosis(self) -> str:
        """What a failure on this head needs to be understood: `ray start --block` ends the whole head when any of
        its processes dies and names that process in its own log; the processes' logs say why."""
        logs = self.temp_dir / "session_latest" / "logs"
        head_log = ANSI_ESCAPE.sub("", self.log_tail(8))  # `ray start` colours its output
        parts = [f"--- {self.log_path.name} (exit {self.process.poll()})\n{head_log}"]
        for name in HEAD_LOGS:
            tail = log_tail(logs / name, 15)
            if tail.strip():
                parts.append(f"--- {name}\n{tail}")
        return "\n".join(parts)


# The head's own logs, read when a test on a head fails: which process exited, and the errors of those that can.
HEAD_LOGS = ("ray_process_exit.log", "gcs_server.err", "raylet.err", "dashboard.err", "dashboard.log",
             "dashboard_agent.log", "runtime_env_agent.log")
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def log_tail(path: Path, n: int = 60) -> str:
    lines = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join(lines[-n:])


@dataclass
class RayNode:
    """A second node of a head: ray_worker_node.py in its own session, its Ray files in temp_dir."""
    process: subprocess.Popen
    temp_dir: Path
    log_path: Path
    node_id: str = ""  # hex, as Ray's state API and ray.nodes() give it


def start_head(num_cpus: int = 2, dashboard: bool = True) -> RayHead:
    """`ray start --head` on 127.0.0.1 in its own session, returned once it serves. Without `dashboard` (what the
    integration tests' shared head needs: drivers only, no jobs API) Ray runs its dashboard in minimal mode, without
    the modules whose CPU over a whole suite on 2 cores is not nothing, and no log monitor (it tails every worker's
    log for drivers that print worker output; headsweep's drivers never do: log_to_driver=False); it is ready once
    `ray start` says so."""
    # Ray's unix sockets live under the temp dir and must stay under ~107 characters: a short dir in /tmp.
    temp_dir = Path(tempfile.mkdtemp(prefix="hsray-", dir="/tmp"))
    token = secrets.token_hex(32)  # what `ray get-auth-token --generate` makes
    token_path = temp_dir / "auth_token"
    token_path.touch(mode=0o600)
    token_path.write_text(token)
    gcs, port, agent, client_server, dashboard_metrics, autoscaler_metrics = free_ports(6)
    shared = {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token_path),
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # node IP = 127.0.0.1, so every server binds loopback only
    }
    head_env = {
        **scrubbed_environ(), **shared,
        # As if started from the activated venv: a job's entrypoint finds `python` and `headsweep` from it.
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
        # Fixed defaults (44227, 44217) that a second Ray on this machine would also take.
        "DASHBOARD_METRIC_PORT": str(dashboard_metrics),
        "AUTOSCALER_METRIC_PORT": str(autoscaler_metrics),
    }
    head = RayHead(address=f"127.0.0.1:{gcs}", dashboard_url=f"http://127.0.0.1:{port}", token=token,
                   token_path=token_path, temp_dir=temp_dir, log_path=temp_dir / "head.log")
    head.env = {**shared, "RAY_ADDRESS": head.address, "RAY_API_SERVER_ADDRESS": head.dashboard_url}
    cmd = [RAY, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={gcs}",
           f"--include-dashboard={str(dashboard).lower()}", "--dashboard-host=127.0.0.1", f"--dashboard-port={port}",
           f"--dashboard-agent-listen-port={agent}", f"--ray-client-server-port={client_server}",
           f"--include-log-monitor={str(dashboard).lower()}",
           f"--num-cpus={num_cpus}", "--num-gpus=0", "--object-store-memory=500000000",
           f"--temp-dir={temp_dir}", "--disable-usage-stats"]
    with open(head.log_path, "wb") as log:
        # Its own session and process group: stop_head signals that group and nothing else on the machine.
        head.process = subprocess.Popen(cmd, env=head_env, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True, cwd=temp_dir)
    try:
        wait_until_jobs_api_answers(head) if dashboard else wait_until_started(head)
    except BaseException:
        stop_head(head)
        raise
    return head


def wait_until_started(head: RayHead) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while "Ray runtime started" not in head.log_path.read_text(errors="replace"):
        if head.process.poll() is not None:
            pytest.fail(f"ray head exited with {head.process.returncode}:\n{head.log_tail()}")
        if time.monotonic() > deadline:
            pytest.fail(f"ray head did not start within {START_TIMEOUT_S} s:\n{head.log_tail()}")
        time.sleep(0.25)


def wait_until_jobs_api_answers(head: RayHead) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if head.process.poll() is not None:
            pytest.fail(f"ray head exited with {head.process.returncode}:\n{head.log_tail()}")
        # /api/jobs/ answers 200 only once the job module is up and our token is accepted.
        try:
            if head.get("/api/version", head.token) == 200 and head.get("/api/jobs/", head.token) == 200:
                return
        except OSError:
            pass  # not listening yet
        time.sleep(0.25)
    pytest.fail(f"ray head's jobs API did not answer within {START_TIMEOUT_S} s:\n{head.log_tail()}")


def start_node(head: RayHead, num_cpus: int = 1, wrapper: tuple[str, ...] = ()) -> RayNode:
    """A second Ray node on 127.0.0.1 that joins `head`, in its own session; returns once the head lists it alive.
    wrapper: a command that runs the node (e.g. `unshare --mount ...`), which must exec it in the same process."""
    temp_dir = Path(tempfile.mkdtemp(prefix="hsnode-", dir="/tmp"))  # socket paths must stay short
    env = {**head.client_env(), "RAY_USAGE_STATS_ENABLED": "0"}
    cmd = [*wrapper, sys.executable, WORKER_NODE, head.address, str(num_cpus), str(temp_dir)]
    node = RayNode(process=None, temp_dir=temp_dir, log_path=temp_dir / "node.log")
    with open(node.log_path, "wb") as log:
        node.process = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True, cwd=temp_dir)
    try:
        # The node's own id, from the line it prints once up, then alive in the head's list. (Told apart as what was
        # new in that list, the head itself passed for the new node whenever the list came back without it: the
        # dashboard busy, or not yet listing a head just started. Tests then held the CPU of the wrong node, and
        # test_two_nodes' trials trained on the head in every attempt, twice in four whole runs on 2026-12-02.)
        deadline = time.monotonic() + START_TIMEOUT_S
        while (node_id := _printed_node_id(node)) is None or node_id not in _alive_node_ids(head):
            if node.process.poll() is not None:
                pytest.fail(f"ray worker node exited with {node.process.returncode}:\n{log_tail(node.log_path)}")
            if time.monotonic() > deadline:
                pytest.fail(f"ray worker node not alive within {START_TIMEOUT_S} s:\n{log_tail(node.log_path)}")
            time.sleep(0.25)
        node.node_id = node_id
    except BaseException:
        stop_node(node)
        raise
    return node


def _printed_node_id(node: RayNode) -> str | None:
    """The id tests/e2e/ray_worker_node.py prints once its node is up (None before)."""
    found = re.search(r"^ray worker node up: ([0-9a-f]+)$", node.log_path.read_text(errors="replace"), re.M)
    return found.group(1) if found else None


def _alive_node_ids(head: RayHead) -> set[str]:
    try:
        return {n["node_id"] for n in head.alive_nodes()}
    except OSError:  # the dashboard busy or restarting a module: ask again
        return set()


def node_processes(node: RayNode) -> list[psutil.Process]:
    """Every live process of the node: its raylet, agents and workers (whatever their process group)."""
    return session_processes(node.process)


def kill_all(pgid: int, processes: list[psutil.Process]) -> None:
    """SIGKILL a process group and the given processes (those that left it, e.g. into sessions of their own)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    for p in processes:
        try:
            p.kill()
        except psutil.Error:
            pass


def stop_node(node: RayNode) -> list[str]:
    """SIGKILL the node's process group and every process it started, as if its machine died. Returns descriptions
    of processes that survived (expected: none)."""
    seen = node_processes(node)
    kill_all(node.process.pid, seen)
    node.process.wait(timeout=STOP_TIMEOUT_S)
    survivors = {p.pid for p in alive(psutil.wait_procs(seen, timeout=10)[1]) + mentioning(str(node.temp_dir))}
    shutil.rmtree(node.temp_dir, ignore_errors=True)
    return [f"{p.pid} {' '.join(p.info['cmdline'] or [])[:120]}"
            for p in psutil.process_iter(["cmdline"]) if p.pid in survivors]


def head_processes(head: RayHead) -> list[psutil.Process]:
    """Every live process this head started: its descendants, and anything left in its session."""
    return session_processes(head.process)


def session_processes(leader: subprocess.Popen) -> list[psutil.Process]:
    """The live descendants of a process started with start_new_session, and anything left in its session."""
    try:
        procs = psutil.Process(leader.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        procs = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == leader.pid and p.pid != leader.pid:
                procs.append(p)
        except (ProcessLookupError, PermissionError):
            pass
    return list({p.pid: p for p in procs}.values())


def alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those still running (is_running() also checks the create time, so a reused pid is not ours)."""
    result = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                result.append(p)
        except psutil.Error:
            pass
    return result


def mentioning(text: str) -> list[psutil.Process]:
    """Live processes whose command line contains text (every Ray process of a head names its temp dir)."""
    found = []
    for p in psutil.process_iter():
        try:
            if p.status() != psutil.STATUS_ZOMBIE and any(text in arg for arg in p.cmdline()):
                found.append(p)
        except psutil.Error:
            pass
    return found


def stop_head(head: RayHead) -> list[str]:
    """SIGTERM the head's process group, then SIGKILL what is left of it and of the processes it started.

    Returns descriptions of processes that survived even SIGKILL (expected: none)."""
    pgid = head.process.pid  # start_new_session made the head the leader of its own group
    seen = head_processes(head)  # before signalling: orphans are reparented and no longer look like descendants
    try:
        os.killpg(pgid, signal.SIGTERM)
        head.process.wait(timeout=STOP_TIMEOUT_S)  # ~4 s: the leader shuts its children down, then exits
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    psutil.wait_procs(alive(seen), timeout=2)  # stragglers of a graceful shutdown
    # Left now: the group if the leader hung, and a running job's driver (its own session, orphaned, never told).
    stragglers = alive(seen + head_processes(head))
    kill_all(pgid, stragglers)
    head.process.wait(timeout=STOP_TIMEOUT_S)
    survivors = alive(psutil.wait_procs(stragglers, timeout=10)[1]) + mentioning(str(head.temp_dir))
    shutil.rmtree(head.temp_dir, ignore_errors=True)
    return [f"{p.pid} {' '.join(p.info['cmdline'] or [])[:120]}"
            for p in psutil.process_iter(["cmdline"]) if p.pid in {q.pid for q in survivors}]


# The e2e tests' shared head, started by the first test that asks for it and stopped once this process's next test
# does not (pytest_runtest_teardown below), not at the session's end: an idle head with its dashboard is ~6% of a
# core, taken from the other tests for the rest of a run on 2 cores (a second start, ~6 s of CPU, costs less than
# two minutes of it idle).
_RUNNING: dict[str, RayHead] = {}
RAY_HEAD_CPUS = 1  # as the integration tier's shared head (tests/integration/conftest.py: why)


@pytest.fixture
def ray_head():
    """A real single-node Ray head on 127.0.0.1 with token auth and RAY_HEAD_CPUS CPUs: .address, .dashboard_url,
    .env, .ray(...)."""
    return shared_head()


def shared_head() -> RayHead:
    """The running shared head, or a new one. One that died during an earlier test (which failed, with the head's
    logs in its report) is replaced, so that the tests after it run on a head again."""
    if "head" in _RUNNING and _RUNNING["head"].process.poll() is not None:
        dead = _RUNNING.pop("head")
        warnings.warn(f"the e2e tests' shared ray head had died; a new one is started:\n{dead.diagnosis()}")
        stop_head(dead)
    if "head" not in _RUNNING:
        _RUNNING["head"] = start_head(num_cpus=RAY_HEAD_CPUS)
    return _RUNNING["head"]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that ran on the shared head carries the head's logs: a head that died mid-test (CI, 2026-12-02:
    five tests failed on one head whose dashboard went away, nothing said why) is otherwise a mystery."""
    report = (yield).get_result()
    if report.failed and "head" in _RUNNING and "ray_head" in getattr(item, "fixturenames", ()):
        report.sections.append(("ray head", _RUNNING["head"].diagnosis()))


def pytest_runtest_teardown(item, nextitem):
    """Stop the shared head once this process's next test does not use it (or there is none)."""
    if "head" in _RUNNING and (nextitem is None or "ray_head" not in nextitem.fixturenames):
        survivors = stop_head(_RUNNING.pop("head"))
        assert not survivors, f"processes of the test's ray head survived SIGKILL: {survivors}"


HOLD_SCRIPT = """
import sys
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)

@ray.remote(num_cpus=1)
class Hold:
    def ready(self):
        return True

holds = [Hold.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
         for node in sys.argv[2:]]
ray.get([h.ready.remote() for h in holds])
print("held", flush=True)
sys.stdin.read()  # until the test closes our stdin or kills us: our actors die with this driver
"""


@contextmanager
def cpu_held_on(head: RayHead, node_ids: list[str]):
    """One CPU of each given node taken by an actor of a driver of our own while the block runs, so that trials can
    only start elsewhere (e.g. on a second node whose loss a test is about): Ray places trials where it likes."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD_SCRIPT, head.address, *node_ids], env=head.client_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        line = proc.stdout.readline()
        if line.strip() != "held":
            pytest.fail(f"could not hold a CPU on {node_ids}: {line}{proc.stdout.read()[-2000:]}")
        yield
    finally:
        with suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=STOP_TIMEOUT_S)
