"""Before the first trial: can every node of the cluster read and write the output directory the driver sees, or
reach the bucket it names?

Since Ray 2.7 Tune copies no trial files between nodes: each trial writes its results, checkpoints and W&B offline
runs straight into --out, and the driver reads them back (results.csv, the search's tells, resuming). On storage
that a node does not share, its trials "succeed" and their results are nowhere the driver looks. So the driver writes
a file with a random token into --out, one task pinned to each alive node (but that of a local Ray the driver started
itself) reads it back and writes its own, and the driver reads those: any mismatch is one line and exit 2, before
anything has started. For a bucket (storage/out_dir.py), each node checks it with its own credentials and writes a
probe object there, which the driver reads and deletes.
"""
from __future__ import annotations

import secrets
import shutil
from contextlib import suppress
from pathlib import Path, PurePosixPath

import pyarrow.fs as pafs
import ray
from ray.exceptions import RayError, TaskUnschedulableError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from sweep import cluster
from sweep.storage import buckets
from sweep.storage import probes as on_node
from sweep.storage.out_dir import OutDir
from trainables.errors import ConfigError

PROBE_PREFIX = ".preflight-"  # the probe directory inside --out: PROBE_PREFIX + token, gone when the check ends
ANSWER_S = 120  # a node whose probe has not answered by then counts as failed (a fresh worker starts in seconds)


def check_storage(out: OutDir) -> None:
    if out.mirror:
        check_bucket(out.mirror.bucket)
    else:
        check_shared_storage(out.local)


def check_bucket(bucket: buckets.Bucket) -> None:
    """Raise ConfigError("--out", ...) naming the first node that cannot reach the bucket (credentials, endpoint,
    network) or write to it. Every probe object is deleted again, whatever happened."""
    token = secrets.token_hex(16)
    probes, fs = bucket.child(f"{PROBE_PREFIX}{token}"), bucket.filesystem
    # The prefix and its parents that hold nothing yet: S3 has no directories, but pyarrow leaves an empty marker
    # object for each one that a deletion empties, and a check that fails must leave nothing behind.
    parts = PurePosixPath(bucket.prefix).parts
    missing = [p for p in (str(PurePosixPath(bucket.name, *parts[:n])) for n in range(len(parts), 0, -1))
               if fs.get_file_info(p).type == pafs.FileType.NotFound]
    try:
        for node, problem in _ask_every_node(on_node.bucket_probe, probes, token):
            if problem is not None:
                raise ConfigError("--out", f"node {_where(node)} cannot use {bucket} ({problem}): every node needs the "
                                           "bucket's endpoint and credentials (docs/CLUSTER.md)")
    finally:
        with suppress(FileNotFoundError):
            fs.delete_dir(probes.path())
        for path in missing:  # deepest first, each only while still empty (another driver may have started)
            if not fs.get_file_info(pafs.FileSelector(path, allow_not_found=True)):
                with suppress(FileNotFoundError):
                    fs.delete_dir(path)


def check_shared_storage(out: Path) -> None:
    """Raise ConfigError("--out", ...) naming the first node that cannot read or write `out` as the driver sees it.
    Creates `out` for the probe and leaves it only if the check passes: a failed check has written nothing."""
    out = out.resolve()
    created = _missing_ancestors(out)
    token = secrets.token_hex(16)
    probes = out / f"{PROBE_PREFIX}{token}"
    passed = False
    try:
        try:
            probes.mkdir(parents=True)
            (probes / on_node.DRIVER_FILE).write_text(token)
        except OSError as e:
            raise ConfigError("--out", f"the driver cannot write {out} ({e.strerror or e})") from None
        for node, problem in _ask_every_node(on_node.directory_probe, str(probes), token):
            if problem is not None:
                raise _cannot(node, "read", probes, problem)
            if (problem := on_node.read_token(probes / _node_file(node), token)) is not None:
                raise _cannot(node, "write", probes, f"the driver reads {_node_file(node)}: {problem}")
        passed = True
    finally:
        shutil.rmtree(probes, ignore_errors=True)
        if not passed:
            for directory in created:  # deepest first; rmdir never removes what someone else put there
                with suppress(OSError):
                    directory.rmdir()


def _ask_every_node(probe, *args) -> list[tuple[dict, str | None]]:
    """Run probe(*args, the node's file name) pinned to each alive node: (node, its answer: None, or what is wrong),
    a probe that did not answer within ANSWER_S first. A node that left since ray.nodes() listed it (Ray takes seconds
    to notice) is skipped: no trial goes there."""
    nodes = [n for n in ray.nodes() if n.get("Alive") and n["NodeID"] != cluster.own_node()]
    if not nodes:
        return []  # a local Ray this process started, alone
    pending = {probe.options(num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
               .remote(*args, _node_file(n)): n for n in nodes}
    ready, late = ray.wait(list(pending), num_returns=len(pending), timeout=ANSWER_S)
    for ref in late:
        ray.cancel(ref, force=True)
    answers = [(pending[ref], f"its probe did not answer within {ANSWER_S} s") for ref in late]
    for ref in ready:
        try:
            answers.append((pending[ref], ray.get(ref)))
        except TaskUnschedulableError:
            continue
        except RayError as e:  # e.g. it died during the probe, or cannot import this code
            answers.append((pending[ref], "its probe failed: "
                            + (str(e).strip().splitlines() or [type(e).__name__])[-1][:300]))
    return answers


def _cannot(node: dict, verb: str, probes: Path, why: str) -> ConfigError:
    return ConfigError("--out", f"node {_where(node)} cannot {verb} {probes.parent} ({why}): trial outputs must be on "
                                "storage every node and the driver share (docs/CLUSTER.md)")


def _where(node: dict) -> str:
    return f"{node.get('NodeManagerAddress', '?')}/{node['NodeID'][:8]}"


def _node_file(node: dict) -> str:
    return f"node-{node['NodeID']}"


def _missing_ancestors(path: Path) -> list[Path]:
    """`path` and those of its parents that do not exist yet, deepest first."""
    missing = []
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing
