"""`python ray_worker_node.py GCS_ADDRESS NUM_CPUS TEMP_DIR`: a second Ray node joins a loopback-only head and blocks.

What `ray start --address=GCS_ADDRESS --block` does for a worker node (the same ray._private.node.Node call), on
127.0.0.1. The CLI itself cannot do it: with RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 (the variable that keeps every server
on loopback) it refuses to start a worker node, and without it it rewrites 127.0.0.1 to the machine's routable IP, both
for the GCS address it dials and for the node's own servers (which then listen on every interface). Run it with the
head's client environment (RAY_AUTH_MODE=token, the token, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0) in its own session;
stop it by signalling that session's processes (tests/e2e/conftest.py::stop_node).
"""
import sys
import time

import ray._private.node
import ray._private.parameter

OBJECT_STORE_BYTES = 150 * 1024 * 1024  # what ray.cluster_utils gives a test node


def main(gcs_address: str, num_cpus: int, temp_dir: str) -> None:
    params = ray._private.parameter.RayParams(
        gcs_address=gcs_address, node_ip_address="127.0.0.1", num_cpus=num_cpus, num_gpus=0,
        object_store_memory=OBJECT_STORE_BYTES, temp_dir=temp_dir,
        node_manager_port=0, min_worker_port=0, max_worker_port=0,  # any free port, none the head took
        dashboard_agent_listen_port=None,
        include_log_monitor=False)  # one per machine: the head's already runs here
    node = ray._private.node.Node(params, head=False, shutdown_at_exit=True, spawn_reaper=True)
    print(f"ray worker node up: {node.node_id}", flush=True)
    while True:  # like `ray start --block`: the node's processes live as long as this one
        time.sleep(1)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3])
