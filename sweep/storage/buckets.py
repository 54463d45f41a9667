"""Sweep outputs in an S3-compatible bucket, for clusters whose nodes share no file system (docs/CLUSTER.md).

`--out s3://bucket/prefix` (with `?endpoint_override=http://host:port` for a server other than AWS, or
AWS_ENDPOINT_URL) makes the bucket the sweep's home. Nobody writes into it in place: every process works in a local
directory and a Mirror copies between the two. A trial pulls its members' earlier files before it trains (a retry
on another node continues their metrics.jsonl and W&B run) and pushes them after every checkpoint and as each member
finishes, result.json last (copies.py, where each member's checkpoint is its own state.pt); the driver
pulls the trials' files to tell, tabulate and report, and pushes what it writes. Tune keeps its experiment state in
the bucket itself (storage_filesystem).

Credentials are the AWS SDK's own on each node (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, an instance
role), never part of the URI: the URI travels in member dicts, Tune's state and logs.
"""
from __future__ import annotations

import os
from contextlib import suppress
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Callable
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import pyarrow.fs as pafs

from trainables.errors import ConfigError

SCHEME = "s3"
# Query keys a URI may carry; credentials are refused there (they would be printed and stored with the URI).
SETTINGS = ("endpoint_override", "region")
SECRETS = ("access_key", "secret_key", "session_token")
CHECK_TIMEOUT_S = 5  # the driver's first look at the bucket: an endpoint that does not answer is bad input


def is_remote(location: str | os.PathLike) -> bool:
    return str(location).startswith(f"{SCHEME}://")


@dataclass(frozen=True)
class Bucket:
    """A place in a bucket: s3://<name>/<prefix>, on the server at `endpoint` (None: AWS) in `region`."""
    name: str
    prefix: str
    endpoint: str | None = None
    region: str | None = None

    @classmethod
    def parse(cls, uri: str, key: str = "--out") -> "Bucket":
        """The bucket of an s3:// URI; ConfigError(key) for anything else, a credential in it above all."""
        parts = urlsplit(uri)
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        if secrets := [k for k in query if k in SECRETS]:
            raise ConfigError(key, f"{SCHEME}:// URIs carry no credentials ({', '.join(secrets)}): set "
                                   "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) on every node instead")
        if unknown := [k for k in query if k not in SETTINGS]:
            raise ConfigError(key, f"unknown setting {unknown[0]!r} in the URI (known: {', '.join(SETTINGS)})")
        if parts.scheme != SCHEME or not parts.netloc:
            raise ConfigError(key, f"{uri.split('?')[0]!r} is not an {SCHEME}://bucket/prefix URI")
        prefix = unquote(parts.path).strip("/")
        if not prefix or ".." in prefix.split("/"):
            raise ConfigError(key, f"give a prefix inside the bucket ({SCHEME}://{parts.netloc}/my-sweep), not the "
                                   "bucket's root: the sweep's files go under it")
        endpoint = query.get("endpoint_override") or os.environ.get("AWS_ENDPOINT_URL_S3") \
            or os.environ.get("AWS_ENDPOINT_URL")
        return cls(parts.netloc, prefix, endpoint or None, query.get("region") or None)

    @property
    def uri(self) -> str:
        """The canonical URI, with the endpoint written in: a node needs nothing but credentials to use it."""
        settings = {k: v for k, v in (("endpoint_override", self.endpoint), ("region", self.region)) if v}
        return f"{SCHEME}://{self.name}/{quote(self.prefix)}" + (f"?{urlencode(settings)}" if settings else "")

    def path(self, *parts: str) -> str:
        """The filesystem path of a place under the prefix (what `filesystem` takes)."""
        return str(PurePosixPath(self.name, self.prefix, *parts))

    def child(self, *parts: str) -> "Bucket":
        return Bucket(self.name, str(PurePosixPath(self.prefix, *parts)), self.endpoint, self.region)

    @cached_property
    def filesystem(self) -> pafs.S3FileSystem:
        return self.connect()

    def connect(self, timeout_s: float | None = None) -> pafs.S3FileSystem:
        """pyarrow's S3 filesystem for this bucket (what Ray Tune also takes); with `timeout_s`, one that gives up
        on a silent endpoint after about that long instead of retrying for minutes."""
        options = {"endpoint_override": self.endpoint, "region": self.region or "us-east-1"}
        if self.endpoint and "://" in self.endpoint:
            scheme, options["endpoint_override"] = self.endpoint.split("://", 1)
            options["scheme"] = scheme
        if timeout_s is not None:
            options |= {"connect_timeout": timeout_s, "request_timeout": timeout_s,
                        "retry_strategy": pafs.AwsStandardS3RetryStrategy(max_attempts=1)}
        return pafs.S3FileSystem(**options)

    def __str__(self) -> str:
        return f"{SCHEME}://{self.name}/{self.prefix}" + (f" at {self.endpoint}" if self.endpoint else "")


def check(bucket: Bucket, key: str = "--out") -> None:
    """ConfigError(key) unless the bucket exists and these credentials may list it (read), at an endpoint that
    answers; writes nothing. The reason names the place and what to check, and never a secret."""
    if (found := problem(bucket)) is not None:
        raise ConfigError(key, f"cannot use {bucket}: {found}")


def problem(bucket: Bucket) -> str | None:
    """Why these credentials cannot read the bucket here (None: they can)."""
    fs = bucket.connect(timeout_s=CHECK_TIMEOUT_S)
    try:
        if fs.get_file_info(bucket.name).type == pafs.FileType.NotFound:
            return "no such bucket (create it first)"
        fs.get_file_info(pafs.FileSelector(bucket.path(), allow_not_found=True, recursive=False))
    except OSError as error:
        return why(str(error))
    return None


def why(message: str) -> str:
    """The reason in one of pyarrow's S3 errors, in words that say what to check."""
    upper = message.upper()
    if "ACCESS_DENIED" in upper or "FORBIDDEN" in upper or "SIGNATURE" in upper or "INVALIDACCESSKEY" in upper:
        return "access denied (check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"
    if "NETWORK_CONNECTION" in upper or "CURL" in upper or "TIMEOUT" in upper or "COULDN'T CONNECT" in upper:
        return f"the endpoint does not answer within {CHECK_TIMEOUT_S} s"
    return message.strip().splitlines()[-1].split(" (Request ID")[0][:300]


class Mirror:
    """A local directory kept in step with a place in a bucket. pull() fetches what is missing or older here;
    push() sends what changed here since this Mirror last pulled or pushed it."""

    def __init__(self, bucket: Bucket, local: Path):
        self.bucket, self.local = bucket, Path(local)
        self.known: dict[str, tuple[int, int]] = {}  # relative path -> (size, mtime_ns) as last pulled or pushed

    def pull(self, under: str = "", skip: Callable[[PurePosixPath], bool] = lambda path: False,
             prune: bool = False) -> int:
        """Download the files under `under` (relative) that are missing here or older here; with `prune`, delete
        files here that the bucket does not have (the bucket is the truth). Returns how many were downloaded."""
        fs, root = self.bucket.filesystem, self.bucket.path()
        selector = pafs.FileSelector(self.bucket.path(under) if under else root, allow_not_found=True, recursive=True)
        remote = {PurePosixPath(info.path).relative_to(root): info for info in fs.get_file_info(selector)
                  if info.type == pafs.FileType.File}
        fetched = 0
        for relative, info in remote.items():
            if skip(relative):
                continue
            target = self.local / relative
            mtime_ns = int(info.mtime.timestamp() * 1e9) if info.mtime else 0
            if not (target.exists() and target.stat().st_size == info.size and target.stat().st_mtime_ns >= mtime_ns):
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = target.with_name(f"{target.name}.{os.getpid()}.pulling")
                with fs.open_input_stream(info.path) as source, open(partial, "wb") as sink:
                    sink.write(source.readall())
                os.utime(partial, ns=(mtime_ns, mtime_ns))
                os.replace(partial, target)
                fetched += 1
            self.known[str(relative)] = _stamp(target)
        if prune:
            for path in self._files(under):
                if PurePosixPath(path) not in remote and not skip(PurePosixPath(path)):
                    (self.local / path).unlink()
        return fetched

    def push(self, under: str = "", skip: Callable[[PurePosixPath], bool] = lambda path: False,
             order: Callable[[str], int] = lambda path: 0) -> int:
        """Upload the files under `under` that changed here since they were last pulled or pushed, by `order` (a
        reader that finds a file must find what it depends on), and delete from the bucket those pulled or pushed
        before and deleted here since (an earlier attempt's error.txt). Returns how many were uploaded or deleted."""
        fs, files, sent = self.bucket.filesystem, self._files(under), 0
        for relative in sorted(files, key=lambda path: (order(path), path)):
            if skip(PurePosixPath(relative)) or self.known.get(relative) == (stamp := _stamp(self.local / relative)):
                continue
            with open(self.local / relative, "rb") as source, fs.open_output_stream(self.bucket.path(relative)) as sink:
                sink.write(source.read())
            self.known[relative] = stamp
            sent += 1
        inside = lambda path: not under or PurePosixPath(path).is_relative_to(under)
        gone = set(self.known) - set(files)
        for relative in [p for p in gone if inside(p) and not skip(PurePosixPath(p))]:
            with suppress(FileNotFoundError):
                fs.delete_file(self.bucket.path(relative))
            del self.known[relative]
            sent += 1
        return sent

    def _files(self, under: str) -> list[str]:
        """The files under `under` here, relative to the mirror's root; partial writes (io.atomic_write) excluded."""
        start = self.local / under
        if not start.is_dir():
            return []
        return [str(path.relative_to(self.local)) for path in start.rglob("*")
                if path.is_file() and not path.name.endswith((".partial", ".pulling"))]


def _stamp(path: Path) -> tuple[int, int]:
    stat = path.stat()
    return stat.st_size, stat.st_mtime_ns
