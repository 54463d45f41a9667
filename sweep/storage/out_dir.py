"""Where a sweep keeps its outputs: a directory every node and the driver mount (`--out DIR`), or a place in an
S3-compatible bucket (`--out s3://bucket/prefix`, for clusters that share no file system; docs/CLUSTER.md).

One flag for both, because `--out` already names the one place a sweep lives and resumes from: re-running the
command with the same `--out` resumes it, from any machine that can reach that place. For a bucket the driver works
in a local mirror of its own (a private directory, scratch.py, under HEADSWEEP_CACHE, default ~/.cache/headsweep,
then bucket/prefix): it pulls the bucket into it when it starts, so a driver in another working directory or on
another machine resumes from the bucket alone; pulls the trials' files before it tells or tabulates; and pushes what
it writes itself (config.yaml, the plan, the tables, report.html). The trials, on whichever node, push their own
files and checkpoints (copies.py), and Tune keeps its experiment state in the bucket.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import pyarrow.fs as pafs

from sweep.space import point_id, member_dir
from sweep.storage import buckets, scratch
from sweep.storage.copies import STATE_FILE

CACHE_VAR = "HEADSWEEP_CACHE"
TRIALS = "trials"
PULL_EVERY_S = 30.0  # while a grid runs, how often its progress line looks in the bucket for finished members


def _not_mirrored(path: PurePosixPath) -> bool:
    """What the driver never needs locally: Tune's experiments (state, checkpoints; Tune reads them from the bucket),
    the members' checkpoints (their trials' business) and the trials' W&B runs (for `wandb sync`, fetched when
    wanted)."""
    return (path.parts[0] == "ray" and len(path.parts) > 2) or "wandb" in path.parts or path.name == STATE_FILE


def _local_copy(bucket: buckets.Bucket) -> Path:
    """This driver's own copy of the bucket's place: the one a driver that is gone left here (what is still current
    in it is not pulled again), else a new one. Never shared: two drivers of one place on one machine (a search's)
    would each drop from it, at start-up, what the other had written and not pushed yet."""
    cache = Path(os.environ.get(CACHE_VAR) or Path.home() / ".cache" / "headsweep").expanduser().resolve()
    copies = cache / bucket.name / bucket.prefix
    copies.mkdir(parents=True, exist_ok=True)
    local = scratch.take_over(copies) or scratch.new_dir(copies)
    scratch.remove_leftovers(copies)  # more than one was left when drivers ran side by side
    return local


@dataclass
class OutDir:
    """local: the directory the driver reads and writes; mirror: its bucket, or None when `local` is the out itself."""
    local: Path
    mirror: buckets.Mirror | None = None
    pulled_at: float = 0.0

    @classmethod
    def open(cls, out: str | os.PathLike) -> "OutDir":
        """--out as given; for a bucket, checked (ConfigError("--out"): missing bucket, wrong credentials, silent
        endpoint; nothing written anywhere) and pulled into its mirror."""
        if not buckets.is_remote(out):
            return cls(Path(out))
        bucket = buckets.Bucket.parse(str(out))
        buckets.check(bucket)
        local = _local_copy(bucket)
        opened = cls(local, buckets.Mirror(bucket, local))
        opened.mirror.pull(skip=_not_mirrored, prune=True)  # this driver's copy only: the bucket is the truth
        return opened

    def __str__(self) -> str:
        """--out as people read it: the directory, or s3://bucket/prefix (without the endpoint)."""
        if self.mirror:
            return f"{buckets.SCHEME}://{self.mirror.bucket.name}/{self.mirror.bucket.prefix}"
        return str(self.local)

    def member_dir(self, point: dict) -> str:
        """Where the trial of `point` keeps its files, as a node reaches it: an absolute path or an s3:// URI."""
        if self.mirror:
            return self.mirror.bucket.child(TRIALS, point_id(point)).uri
        return str(member_dir(self.local, point))

    @property
    def filesystem(self) -> pafs.FileSystem | None:
        """Tune's storage_filesystem: the bucket's, or None for a path."""
        return self.mirror.bucket.filesystem if self.mirror else None

    def experiments(self) -> str:
        """Tune's storage path, where each experiment is a directory: out/ray, in the bucket for a bucket."""
        return self.mirror.bucket.path("ray") if self.mirror else str((self.local / "ray").resolve())

    def sync(self) -> None:
        """Push what the driver wrote, then pull the trials' files (a no-op for a directory)."""
        if self.mirror:
            self.mirror.push(skip=lambda path: path.parts[0] == TRIALS)  # the trials push their own
            self.pull_members()

    def pull_members(self, every_s: float = 0.0) -> None:
        """Pull the trials' files, unless the last pull was less than `every_s` ago."""
        if self.mirror and time.monotonic() - self.pulled_at >= every_s:
            self.mirror.pull(TRIALS, skip=_not_mirrored)
            self.pulled_at = time.monotonic()
