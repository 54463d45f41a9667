"""The local Ray every verb starts without an address (cluster.connect(None)) serves that process alone: each of its
servers listens on 127.0.0.1 only, and its GCS answers only requests that carry the token."""
import json
import subprocess
import sys

import grpc
import psutil
import pytest
from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc

from tests.e2e.conftest import alive, scrubbed_environ

LOOPBACK = {"127.0.0.1", "::ffff:127.0.0.1", "::1"}
# Starts the local Ray as a verb does, runs one task (so a worker is up too), prints what the test needs, then keeps
# Ray up until its stdin closes.
DRIVER = """
import json, os, sys
import ray
from sweep import cluster
cluster.connect(None)
worker_service = ray.get(ray.remote(lambda: os.environ.get("WANDB_SERVICE")).remote())
print(json.dumps({"gcs": ray.get_runtime_context().gcs_address, "worker_service": worker_service,
                  "driver_service": os.environ.get("WANDB_SERVICE")}), flush=True)
sys.stdin.read()
"""
# What W&B sets in a process that has used it (a notebook's kernel) to share its service with the process's children.
WANDB_SERVICE = "wandb-core-1-12345-tcp-localhost-54321"


@pytest.fixture(scope="module")
def local_ray(tmp_path_factory):
    """A process that called cluster.connect(None), with a HOME of its own (the token Ray makes lands there)."""
    home = tmp_path_factory.mktemp("home")
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], env={**scrubbed_environ(), "HOME": str(home), "WANDB_SERVICE": WANDB_SERVICE},
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


def test_the_local_rays_workers_start_a_wandb_service_of_their_own(local_ray):
    """A driver that used W&B (a notebook's kernel) keeps its service; the workers of the Ray it starts do not inherit
    it: a worker killed mid-run would leave its run "in use" there, and the retried member could not open it again."""
    seen, _, _ = local_ray
    assert seen["driver_service"] == WANDB_SERVICE and seen["worker_service"] is None
