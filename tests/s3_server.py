"""A real S3-compatible server for the tests: moto's server mode (`moto_server`, from PyPI's moto[server]) on
127.0.0.1, in its own session, stopped by its process group.

MinIO is not packaged by Debian or PyPI; moto's server speaks the S3 REST API over HTTP, which pyarrow's S3
filesystem (what headsweep and Ray Tune use) talks to like any other endpoint. It checks credentials once
INITIAL_NO_AUTH_ACTION_COUNT requests have been served: the first few create an IAM user with an s3:* policy, its
access key and the bucket, and from then on a wrong key or secret is refused as on a real server.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tests.e2e.conftest import free_ports

MOTO_SERVER = str(Path(sys.executable).parent / "moto_server")
SETUP_REQUESTS = 4  # create user, put its policy, create its key, create the bucket: then every request is checked
BUCKET = "headsweep-tests"
START_TIMEOUT_S = 60


@dataclass
class S3Server:
    endpoint: str  # http://127.0.0.1:PORT
    access_key: str
    secret_key: str
    bucket: str = BUCKET

    def uri(self, prefix: str, bucket: str | None = None) -> str:
        return f"s3://{bucket or self.bucket}/{prefix}?endpoint_override={self.endpoint}"

    @property
    def credentials(self) -> dict[str, str]:
        """What a node's or driver's environment needs to use the bucket."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_DEFAULT_REGION": "us-east-1"}

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key, region_name="us-east-1")

    def keys(self, prefix: str, markers: bool = False) -> list[str]:
        """The key of every file under `prefix` (relative to it); with `markers`, also the empty objects ending in /
        that pyarrow leaves for directories."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix + "/")
        keys = (o["Key"][len(prefix) + 1:] for page in pages for o in page.get("Contents", []))
        return sorted(k for k in keys if markers or not k.endswith("/"))


@contextmanager
def s3_server(log: Path) -> Iterator[S3Server]:
    """Start the server, make the user, key and bucket, yield; stop the server's process group at the end."""
    import boto3

    [port] = free_ports(1)
    env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": str(SETUP_REQUESTS)}
    with open(log, "wb") as sink:
        server = subprocess.Popen([MOTO_SERVER, "-H", "127.0.0.1", "-p", str(port)], env=env, stdout=sink,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        endpoint = f"http://127.0.0.1:{port}"
        _wait_until_up(endpoint, server)
        setup = dict(endpoint_url=endpoint, aws_access_key_id="setup", aws_secret_access_key="setup",
                     region_name="us-east-1")
        iam = boto3.client("iam", **setup)
        iam.create_user(UserName="headsweep")
        iam.put_user_policy(UserName="headsweep", PolicyName="s3", PolicyDocument=json.dumps(
            {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}))
        key = iam.create_access_key(UserName="headsweep")["AccessKey"]
        s3 = S3Server(endpoint, key["AccessKeyId"], key["SecretAccessKey"])
        s3.client().create_bucket(Bucket=BUCKET)
        yield s3
    finally:
        # The server this function started, and nothing else; SIGKILL: it keeps nothing worth a clean stop, and on
        # SIGTERM it waits for its clients' idle keep-alive connections (30 s seen).
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)


def _wait_until_up(endpoint: str, server: subprocess.Popen) -> None:
    """Until the server answers HTTP (moto's own health page does not count as an S3 request)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            with urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2):
                return
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"moto_server did not start (exit {server.poll()})") from None
            time.sleep(0.2)
