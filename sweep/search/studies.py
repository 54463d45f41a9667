"""One Optuna study per slice of a search (a value of the other axes, e.g. l_min): the slices with their valid knob
values, the storage (a journal file in the output directory by default, or a journal path or database URL), opening
or resuming a study (refusing a foreign one: a study of the same name that another experiment created), and its
sampler. Which driver holds which trial is owners.py's."""
from __future__ import annotations

import hashlib
import itertools
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote

import optuna
import sqlalchemy

from sweep.search import guide, owners, samplers
from sweep.search.config import SearchConfig
from sweep.search.samplers import ParamConfig
from sweep.space import axis_values, config_at, point_id
from trainables import config
from trainables.errors import ConfigError
from trainables.tasks import task_of

optuna.logging.set_verbosity(optuna.logging.WARNING)  # a line per study created is noise beside the progress view

@dataclass
class Slice:
    point: dict  # slice keys -> values
    values: list  # the knob values valid for this slice, in increasing diversity ([] without a knob)
    study_name: str
    params: list[ParamConfig] = field(default_factory=list)  # the params that apply to this slice
    measures: dict[int, float] = field(default_factory=dict)  # knob value -> search.guide.metric of its config

    def distributions(self, knob: str) -> dict[str, optuna.distributions.BaseDistribution]:
        """What a trial of this slice's study asks Optuna for."""
        asked = {}
        if knob and all(isinstance(v, int) for v in self.values) \
                and self.values == list(range(self.values[0], self.values[-1] + 1)):  # every int between: a range
            asked[knob] = optuna.distributions.IntDistribution(self.values[0], self.values[-1])
        elif knob:  # explicit values, floats among them or out of numeric order (a special value first): one of them
            asked[knob] = optuna.distributions.CategoricalDistribution(self.values)
        for param in self.params:
            asked |= {name: param.distribution() for name in param.names()}
        return asked

    def candidate(self, params: dict, knob: str) -> dict:
        """An Optuna trial's params -> the config keys they set (a list param gathered back into one list; floats
        rounded to 6 significant digits, so configs and member directories read cleanly)."""
        point = {knob: params[knob]} if knob else {}
        for param in self.params:
            values = [float(f"{v:.6g}") if isinstance(v := params[name], float) else v for name in param.names()]
            point[param.key] = values if param.size else values[0]
        return point


def slices(base: config.Config, search: SearchConfig, study_prefix: str) -> list[Slice]:
    """Every slice with its valid knob values; each (slice, value, seed) config is validated here, before any run."""
    keys = [axis.key for axis in search.slices]  # each a key of the training config (load_search)
    value_lists = [axis_values(axis, f"search.slices[{i}]") for i, axis in enumerate(search.slices)]
    knob, checks, base_dict = search.knob.key, search.constraint_checks(), config.to_dict(base)
    result = []
    for combo in itertools.product(*value_lists):
        point = dict(zip(keys, combo))
        params = [p for p in search.tpe.params if all(point.get(k) == v for k, v in p.when.items())]
        name = f"{study_prefix}.{point_id(point)}" if point else study_prefix
        candidates = search.knob.values or range(search.knob.low, search.knob.high + 1)
        values = [v for v in candidates if holds(checks, point | {knob: v})] if knob else []
        if knob and not values:
            raise ConfigError("search.constraints", f"slice {point_id(point) or 'all'} leaves no knob value")
        measures = {}
        if not params:  # with params, a member's config is known only once they are drawn: checked then
            for v in values:
                cfg = config_at(base_dict, point | {knob: v})
                if guide.active(search):
                    measures[v] = task_of(cfg).diversity(cfg.task)[search.guide.metric]
        if search.reference:
            config_at(base_dict, point | search.reference)
        result.append(Slice(point, values, name, params, measures))
    return result


def unreachable_note(search: SearchConfig, all_slices: list[Slice]) -> str | None:
    """The line saying which knob values the constraints rule out in every slice (e.g. a knob.high no slice can
    reach), which would otherwise narrow the search without a word; None when every value is searched somewhere.
    (Said once the search is known to start: a later refusal stays the one line on stderr.)"""
    if not search.knob.key:
        return None
    candidates = search.knob.values or range(search.knob.low, search.knob.high + 1)
    dropped = [v for v in candidates if not any(v in sl.values for sl in all_slices)]
    if not dropped:
        return None
    contiguous = not search.knob.values and dropped[-1] - dropped[0] == len(dropped) - 1 and len(dropped) > 2
    shown = f"{dropped[0]}..{dropped[-1]}" if contiguous else ", ".join(map(str, dropped[:6])) + (
        ", ..." if len(dropped) > 6 else "")
    return f"search.knob: {search.knob.key} = {shown} breaks search.constraints in every slice: not searched"


def holds(checks: list, point: dict) -> bool:
    """Every constraint holds; one naming a param not yet drawn counts as holding (it is checked once drawn)."""
    for check in checks:
        try:
            if not check(point):
                return False
        except KeyError:
            continue
    return True


JOURNAL = "study.journal"  # the default storage, in the output directory
CONNECT_TIMEOUT_S = 5  # a database that does not answer within this is bad input, not a hang
SCHEMA_TRIES = 5  # opening a new database while another driver creates its tables: tries before giving up
FINGERPRINT = "config_fingerprint"  # study user attr: fingerprint() of the experiment that created the study
# The bare scheme means SQLAlchemy's default driver, psycopg 3 since SQLAlchemy 2.1; headsweep installs psycopg2.
DRIVERS = {"postgresql": "postgresql+psycopg2", "postgres": "postgresql+psycopg2"}


def storage_for(url: str | None, out: Path, create: bool = True) -> optuna.storages.BaseStorage | None:
    """The studies' storage: a journal file (out/study.journal by default, or a path given as --storage; safe with
    several processes) or a database URL (postgresql://user:pw@host/db). One that cannot be opened (no server, a
    wrong URL, a corrupt journal) is a ConfigError with any password redacted, and nothing is written to it. None
    where the journal does not exist yet and create is False (so checks before a run write nothing)."""
    if url is None or "://" not in url:
        return _journal(Path(url) if url else out / JOURNAL, "--storage" if url else "--out", create)
    try:
        parsed = sqlalchemy.engine.make_url(url)
    except Exception:  # noqa: BLE001 (any malformed URL is bad input)
        raise ConfigError("--storage", f"{redact(url)} is not a storage URL (dialect+driver://user:password@host/db)") \
            from None
    _check_password_syntax(url, parsed)
    parsed = parsed.set(drivername=DRIVERS.get(parsed.drivername, parsed.drivername))
    connect_args = {"connect_timeout": CONNECT_TIMEOUT_S} if parsed.get_backend_name() == "postgresql" and \
        "connect_timeout" not in parsed.query else {}
    for attempt in range(SCHEMA_TRIES):
        try:
            return optuna.storages.RDBStorage(parsed.render_as_string(hide_password=False),
                                              engine_kwargs={"connect_args": connect_args})
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError) as e:
            # Two drivers opening a new database at once both create Optuna's tables: the slower one's CREATE
            # collides with the faster one's (a unique violation). Opened again, the tables are there.
            error = e
            time.sleep(0.2 * (attempt + 1))
        except Exception as e:  # noqa: BLE001 (a missing driver, a refused connection, an unknown database: one line)
            error = e
            break
    reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
    raise ConfigError("--storage", f"cannot open {redact(url)}: {_scrub(reason, parsed)}") from None


def is_server(url: str | None) -> bool:
    """Whether --storage names a database server that drivers on other machines reach (not a journal, not SQLite)."""
    return bool(url) and "://" in url and not url.lower().startswith("sqlite")


def redact(url: str) -> str:
    """The URL as it may be printed: postgresql://user:***@host/db?sslpassword=***. Plain text operations, so a URL
    that does not parse (or parses differently from what its author meant) is redacted too: everything between the
    user's colon and the last @ before the query, and every query value whose name says it is secret."""
    head, question, query = _split_query(url)
    password = _raw_password(head)
    if password is not None:
        head = head.replace(f":{password}@", ":***@", 1)
    return head + question + _SECRET_QUERY.sub(r"\1***", query)


_SECRET_QUERY = re.compile(r"((?:^|&)[^=&]*(?:password|passwd|pwd|secret|token)[^=&]*=)[^&]*", re.IGNORECASE)


def _split_query(url: str) -> tuple[str, str, str]:
    """(head, "?", query) as str.partition, the query starting at the first ? after the last @: a ? in the password
    belongs to the head. (An @ inside the query moves the cut into it: more is redacted, never less.)"""
    cut = url.find("?", url.rfind("@") + 1)
    return (url[:cut], "?", url[cut + 1:]) if cut >= 0 else (url, "", "")


def _raw_password(head: str) -> str | None:
    """The password of a URL (without its query) as written: between the first colon of the user part and the last
    @ (None without one)."""
    _, scheme, rest = head.partition("://")
    userinfo, at, _ = rest.rpartition("@")
    user, colon, password = userinfo.partition(":")
    return password if scheme and at and colon else None


def _check_password_syntax(url: str, parsed: sqlalchemy.engine.URL) -> None:
    """A password that the URL parser reads differently from how it is written (an unencoded @ makes the URL name
    another host) is refused before any connection, which would also carry part of the password into the error."""
    written = _raw_password(_split_query(url)[0])
    if parsed.password is not None and (written is None or unquote(written) != parsed.password):
        raise ConfigError("--storage", f"{redact(url)}: the password holds a character URLs reserve (such as @); "
                                       "percent-encode it (@ as %40)")


def _scrub(text: str, parsed: sqlalchemy.engine.URL) -> str:
    """The text without the URL's secrets: its password and secret query values, as written and percent-encoded."""
    secrets = [parsed.password] + [value for name, value in parsed.query.items() if _SECRET_QUERY.match(f"{name}=")]
    for secret in filter(None, secrets):
        for form in (secret, quote(str(secret), safe="")):
            text = text.replace(str(form), "***")
    return text


def _journal(path: Path, key: str, create: bool) -> optuna.storages.JournalStorage | None:
    """An Optuna journal file, checked whole before anything is appended to it: Optuna skips a torn or garbled last
    line when it reads, but appending after one would make the next record unreadable and the journal with it."""
    if path.is_dir():
        raise ConfigError(key, f"{path} is a directory; give the path of a journal file (or a database URL)")
    if not path.exists() and not create:
        return None
    try:
        if path.exists():
            _check_journal(path, key)
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
    except OSError as e:  # an unreadable file, a missing parent directory
        raise ConfigError(key, f"cannot use {path} as a journal: {e.strerror or e}") from None
    except ConfigError:  # _check_journal's own line, already saying what is wrong
        raise
    except Exception as e:  # noqa: BLE001 (records that do not replay: a journal of something else)
        raise ConfigError(key, f"{path} is not a usable Optuna journal ({str(e)[:200]}); left as it is") from None


def _check_journal(path: Path, key: str) -> None:
    lock = optuna.storages.journal.JournalFileSymlinkLock(str(path))  # a peer's append is never read half done
    lock.acquire()
    try:
        data = path.read_bytes()
    finally:
        lock.release()
    if data and not data.endswith(b"\n"):
        raise ConfigError(key, f"{path} ends in an incomplete record (a truncated journal); left as it is")
    for number, line in enumerate(data.splitlines(), 1):
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or "op_code" not in record:
            raise ConfigError(key, f"{path} is not an Optuna journal (line {number} is not a journal record); "
                                   "left as it is")


def fingerprint(base: config.Config, search: SearchConfig) -> str:
    """What makes the Optuna trials of two runs one experiment: the training config (not its name, device or
    logging) and what the search asks and counts as success. Budget, resources, packing and the sampler (and its
    settings: a study made with search.sampler=grid, now exhaustive, resumes under the new name) may change between
    runs of one study (as --extend does); a config key added since (config.ADDED_KEYS) counts only when set."""
    training = {k: v for k, v in config.without_added_defaults(config.to_dict(base)).items()
                if k not in ("name", "device", "logging")}  # an added key at its default: the same experiment
    asked = {k: v for k, v in search.as_flat_keys().items() if k in ASKED}  # tpe's, as before its subsection
    asked["success"].pop("confidence")  # how sure the interval must be is not what the seeds measure
    return hashlib.sha256(json.dumps([training, asked], sort_keys=True, default=str).encode()).hexdigest()[:16]


ASKED = ("knob", "slices", "constraints", "success", "params", "minimize", "reference")


def check_owner(storage, sl: Slice, knob: str, experiment: str, key: str) -> None:
    """Refuse a study of this name that another experiment created (a foreign study): its fingerprint differs, or,
    in a study from before fingerprints (or without `experiment`), its trials asked for other parameters or ranges
    than this slice asks. Reads only."""
    try:
        study = optuna.load_study(study_name=sl.study_name, storage=storage)
    except KeyError:  # no such study yet
        return
    recorded, asked = study.user_attrs.get(FINGERPRINT), sl.distributions(knob)
    foreign = recorded != experiment if recorded and experiment else any(
        asked.get(name) != d for t in study.get_trials(deepcopy=False) for name, d in t.distributions.items())
    if foreign:
        raise ConfigError(key, f"study {sl.study_name} there belongs to another experiment (a different config or "
                               "search section); choose another --study prefix, --storage or --out")


def open_study(sl: Slice, search: SearchConfig, storage, experiment: str = "", key: str = "--storage") -> optuna.Study:
    """Load the slice's study (or create it, marked with the experiment's fingerprint) and fail the RUNNING trials
    whose driver is gone (owners.py), and this process's own: a driver opens its studies before it asks anything,
    so any of its trials still running were left by an interrupted earlier run in the same process. Other live
    drivers' trials are left alone."""
    check_owner(storage, sl, search.knob.key, experiment, key)
    sampler = samplers.for_slice(search, sl.values, sl.params).optuna_sampler()
    try:
        study = optuna.load_study(study_name=sl.study_name, storage=storage, sampler=sampler)
    except KeyError:  # loading first: creating an existing study would append a record to a journal
        study = optuna.create_study(study_name=sl.study_name, storage=storage, direction="minimize", sampler=sampler,
                                    load_if_exists=True)  # another driver may create it at the same moment
    if experiment and FINGERPRINT not in study.user_attrs:
        study.set_user_attr(FINGERPRINT, experiment)
    owners.fail_zombies(study, mine_too=True)
    return study
