"""The Ray cluster a grid or search runs on: joined at an address, or started in this process for it alone; what it
offers (slots for a trial's resources, the largest node's memory); leaving it.

Ray starts in-process on this machine unless an address is given (`--address`, or RAY_ADDRESS as set by
`ray job submit`); a local Ray serves this process alone: its servers listen on 127.0.0.1 only, with token auth on.
A command leaves its Ray when it ends; the Python API keeps a local Ray it started for the process's next grid or
search (`keep_local_between_runs`), as a notebook user who called `ray.init()` once would.
"""
from __future__ import annotations

import gc
import logging
import os
import threading
from contextlib import contextmanager
from typing import Callable, TypeVar

import ray
import ray._private.ray_constants as ray_constants

from sweep import stopping
from trainables.errors import ConfigError

T = TypeVar("T")

LOOPBACK_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray's node IP is 127.0.0.1 (docs/CLUSTER.md)
# Whether a local Ray this process starts stays up after a run that ended normally (set by the Python API), and
# whether the Ray now connected is such a kept one. Stopping a Ray costs a few seconds and starting one 4-14 s on 2
# cores: a notebook's every cell paid both. A stopped or crashed run still leaves Ray (trials may be running).
_keep_local = False
_kept = False
# The node of a local Ray this process started: its raylet and workers are this process's children, seeing its files.
_own_node: str | None = None


def keep_local_between_runs() -> None:
    """From now on, keep a local Ray this process starts for its next grid or search; it ends with the process (Ray's
    own exit hook) or `ray.shutdown()`."""
    global _keep_local
    _keep_local = True


def connect(address: str | None) -> None:
    """Join the cluster at `address` (or RAY_ADDRESS), else start a local one in this process."""
    address = address or os.environ.get("RAY_ADDRESS")
    if address and address.startswith("http"):
        raise ConfigError("--address", f"{address} is a dashboard URL (what `ray job submit` takes); give the "
                                       "cluster's GCS address host:port, or unset RAY_ADDRESS for a local Ray")
    # The classic progress table (a compact row per trial) rather than the new engine's per-trial config dumps.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # Snapshots after each checkpoint are what makes a killed grid resumable; Tune's warning about them is noise.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    logging.getLogger("ray.tune.utils.util").addFilter(_without_slow_operation_notices)  # (once: the same object)
    global _kept, _own_node
    if ray.is_initialized():
        if not (_kept and address):
            return  # the Ray this process is connected to: the kept local one, or one the user's code joined
        leave()  # a kept local Ray, but this run is for a cluster
    if address:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    else:
        _start_local()
        _kept, _own_node = _keep_local, ray.get_runtime_context().get_node_id()
    stopping.on_sigterm()  # ray.init set Ray's handler, which exits at once


def _without_slow_operation_notices(record: logging.LogRecord) -> bool:
    """Drops Tune's "The `process_trial_result` operation took 1.149 s, which may be a performance bottleneck" (and
    "Processing trial results took ... Please consider reporting results less frequently"): advice to whoever calls
    tune.report, which is headsweep, once per pack and checkpoint. On a machine whose cores the trials fill, the
    driver's own bookkeeping passes Tune's 0.5 s now and then, and a notebook cell showed eight such lines."""
    return "may be a performance bottleneck" not in record.getMessage()


def own_node() -> str | None:
    """The id of the node of a local Ray this process started (None when it joined a cluster): the storage check
    need not ask it what this process already knows."""
    return _own_node


def leave() -> None:
    """Leave Ray now, stopping a local one and every trial it still runs (their worker processes are gone once this
    returns: measured). What a stopped grid or search does before it writes its tables: a trial that finished while
    Ray stopped beside the writing was on disk but missing from the table the driver printed."""
    global _kept, _own_node
    _kept, _own_node = False, None
    ray.shutdown()


def run_then_write(train: Callable[[], None], write: Callable[[], T], so_far: Callable[[T], str]) -> T:
    """A grid's or search's `train`, then `write` (its tables and report), whose result it returns; a crash or a stop
    by hand writes what finished all the same, a stop raising stopping.Stopped with `so_far(written)`."""
    try:
        train()
    except KeyboardInterrupt as stop:
        leave()  # first: no trial finishes while the results are read
        raise stopping.Stopped(so_far(write())) from stop
    except BaseException:
        disconnect_while(write)
        raise
    return finish(write)


def finish(work: Callable[[], T]) -> T:
    """After a run that ended normally (every trial done): `work` (its tables and report), leaving Ray beside it
    (disconnect_while), or with Ray left up where this process keeps its local Ray for the next run."""
    return work() if _kept else disconnect_while(work)


def disconnect_while(work: Callable[[], T]) -> T:
    """Leave Ray (stopping a local one: a second or two, mostly waiting for its processes to exit) while `work` runs
    in another thread; return what it returns. `work` must not touch Ray. Ray is left from this thread with the
    garbage collector paused until both are done, so that no Ray object is released from the other thread while the
    core worker shuts down: Ray ends the whole process when that happens (a driver joined to a cluster lost its
    report and exited 1 that way when Ray was left from a thread of its own)."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:  # raised again in this thread
            outcome["error"] = error

    collecting = gc.isenabled()
    gc.disable()
    worker = threading.Thread(target=run, name="results-and-report")
    worker.start()
    try:
        leave()
    finally:
        worker.join()
        if collecting:
            gc.enable()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _start_local() -> None:
    """Ray in this process, for this process alone: every server on 127.0.0.1, token authentication on."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None and mode.lower() != "token":
        raise ConfigError("RAY_AUTH_MODE", f"is {mode!r}, but a local Ray always runs with token authentication: "
                                           "unset it (or set it to token)")
    # Unset, Ray 2.60 turns token auth on for a new local Ray (creating ~/.ray/auth_token once) and tells this process;
    # setting it here would come too late: this process read the mode when it imported ray. Its notice of that ends
    # "set RAY_AUTH_MODE=disabled to opt out", which headsweep refuses: not shown.
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    with _loopback_only():
        # Ray prestarts a worker per CPU for a node's first driver; none of them would ever run anything here: a Tune
        # trial's actor runs in a worker of its own runtime environment (Tune always sets PL_DISABLE_FORK), and the
        # storage check asks nothing of a local Ray. So N idle processes on an N-core machine, ~0.6 s of CPU each.
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False,
                 _system_config={"prestart_worker_first_driver": False})


@contextmanager
def _loopback_only():
    """While a local Ray starts, make its node IP 127.0.0.1: Ray binds its servers to loopback for that IP and to every
    interface for any other. Each process Ray starts reads LOOPBACK_VAR; this one read it on import, so its copy is
    set too. Both are put back after: a later join of another cluster from this process needs the machine's IP."""
    saved_var, saved_flag = os.environ.get(LOOPBACK_VAR), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[LOOPBACK_VAR], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        if saved_var is None:
            os.environ.pop(LOOPBACK_VAR, None)
        else:
            os.environ[LOOPBACK_VAR] = saved_var


def refuse_gpus_a_local_ray_lacks(resources, address: str | None, section: str = "sweep") -> None:
    """Before a local Ray starts (seconds): a trial that asks for GPUs on a machine where torch sees none would only
    be refused once Ray is up. A cluster (an address, or RAY_ADDRESS) is asked by check_resources instead."""
    if resources.gpu <= 0 or address or os.environ.get("RAY_ADDRESS"):
        return
    import torch

    if not torch.cuda.is_available():
        raise ConfigError(f"{section}.resources.gpu", f"asks for {resources.gpu:g} GPU per trial, but this machine "
                                                      "has none that torch can use; set it to 0, or give --address of "
                                                      "a cluster with GPUs")


def check_resources(resources, section: str = "sweep") -> None:
    """Fail before any trial starts if no node could ever run one (they would stay PENDING forever)."""
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    fits = [n for n in nodes if n.get("CPU", 0) >= resources.cpu and n.get("GPU", 0) >= resources.gpu]
    if fits:
        return
    gpus, cpus = max(n.get("GPU", 0) for n in nodes), max(n.get("CPU", 0) for n in nodes)
    key = f"{section}.resources.gpu" if resources.gpu > gpus else f"{section}.resources.cpu"
    raise ConfigError(key, f"a trial asks for {resources.cpu:g} CPU and {resources.gpu:g} GPU, but the largest "
                           f"node of this cluster has {cpus:g} CPU and {gpus:g} GPU")


def slots(resources, max_concurrent: int = 0) -> int:
    """How many trials asking for `resources` the cluster runs at once (at most max_concurrent, if set)."""
    total = ray.cluster_resources()
    fit = min(total.get("CPU", 1) // max(resources.cpu, 1e-9),
              total.get("GPU", 0) // resources.gpu if resources.gpu else float("inf"))
    return max(1, int(min(fit, max_concurrent or fit)))


def largest_memory() -> int:
    """Bytes Ray gives tasks on the cluster's largest live node."""
    return max(n["Resources"].get("memory", 0) for n in ray.nodes() if n.get("Alive"))
