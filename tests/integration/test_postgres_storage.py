"""Optuna studies in a real PostgreSQL server (Debian's, started by this test on 127.0.0.1 and stopped by its pid)."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import pytest

from tests.conftest import CONFIGS

HEADSWEEP = str(Path(sys.executable).parent / "headsweep")
PG_BIN = Path("/usr/lib/postgresql/15/bin")


def as_postgres(command: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run it as the postgres user when we are root."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


@pytest.fixture(scope="module")
def postgres_url():
    if not (PG_BIN / "postgres").exists():
        pytest.fail("PostgreSQL 15 server binaries are missing: apt-get install postgresql")
    data = Path(tempfile.mkdtemp(prefix="hs-pg-"))
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
    subprocess.run(as_postgres([str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]),
                   check=True, capture_output=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(as_postgres([str(PG_BIN / "postgres"), "-D", str(data), "-p", str(port), "-k", str(data),
                                           "-c", "listen_addresses=127.0.0.1"]),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 60
        while subprocess.run([str(PG_BIN / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)],
                             capture_output=True).returncode != 0:
            assert time.time() < deadline and server.poll() is None, "PostgreSQL did not start"
            time.sleep(0.3)
        subprocess.run([str(PG_BIN / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "headsweep"],
                       check=True)
        yield f"postgresql+psycopg2://postgres@127.0.0.1:{port}/headsweep"
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # only the server this test started (its own process group)
        server.wait(timeout=60)
        shutil.rmtree(data, ignore_errors=True)


def test_a_search_keeps_its_studies_in_postgresql_and_resumes_from_them(postgres_url, tmp_path):
    args = ["search", CONFIGS / "debug_search.yaml", "search.slices=[{key: task.lengths.low, values: [4]}]",
            "--storage", postgres_url, "--out", tmp_path / "out"]
    first = subprocess.run([HEADSWEEP, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr[-3000:]
    assert not (tmp_path / "out" / "study.journal").exists()

    storage = optuna.storages.RDBStorage(postgres_url)
    study = optuna.load_study(study_name="debug_search.low=4", storage=storage)
    completed = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(completed) >= 3 and all("successes" in t.user_attrs for t in completed)

    again = subprocess.run([HEADSWEEP, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(optuna.load_study(study_name="debug_search.low=4", storage=storage).trials) == len(study.trials)
    assert first.stdout.splitlines()[-3:] == again.stdout.splitlines()[-3:]  # the same min-diversity table
