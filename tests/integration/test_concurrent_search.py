"""Two `headsweep search` processes at once on the same studies (same config, same --out; a journal, then
PostgreSQL): both end with the single run's answer, nothing is trained twice, and (PostgreSQL) the storage password
shows nowhere. A corrupt or foreign journal is refused, unchanged. The rules themselves: tests/unit/test_owners.py."""
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import optuna
import pandas as pd
import pytest

from sweep.search import owners, studies
from sweep.search.config import load_search
from tests.conftest import CONFIGS
from tests.integration.conftest import HEADSWEEP, UNGUIDED_SEARCH, headsweep

ARGS = UNGUIDED_SEARCH
ONE_SLICE = "search.slices=[{key: task.lengths.low, values: [4]}]"
KNOB = "task.lengths.width"
DRIVERS_TIMEOUT_S = 420  # alone, both finish within a minute; under pytest-timeout's 600 s


def run_two(out: Path, *extra, env=None) -> list[subprocess.CompletedProcess]:
    """Start two drivers at the same moment and wait for both."""
    command = [HEADSWEEP, "search", *map(str, ARGS), "--out", str(out), *map(str, extra)]
    drivers = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True) for _ in range(2)]
    try:
        outputs = [d.communicate(timeout=DRIVERS_TIMEOUT_S) for d in drivers]
    except subprocess.TimeoutExpired:  # say what each driver was doing, in the test's own time
        for d in drivers:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(d.pid, signal.SIGKILL)
        tails = [f"driver {i} (exit {d.returncode}):\n{o[-2500:]}\n{e[-2500:]}"
                 for i, (d, (o, e)) in enumerate(zip(drivers, [d.communicate() for d in drivers]))]
        pytest.fail(f"the drivers did not finish within {DRIVERS_TIMEOUT_S} s:\n" + "\n---\n".join(tails))
    return [subprocess.CompletedProcess(command, d.returncode, o, e) for d, (o, e) in zip(drivers, outputs)]


def answer(out: Path) -> pd.DataFrame:
    return pd.read_csv(out / "min_diversity.csv").drop(columns=["study"])


def assert_shared_without_duplicates(out: Path, single: Path, procs: list[subprocess.CompletedProcess],
                                     storage: str | None = None) -> None:
    for proc in procs:
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.splitlines()[-4:] == procs[0].stdout.splitlines()[-4:], \
            (f"the drivers printed different answers:\n{procs[0].stdout[-1500:]}\n---\n"
             f"{proc.stdout[-1500:]}")  # both whole
    assert answer(out).equals(answer(single))  # n_trials included: no evaluation more than alone
    trials = pd.read_csv(out / "trials.csv")
    assert not trials.duplicated(["study", "candidate", "seed"]).any() and (trials["state"] == "COMPLETE").all()
    # trials.csv keeps one row per trained seed, so ask the studies themselves: every trial that trained completed
    # (those that gave way to the other driver's never trained), none was failed as a zombie and asked again, and no
    # (width, seed) was asked twice
    storage = studies.storage_for(storage, out, create=False)
    for summary in optuna.get_all_study_summaries(storage):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        trained = [t for t in study.trials if "seed_list" in t.user_attrs]
        assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trained), study.study_name
        assert not owners.zombies(study), study.study_name
        asked = [(t.params[KNOB], seed) for t in trained for seed in t.user_attrs["seed_list"]]
        assert len(asked) == len(set(asked)), (study.study_name, asked)
    assert len(list((out / "ray").glob("search-*"))) == 2  # one Tune experiment each, never shared


def test_two_drivers_on_one_out_share_the_journal(unguided_search, tmp_path):
    out = tmp_path / "shared"
    procs = run_two(out)
    assert_shared_without_duplicates(out, unguided_search, procs)
    storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(out / "study.journal")))
    for summary in optuna.get_all_study_summaries(storage):  # every trial says which driver asked it
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        assert all(owners.DRIVER in t.user_attrs for t in study.trials if t.params)


def test_two_drivers_share_postgresql_and_its_password_shows_nowhere(unguided_search, postgres, tmp_path):
    out, url = tmp_path / "shared", postgres.createdb("concurrent")
    ray_tmp = Path(tempfile.mkdtemp(prefix="hs-ray-"))  # the drivers' Ray logs too (a short path: Ray's sockets)
    try:
        procs = run_two(out, "--storage", url, env=os.environ | {"RAY_TMPDIR": str(ray_tmp)})
        assert_shared_without_duplicates(out, unguided_search, procs, storage=url)
        assert not (out / "study.journal").exists()
        secret = postgres.password.encode()
        leaks = [p for root in (out, ray_tmp) for p in root.rglob("*")
                 if p.is_file() and not p.is_symlink() and secret in p.read_bytes()]
        assert leaks == [] and not any(postgres.password in p.stdout + p.stderr for p in procs)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def journal_of_one_study(tmp_path: Path, *overrides) -> Path:
    """A journal holding the slice's study as a search of that experiment opens it, with one failed trial."""
    base, search = load_search(CONFIGS / "debug_search.yaml", [ONE_SLICE, *overrides])
    [sl] = studies.slices(base, search, base.name)
    (tmp_path / "given").mkdir()
    path = tmp_path / "given" / "runs.journal"
    study = studies.open_study(sl, search, studies.storage_for(str(path), tmp_path), studies.fingerprint(base, search))
    study.tell(study.ask(sl.distributions(search.knob.key)), state=optuna.trial.TrialState.FAIL)
    return path


def test_a_foreign_or_corrupt_journal_is_one_line_exit_2_and_left_unchanged(tmp_path):
    """Foreign: the journal's study of the same name was made by another experiment (here another success threshold),
    given by path (--storage) or left in an --out without config.yaml. Corrupt: cut in the middle of a record."""
    journal = journal_of_one_study(tmp_path, "search.success.threshold=0.5")
    data = journal.read_bytes()
    cases = [(["--storage", journal, "--out", tmp_path / "a"], "--storage", "belongs to another experiment", journal)]
    (tmp_path / "b").mkdir()
    shutil.copy(journal, tmp_path / "b" / "study.journal")
    cases.append((["--out", tmp_path / "b"], "--out", "belongs to another experiment",
                  tmp_path / "b" / "study.journal"))
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "study.journal").write_bytes(data[:len(data) // 2])
    cases.append((["--out", tmp_path / "c"], "--out", "truncated", tmp_path / "c" / "study.journal"))
    for args, key, reason, path in cases:
        before = path.read_bytes()
        proc = headsweep("search", CONFIGS / "debug_search.yaml", ONE_SLICE, *args, timeout=120)
        assert proc.returncode == 2 and proc.stderr.startswith(f"headsweep: error: {key}: "), proc.stderr
        assert proc.stderr.count("\n") == 1 and reason in proc.stderr
        assert path.read_bytes() == before and [p.name for p in path.parent.iterdir()] == [path.name]  # nor beside it
    assert not (tmp_path / "a").exists()
