"""One Optuna study per slice of a search (a value of the other axes, e.g. l_min): the slices with their valid knob
values, the storage (a journal file in the output directory by default, or any Optuna storage URL), opening or
resuming a study, and its sampler."""
from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import TrialState

from sweep.search import bisection, guide
from sweep.search.config import ParamConfig, SearchConfig
from sweep.space import axis_values, parse_constraint, point_id
from trainables import config
from trainables.errors import ConfigError
from trainables.tasks import task_of

TPE_STARTUP = 10  # random candidates before TPE models a multi-dimensional space
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
        if knob and all(isinstance(v, int) for v in self.values):
            asked[knob] = optuna.distributions.IntDistribution(self.values[0], self.values[-1])
        elif knob:  # explicit values, floats among them: one of them
            asked[knob] = optuna.distributions.CategoricalDistribution(self.values)
        for param in self.params:
            asked |= {name: param.distribution() for name in param.names()}
        return asked

    def candidate(self, params: dict, knob: str) -> dict:
        """An Optuna trial's params -> the config keys they set (a list param gathered back into one list; floats
        rounded to 6 significant digits, so configs and trial directories read cleanly)."""
        point = {knob: params[knob]} if knob else {}
        for param in self.params:
            values = [_clean(params[name]) for name in param.names()]
            point[param.key] = values if param.size else values[0]
        return point


def _clean(value):
    return float(f"{value:.6g}") if isinstance(value, float) else value


def slices(base: config.Config, search: SearchConfig, study_prefix: str) -> list[Slice]:
    """Every slice with its valid knob values; each (slice, value, seed) config is validated here, before any run."""
    keys = [axis.key for axis in search.slices]
    for i, axis in enumerate(search.slices):
        if config.select(base, axis.key) is config.MISSING:
            raise ConfigError(f"search.slices[{i}].key", f"{axis.key} is not a key of the trial config")
    value_lists = [axis_values(axis, f"search.slices[{i}]") for i, axis in enumerate(search.slices)]
    knob = search.knob.key
    checks = constraint_checks(search)
    base_dict = config.to_dict(base)
    result = []
    for combo in itertools.product(*value_lists):
        point = dict(zip(keys, combo))
        params = [p for p in search.params if all(point.get(k) == v for k, v in p.when.items())]
        name = f"{study_prefix}.{point_id(point)}" if point else study_prefix
        candidates = search.knob.values or range(search.knob.low, search.knob.high + 1)
        values = [v for v in candidates if holds(checks, point | {knob: v})] if knob else []
        if knob and not values:
            raise ConfigError("search.constraints", f"slice {point_id(point) or 'all'} leaves no knob value")
        measures = {}
        if not params:  # with params, a trial's config is known only once they are drawn: checked then
            for v in values:
                cfg = _check_point(base_dict, point | {knob: v})
                if guide.active(search):
                    measures[v] = task_of(cfg).diversity(cfg.task)[search.guide.metric]
        if search.reference:
            _check_point(base_dict, point | search.reference)
        result.append(Slice(point, values, name, params, measures))
    return result


def constraint_checks(search: SearchConfig) -> list:
    names = [a.key for a in search.slices] + [search.knob.key] + [n for p in search.params for n in p.names()]
    return [parse_constraint(c, names, f"search.constraints[{i}]") for i, c in enumerate(search.constraints)]


def holds(checks: list, point: dict) -> bool:
    """Every constraint holds; one naming a param not yet drawn counts as holding (it is checked once drawn)."""
    for check in checks:
        try:
            if not check(point):
                return False
        except KeyError:
            continue
    return True


def _check_point(base_dict: dict, point: dict) -> config.Config:
    try:
        return config.with_point(base_dict, point, check_device=False)
    except ConfigError as e:
        raise ConfigError(e.key, f"{e.reason} (at {point_id(point)})") from None


def storage_for(url: str | None, out: Path) -> optuna.storages.BaseStorage:
    """Default: a journal file in the output directory (safe with several processes); else an Optuna storage URL."""
    if url is None:
        return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(out / "study.journal")))
    try:
        return optuna.storages.RDBStorage(url)
    except Exception as e:  # a wrong URL, a missing driver or an unreachable server: one line, before any work
        raise ConfigError("--storage", f"cannot open {url}: {str(e).splitlines()[0][:200]}") from None


def open_study(sl: Slice, search: SearchConfig, storage) -> optuna.Study:
    """Create or load the slice's study, and fail the RUNNING zombies a killed driver left behind."""
    study = optuna.create_study(study_name=sl.study_name, storage=storage, direction="minimize",
                                sampler=make_sampler(sl, search), load_if_exists=True)
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        storage.set_trial_user_attr(trial._trial_id, "zombie", True)  # noqa: SLF001 (no public API for this)
        storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)  # noqa: SLF001
    return study


def make_sampler(sl: Slice, search: SearchConfig) -> optuna.samplers.BaseSampler:
    knob, min_rate = search.knob.key, search.success.min_seeds / len(search.success.seeds)
    if search.sampler == "threshold":
        return bisection.ThresholdSampler(knob, sl.values, min_rate)
    if search.sampler == "grid":
        return bisection.ExhaustiveSampler(knob, sl.values, min_rate)
    # TPE with settings pinned (Optuna 5 changed its defaults): success enters as a constraint, set per trial;
    # several dimensions (a distribution's shape) are modelled jointly; several candidates a round need the liar.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=search.sampler_seed, multivariate=bool(sl.params),
                                          constant_liar=search.per_round > 1,
                                          n_startup_trials=TPE_STARTUP if sl.params else min(5, len(sl.values)))
