"""A PostgreSQL storage that does not answer (tests/integration/conftest.py's real server), with the URL written as
the README writes it: postgresql://user:password@host/db. Searches keeping their studies there, two drivers at once:
tests/integration/test_concurrent_search.py."""
import time
import traceback
from pathlib import Path

from tests import warm_cli
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


def open_with_the_others(url: str, barrier: str, me: int, n: int) -> None:
    """One driver's open of the study storage, in a process of its own: imports first, then waits until every opener
    is ready, so that they open the database together. What went wrong is left in barrier/me.error."""
    try:
        from sweep.search import studies
        (Path(barrier) / str(me)).touch()
        while len([p for p in Path(barrier).iterdir() if p.suffix != ".error"]) < n:
            time.sleep(0.01)
        studies.storage_for(url, Path("."))
    except BaseException:
        (Path(barrier) / f"{me}.error").write_text(traceback.format_exc())
        raise


def test_drivers_opening_a_new_database_at_once_all_open_it(postgres, tmp_path):
    """Each creates Optuna's tables; the slower ones' CREATE collides (a unique violation), and they open it again.
    Without the retry (SCHEMA_TRIES = 1), some of them fail here every time. The openers are separate processes,
    each with its own connections, forked from the warm CLI's server (tests/warm_cli.py: torch, pandas and Optuna
    imported once, not six times)."""
    url, n = postgres.createdb("opened_at_once"), 6
    server = warm_cli.server()
    drivers = [server.Process(target=open_with_the_others, args=(url, str(tmp_path), i, n)) for i in range(n)]
    for driver in drivers:
        driver.start()
    for driver in drivers:
        driver.join(300)
    errors = [p.read_text() for p in tmp_path.glob("*.error")]
    assert [d.exitcode for d in drivers] == [0] * n and not errors, errors
