"""A real PostgreSQL server (Debian's 15) on 127.0.0.1 for the tests that keep Optuna studies in it: one per test run
(per xdist worker), whichever tier asks first, stopped by its own process group. tests/conftest.py makes `postgres` a
session fixture of every tier."""
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def as_postgres(command: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run it as the postgres user when we are root."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@dataclass
class Postgres:
    port: int
    password: str  # the superuser's; TCP connections must give it (scram-sha-256)

    def url(self, database: str = "headsweep", scheme: str = "postgresql") -> str:
        """The URL as the README writes it: the bare scheme, user and password."""
        return f"{scheme}://postgres:{self.password}@127.0.0.1:{self.port}/{database}"

    def createdb(self, name: str) -> str:
        subprocess.run([str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", name],
                       check=True, env=os.environ | {"PGPASSWORD": self.password})
        return self.url(name)


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server with a password-protected superuser, listening on 127.0.0.1 only."""
    if not (PG_BIN / "postgres").exists():
        pytest.fail("PostgreSQL 15 server binaries are missing: apt-get install postgresql")
    data = Path(tempfile.mkdtemp(prefix="hs-pg-"))
    password = "hs-" + secrets.token_hex(8)
    (data / "pwfile").write_text(password + "\n")
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
        shutil.chown(data / "pwfile", "postgres", "postgres")
    subprocess.run(as_postgres([str(PG_BIN / "initdb"), "-D", str(data / "db"), "-U", "postgres",
                                "--auth-local=trust", "--auth-host=scram-sha-256", f"--pwfile={data / 'pwfile'}"]),
                   check=True, capture_output=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(as_postgres([str(PG_BIN / "postgres"), "-D", str(data / "db"), "-p", str(port),
                                           "-k", str(data), "-c", "listen_addresses=127.0.0.1"]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 60
        while subprocess.run([str(PG_BIN / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)],
                             capture_output=True).returncode != 0:
            assert time.time() < deadline and server.poll() is None, "PostgreSQL did not start"
            time.sleep(0.3)
        yield Postgres(port, password)
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # only the server this fixture started (its own process group)
        server.wait(timeout=60)
        shutil.rmtree(data, ignore_errors=True)
