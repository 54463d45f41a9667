"""The local Ray every verb starts without an address (cluster.connect(None)) serves that process alone: each of its
servers listens on 127.0.0.1 only, its GCS answers only requests that carry the token, it starts no worker that
nothing needs, and Tune's notices of slow operations are not shown."""
import json
import subprocess
import sys

import grpc
import psutil
import pytest
from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

from tests.e2e.conftest import alive, scrubbed_environ

LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}
# Starts the local Ray as a verb does, runs one task (so a worker is up too) and the storage check, prints what the
# tests need, then keeps Ray up until its stdin closes.
DRIVER = """
import json, os, sys, tempfile, time
import psutil, ray
from sweep import cluster
cluster.connect(None)
# Ray would prestart its workers as the driver registers: look for a while before anything asks for one
workers_before_any_task, looked_until = 0, time.monotonic() + 5
while time.monotonic() < looked_until:
    titles = [" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True)]
    workers_before_any_task = max(workers_before_any_task, sum(
        t.startswith("ray::") and not t.startswith(("ray::DashboardAgent", "ray::RuntimeEnvAgent")) for t in titles))
    time.sleep(0.2)

# Tune's notice of a slow operation (which it gives only a minute after its import) is dropped; its other warnings not
import logging
from ray.tune.utils import util as tune_util
tune_warnings = []
catcher = logging.Handler()
catcher.emit = lambda record: tune_warnings.append(record.getMessage())
tune_util.logger.addHandler(catcher)
tune_util.START_OF_TIME -= 60
with tune_util.warn_if_slow("process_trial_result", threshold=1e-6):
    time.sleep(0.01)
tune_util.logger.warning("Install psutil to monitor system performance.")

@ray.remote
def open_a_wandb_run():
    from trainables import trainable  # what a trial does first (run_trial)
    trainable.drop_inherited_wandb_service()
    import wandb
    wandb.init(mode="offline", dir=tempfile.mkdtemp(), settings=wandb.Settings(silent=True)).finish()
    return trainable.INHERITED_WANDB_SERVICE

inherited = ray.get(open_a_wandb_run.remote())

from pathlib import Path
from sweep import preflight
preflight.on_node.directory_probe = None  # what the check would run on a node: asking one fails now
try:
    preflight.check_shared_storage(Path(tempfile.mkdtemp()) / "out")
    asked = False
except AttributeError:
    asked = True
print(json.dumps({"gcs": ray.get_runtime_context().gcs_address, "worker_inherited": inherited,
                  "driver_service": os.environ.get("WANDB_SERVICE"), "storage_check_asked_a_node": asked,
                  "workers_before_any_task": workers_before_any_task, "tune_warnings": tune_warnings}),
      flush=True)
sys.stdin.read()
"""
# What W&B sets in a process that has used it (a notebook's kernel) to share its service with its children, Ray's
# workers among them: here a service that has gone (nothing listens on port 9, "discard").
WANDB_SERVICE = "3-1-tcp-localhost-9"


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """A process that called cluster.connect(None), with a HOME of its own (the token Ray makes lands there)."""
    home = tmp_path_factory.mktemp("home")
    driver = subprocess.Popen([sys.executable, "-c", DRIVER],
                              env={**scrubbed_environ(), "HOME": str(home), "WANDB_SERVICE": WANDB_SERVICE},
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    ray_processes = []
    try:
        line = driver.stdout.readline()
        assert line, f"the driver exited with {driver.wait(timeout=30)} before Ray was up"
        ray_processes = psutil.Process(driver.pid).children(recursive=True)
        yield json.loads(line), ray_processes, (home / ".ray" / "auth_token").read_text().strip()
    finally:
        driver.stdin.close()  # the driver returns and ray.shutdown() runs at exit
        try:
            driver.wait(timeout=60)
        except subprocess.TimeoutExpired:
            driver.kill()
        for p in alive(ray_processes):  # whatever did not stop by itself: ours alone, by pid
            p.kill()


def test_every_server_of_the_local_ray_listens_on_loopback_only(local_ray):
    _, processes, _ = local_ray
    listening = {}
    for p in alive(processes):
        try:
            listening[p.name()] = {c.laddr.ip for c in p.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
        except psutil.NoSuchProcess:
            pass
    assert {"gcs_server", "raylet"} <= {name for name, ips in listening.items() if ips}, listening  # not vacuous
    assert all(ips <= LOOPBACK for ips in listening.values()), listening


def test_the_local_gcs_refuses_requests_without_the_token(local_ray):
    gcs, token = local_ray[0]["gcs"], local_ray[2]
    with grpc.insecure_channel(gcs) as channel:
        nodes = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetAllNodeInfo
        request = gcs_service_pb2.GetAllNodeInfoRequest()
        for metadata in ((), (("authorization", f"Bearer {'0' * len(token)}"),)):  # none, and a wrong one
            with pytest.raises(grpc.RpcError) as refused:
                nodes(request, metadata=metadata, timeout=30)
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        reply = nodes(request, metadata=(("authorization", f"Bearer {token}"),), timeout=30)
        assert len(reply.node_info_list) == 1 and reply.node_info_list[0].node_manager_address == "127.0.0.1"


def test_a_trial_opens_its_wandb_runs_in_a_service_of_its_own(local_ray):
    """A driver that used W&B (a notebook's kernel) keeps its service; its Ray's workers inherit it, and a trial drops
    it before opening a run: a worker killed mid-run would leave its run "in use" in a shared service, and the retried
    member could not open it again. Here the inherited service is gone, so a run opened there would fail."""
    seen, _, _ = local_ray
    assert seen["driver_service"] == WANDB_SERVICE and seen["worker_inherited"] == WANDB_SERVICE


def test_the_storage_check_asks_nothing_of_a_local_ray_the_driver_started(local_ray):
    """Its one node is the driver's own machine, its processes the driver's children: what the driver wrote, they
    read. A task there would be a worker's time on every grid and search run without an address."""
    seen, _, _ = local_ray
    assert seen["storage_check_asked_a_node"] is False


def test_a_local_ray_starts_no_worker_before_something_needs_one(local_ray):
    """Ray prestarts a worker per CPU for a node's first driver; on a local Ray none of them would run anything (a
    Tune trial's actor has a runtime environment of its own, and the storage check asks nothing of it): N idle
    processes on an N-core machine, ~0.6 s of CPU each."""
    seen, _, _ = local_ray
    assert seen["workers_before_any_task"] == 0 and psutil.cpu_count() >= 2  # prestarted: one per CPU


def test_tunes_notices_of_slow_operations_are_not_shown(local_ray):
    """Tune's "The `process_trial_result` operation took 1.149 s, which may be a performance bottleneck" is advice to
    whoever calls tune.report (headsweep, once per pack). The driver's bookkeeping passes Tune's 0.5 s now and then on
    a machine the trials fill: eight such lines in one notebook cell. Tune's other warnings still show."""
    seen, _, _ = local_ray
    assert seen["tune_warnings"] == ["Install psutil to monitor system performance."]
