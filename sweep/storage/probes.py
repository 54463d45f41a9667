"""What runs on each node for sweep/preflight.py's check: reading the driver's token and writing the node's own, in a
directory or a bucket. A module of its own, importing nothing heavy: a node's worker imports the module a task's
function is defined in, and sweep.preflight's imports (Tune, torch, pandas through the output directory's code) made
the probe's worker, which no trial reuses, spend seconds of CPU on every grid and search (issue [lean] item 6).
"""
from __future__ import annotations

import time
from pathlib import Path

import ray

from sweep.storage import buckets

DRIVER_FILE = "driver"
# NFS clients cache lookups and attributes for a few seconds: a file another machine just wrote may show up late.
VISIBLE_WITHIN_S = 10


@ray.remote(max_retries=0)
def bucket_probe(probes: buckets.Bucket, token: str, name: str) -> str | None:
    """On one node: None if it could check the bucket and write `name` into `probes` and read it back, else why not."""
    if (problem := buckets.problem(probes)) is not None:
        return problem
    try:
        with probes.filesystem.open_output_stream(probes.path(name)) as sink:
            sink.write(token.encode())
        with probes.filesystem.open_input_stream(probes.path(name)) as source:
            return None if source.readall().decode() == token else "it reads back another token"
    except OSError as e:
        return f"it cannot write there: {buckets.why(str(e))}"


@ray.remote(max_retries=0)
def directory_probe(directory: str, token: str, name: str) -> str | None:
    """On one node: None if it read the driver's token from `directory` and wrote its own file there, else why not.
    It writes only after reading: a node that does not share the directory leaves nothing on its own disk."""
    directory = Path(directory)
    if (problem := read_token(directory / DRIVER_FILE, token)) is not None:
        return f"it reads {DRIVER_FILE}: {problem}"
    try:
        (directory / name).write_text(token)
    except OSError as e:
        return f"it writes {name}: {e.strerror or e}"
    return None


def read_token(path: Path, token: str) -> str | None:
    """None once `path` holds `token` (waiting up to VISIBLE_WITHIN_S for it to show), else what was wrong."""
    deadline = time.monotonic() + VISIBLE_WITHIN_S
    while True:
        try:
            problem = None if path.read_text() == token else "it holds another token"
        except OSError as e:
            problem = e.strerror or str(e)
        if problem is None or time.monotonic() > deadline:
            return problem
        time.sleep(0.2)
