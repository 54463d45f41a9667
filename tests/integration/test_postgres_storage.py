"""A PostgreSQL storage that does not answer (tests/integration/conftest.py's real server), with the URL written as
the README writes it: postgresql://user:password@host/db. Searches keeping their studies there, two drivers at once:
tests/integration/test_concurrent_search.py."""
import subprocess
import sys

from tests.conftest import CONFIGS
from tests.integration.conftest import headsweep

ONE_SLICE = "search.slices=[{key: task.lengths.low, values: [4]}]"


def test_a_storage_that_does_not_answer_is_one_line_exit_2_without_its_password(postgres, tmp_path):
    """An unknown database on a live server, a wrong password, a closed port: each named, at once, with the password
    redacted, and nothing written in --out."""
    wrong_password = postgres.url("headsweep").replace(postgres.password, "not-" + postgres.password)
    closed = postgres.url("headsweep").replace(f":{postgres.port}/", ":9/")
    for url, reason in ((postgres.url("no_such_db"), "no_such_db"), (wrong_password, "password authentication"),
                        (closed, "127.0.0.1")):
        proc = headsweep("search", CONFIGS / "debug_search.yaml", ONE_SLICE, "--storage", url, "--out", tmp_path / "o",
                         timeout=60)
        assert proc.returncode == 2 and proc.stderr.startswith("headsweep: error: --storage: "), proc.stderr
        assert proc.stderr.count("\n") == 1 and reason in proc.stderr and "postgres:***@" in proc.stderr
        assert postgres.password not in proc.stdout + proc.stderr
        assert not (tmp_path / "o").exists()


# Imports first, then waits until every opener is ready, so that they open the database together.
OPENER = """
import sys, time
from pathlib import Path
from sweep.search import studies
url, barrier, me, n = sys.argv[1], Path(sys.argv[2]), sys.argv[3], int(sys.argv[4])
(barrier / me).touch()
while len(list(barrier.iterdir())) < n:
    time.sleep(0.01)
studies.storage_for(url, Path("."))
"""


def test_drivers_opening_a_new_database_at_once_all_open_it(postgres, tmp_path):
    """Each creates Optuna's tables; the slower ones' CREATE collides (a unique violation), and they open it again.
    Without the retry (SCHEMA_TRIES = 1), some of them fail here every time."""
    url, n = postgres.createdb("opened_at_once"), 6
    drivers = [subprocess.Popen([sys.executable, "-c", OPENER, url, str(tmp_path), str(i), str(n)],
                                stderr=subprocess.PIPE, text=True) for i in range(n)]
    errors = [d.communicate(timeout=300)[1] for d in drivers]
    assert all(d.returncode == 0 for d in drivers), errors
