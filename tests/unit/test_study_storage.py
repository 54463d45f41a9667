"""Opening a search's storage (sweep/search/studies.py): a corrupt or foreign journal is refused before anything is
written to it, and a storage URL's password never appears in an error. The CLI's side of it (one line, exit 2) and
a real PostgreSQL server are in tests/integration/."""
import optuna
import pytest

from sweep.search import studies
from sweep.search.config import load_search
from tests.conftest import CONFIGS
from trainables.errors import ConfigError

ONE_SLICE = "search.slices=[{key: task.lengths.low, values: [2]}]"


def experiment(*overrides):
    base, search = load_search(CONFIGS / "debug_search.yaml", [ONE_SLICE, *overrides])
    [sl] = studies.slices(base, search, base.name)
    return sl, search, studies.fingerprint(base, search)


def a_journal(tmp_path, *overrides) -> bytes:
    """A journal holding one study with one finished trial, as a search leaves it; its bytes."""
    sl, search, fingerprint = experiment(*overrides)
    study = studies.open_study(sl, search, studies.storage_for(None, tmp_path), fingerprint, "--out")
    study.tell(study.ask(sl.distributions(search.knob.key)), state=optuna.trial.TrialState.FAIL)
    return (tmp_path / studies.JOURNAL).read_bytes()


@pytest.mark.parametrize("damage", [
    lambda data: data[:-7],  # truncated mid-record
    lambda data: data + b'{"op_code": 4, "trial_id": 0, "user_attr": {"a": 1}, "worker_id": "x"',  # a torn append
    lambda data: data + b"\x00\xff garbage\n",
    lambda data: b"not a journal\n" + data,
    lambda data: data + b'["json", "but not a record"]\n',
], ids=["truncated", "torn-last-record", "garbage-at-end", "garbage-at-start", "not-a-record"])
def test_a_corrupt_journal_is_refused_and_left_byte_for_byte(tmp_path, damage):
    data = damage(a_journal(tmp_path))
    (tmp_path / studies.JOURNAL).write_bytes(data)
    with pytest.raises(ConfigError, match="--out: .*study.journal.*left as it is") as error:
        studies.storage_for(None, tmp_path)
    assert str(error.value).count("--out") == 1  # said once, not wrapped in a second message
    assert (tmp_path / studies.JOURNAL).read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == [studies.JOURNAL]  # its lock was released and removed


def test_a_journal_given_by_path_that_is_corrupt_names_storage(tmp_path):
    path = tmp_path / "elsewhere.journal"
    path.write_bytes(b"\x89PNG\r\n")
    with pytest.raises(ConfigError, match="--storage: "):
        studies.storage_for(str(path), tmp_path / "out")
    assert path.read_bytes() == b"\x89PNG\r\n"


def test_a_missing_journal_is_not_created_by_the_checks(tmp_path):
    assert studies.storage_for(None, tmp_path, create=False) is None and not any(tmp_path.iterdir())


def test_a_study_of_another_experiment_is_foreign(tmp_path):
    """Same study name, different experiment: a different success threshold (fingerprint), or, in a study from
    before fingerprints, trials that asked another range of the knob."""
    data = a_journal(tmp_path)
    storage = studies.storage_for(None, tmp_path)
    sl, search, _ = experiment("search.success.threshold=0.5")
    with pytest.raises(ConfigError, match="debug_search.low=2 there belongs to another experiment"):
        studies.open_study(sl, search, storage, studies.fingerprint(*load_search(
            CONFIGS / "debug_search.yaml", [ONE_SLICE, "search.success.threshold=0.5"])), "--out")
    assert (tmp_path / studies.JOURNAL).read_bytes() == data
    sl, search, fingerprint = experiment("search.budget.per_slice=20")  # a larger budget is the same experiment
    assert studies.open_study(sl, search, storage, fingerprint, "--out").study_name == sl.study_name

    (tmp_path / "old").mkdir()
    legacy = optuna.create_study(study_name="old.low=2", storage=studies.storage_for(None, tmp_path / "old"))
    legacy.ask({"task.lengths.width": optuna.distributions.IntDistribution(1, 5)})
    sl, search, fingerprint = experiment()
    sl.study_name = "old.low=2"
    old = (tmp_path / "old" / studies.JOURNAL).read_bytes()
    with pytest.raises(ConfigError, match="another experiment"):
        studies.check_owner(studies.storage_for(None, tmp_path / "old"), sl, search.knob.key, fingerprint, "--out")
    sl.study_name = "new.low=2"
    studies.check_owner(studies.storage_for(None, tmp_path / "old"), sl, search.knob.key, fingerprint, "--out")
    assert (tmp_path / "old" / studies.JOURNAL).read_bytes() == old  # checking reads only


@pytest.mark.parametrize("url", [
    "postgresql://user:s3cr3t-pw@127.0.0.1:9/db",  # the bare scheme, as documented: psycopg2, refused at once
    "mysql+nodriver://user:s3cr3t-pw@host/db",  # a driver that is not installed
    "postgresql://user:s3cr3t-pw@[bad",  # not a URL at all
    "postgresql://user@127.0.0.1:9/db?password=s3cr3t-pw",  # the password as a query parameter
    "postgresql://user:s3cr3t@pw@127.0.0.1:9/db",  # an unencoded @ in the password: would name host pw@127.0.0.1
    "postgresql://user:s3cr3t?pw@127.0.0.1:9/db",  # an unencoded ? in the password: not the start of the query
    "postgresql://user:s3cr3t/pw#x@127.0.0.1:9/db?sslmode=disable",  # / and # unencoded too
])
def test_an_unusable_storage_url_is_one_line_without_its_password(tmp_path, url):
    with pytest.raises(ConfigError) as error:
        studies.storage_for(url, tmp_path)
    message = str(error.value)
    assert message.startswith("--storage: ") and "\n" not in message
    assert "s3cr3t" not in message and "***" in message
    assert not any(tmp_path.iterdir())


def test_redact_hides_only_the_secrets():
    assert studies.redact("postgresql://user:pw@host:5432/db") == "postgresql://user:***@host:5432/db"
    assert studies.redact("postgresql://user@host/db") == "postgresql://user@host/db"
    assert studies.redact("postgresql://u:p@ss@host/db?sslmode=require&sslpassword=x") == \
        "postgresql://u:***@host/db?sslmode=require&sslpassword=***"
    assert studies.redact("postgresql://u@host/db?password=x&application_name=a") == \
        "postgresql://u@host/db?password=***&application_name=a"
    assert studies.redact("postgresql://u:p?w@host/db?sslmode=require") == "postgresql://u:***@host/db?sslmode=require"


def test_a_storage_path_that_is_a_directory_is_bad_input(tmp_path):
    with pytest.raises(ConfigError, match="--storage: .* is a directory"):
        studies.storage_for(str(tmp_path), tmp_path / "out")
    with pytest.raises(ConfigError, match="--storage: cannot use .* as a journal"):
        studies.storage_for(str(tmp_path / "missing" / "study.journal"), tmp_path / "out")
