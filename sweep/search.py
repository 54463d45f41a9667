"""`headsweep search`: Optuna decides which training distributions to try, Ray Tune trains them.

One Optuna study per slice (a value of the other axes, e.g. l_min), stored in a journal file in the output directory
(or any Optuna storage URL). This module holds the search section, its validation, the slices and their studies;
sweep/search_loop.py runs the rounds of ask -> train -> tell.
"""
from __future__ import annotations

import itertools
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from omegaconf import OmegaConf
from optuna.trial import TrialState

from sweep import guide, samplers
from sweep.guide import GuideConfig
from sweep.space import AxisConfig, ResourcesConfig, axis_values, parse_constraint, point_id
from trainables import config
from trainables.errors import ConfigError

SAMPLERS = ("threshold", "tpe", "grid")
TPE_STARTUP = 10  # random candidates before TPE models a multi-dimensional space


@dataclass
class KnobConfig:
    """The diversity knob: an integer config key searched over [low, high] (values breaking a constraint skipped)."""

    key: str = ""  # e.g. task.lengths.width; "" only for a tpe search over params alone
    low: int = 1
    high: int = 13


@dataclass
class ParamConfig:
    """A further dimension of a tpe search (e.g. a distribution's shape): a number, or a list of `size` numbers."""

    key: str = "???"  # dotted config key, e.g. task.lengths.exponent
    type: str = "float"  # float | int
    low: float = 0.0
    high: float = 1.0
    step: float = 0.0  # 0: continuous floats, steps of 1 for ints
    log: bool = False
    size: int = 0  # > 0: the key takes a list, searched as key[0] .. key[size-1] (e.g. free weights q_1 .. q_U)
    when: dict[str, Any] = field(default_factory=dict)  # only in slices with these values, e.g. {task.lengths.family: power}

    def names(self) -> list[str]:
        return [f"{self.key}[{i}]" for i in range(self.size)] if self.size else [self.key]

    def distribution(self) -> optuna.distributions.BaseDistribution:
        if self.type == "int":
            return optuna.distributions.IntDistribution(int(self.low), int(self.high), log=self.log,
                                                        step=int(self.step or 1))
        return optuna.distributions.FloatDistribution(self.low, self.high, log=self.log, step=self.step or None)


@dataclass
class SuccessConfig:
    """When a candidate generalizes: metric >= threshold in at least min_seeds of the seeds."""

    metric: str = "ood/acc"
    threshold: float = 0.99
    seeds: list[int] = field(default_factory=lambda: [0])
    min_seeds: int = 1  # m of n = len(seeds); re-checks pool their seeds and need the same rate


@dataclass
class BudgetConfig:
    per_slice: int = 20  # completed Optuna trials (candidate evaluations) per slice
    total: int = 0  # completed trials over all slices; 0 = no limit beyond per_slice


@dataclass
class SearchConfig:
    knob: KnobConfig = field(default_factory=KnobConfig)
    slices: list[AxisConfig] = field(default_factory=list)  # one study per combination of these axes' values
    constraints: list[str] = field(default_factory=list)  # between knob and slice keys, e.g. low + width <= 16
    success: SuccessConfig = field(default_factory=SuccessConfig)
    sampler: str = "threshold"  # threshold (bisection, monotone success) | tpe | grid (exhaustive reference)
    sampler_seed: int = 0  # tpe's seed, fixed so a study is reproducible
    params: list[ParamConfig] = field(default_factory=list)  # tpe only: dimensions beyond (or instead of) the knob
    minimize: str = ""  # tpe only: the metric minimised over candidates that succeed (e.g. data/cost); "" = the knob
    reference: dict[str, Any] = field(default_factory=dict)  # config keys evaluated once per slice beside the search,
    # e.g. {task.lengths.family: optimal} (Proposition 8), with the success seeds; reported next to the best found
    per_round: int = 1  # candidates a study asks per round (tpe and grid; bisection asks one at a time)
    guide: GuideConfig = field(default_factory=GuideConfig)  # threshold: carry verdicts between slices (sweep/guide.py)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    max_concurrent: int = 0
    max_failures: int = 2


@dataclass
class Slice:
    point: dict  # slice keys -> values
    values: list[int]  # the knob values valid for this slice, increasing ([] without a knob)
    study_name: str
    params: list[ParamConfig] = field(default_factory=list)  # the params that apply to this slice
    measures: dict[int, float] = field(default_factory=dict)  # knob value -> search.guide.metric of its config

    def distributions(self, knob: str) -> dict[str, optuna.distributions.BaseDistribution]:
        """What a trial of this slice's study asks Optuna for."""
        asked = {knob: optuna.distributions.IntDistribution(self.values[0], self.values[-1])} if knob else {}
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


def load_search(path, overrides) -> tuple[config.Config, SearchConfig]:
    """The base trial config and the validated search section (`search.*` overrides go to it)."""
    layers = config.read_layers(path, overrides)
    base = config.load(path, [o for o in overrides if not o.startswith("search.")], check_device=False)
    sections = [OmegaConf.create(layer["search"]) for layer in layers if "search" in layer]
    search = OmegaConf.to_object(config.merge_checked(SearchConfig(), sections, prefix="search."))
    _require_valid(base, search)
    return base, search


def _require_valid(base: config.Config, search: SearchConfig) -> None:
    success, knob, tpe = search.success, search.knob, search.sampler == "tpe"
    is_key = lambda key: config.select(base, key) is not config.MISSING
    slice_keys = [axis.key for axis in search.slices]
    checks = [
        ("search.sampler", search.sampler in SAMPLERS, f"must be one of {', '.join(SAMPLERS)}"),
        ("search.knob.key", bool(knob.key) or (tpe and bool(search.params)),
         "is required (only a tpe search with params can do without a knob)"),
        ("search.knob.key", not knob.key or is_key(knob.key), "is not a key of the trial config"),
        ("search.knob.high", knob.high >= knob.low, "must be >= search.knob.low"),
        ("search.params", tpe or not search.params, "need search.sampler=tpe (threshold and grid search one knob)"),
        ("search.minimize", tpe or not search.minimize, "needs search.sampler=tpe (threshold and grid minimise the knob)"),
        ("search.per_round", search.per_round >= 1 and (search.per_round == 1 or search.sampler != "threshold"),
         "must be >= 1, and 1 for the threshold sampler (bisection is sequential)"),
        ("search.success.seeds", bool(success.seeds) and len(set(success.seeds)) == len(success.seeds),
         "needs at least one seed, each once"),
        ("search.success.min_seeds", 1 <= success.min_seeds <= len(success.seeds), "must be in 1..len(seeds)"),
        ("search.budget.per_slice", search.budget.per_slice >= 1, "must be >= 1"),
        ("search.budget.total", search.budget.total >= 0, "must be >= 0"),
    ]
    for i, param in enumerate(search.params):
        where = f"search.params[{i}]"
        checks += [
            (f"{where}.key", is_key(param.key), f"{param.key} is not a key of the trial config"),
            (f"{where}.type", param.type in ("int", "float"), "must be int or float"),
            (f"{where}.high", param.high > param.low, "must be > low"),
            (f"{where}.low", not param.log or param.low > 0, "must be > 0 on a log scale"),
            (f"{where}.size", param.size >= 0, "must be >= 0"),
            (f"{where}.when", set(param.when) <= set(slice_keys), f"may only name slice keys ({', '.join(slice_keys)})"),
        ]
    checks += [(f"search.reference.{key}", is_key(key), "is not a key of the trial config") for key in search.reference]
    guide.check(search.guide, slice_keys)
    for key, ok, reason in checks:
        if not ok:
            raise ConfigError(key, reason)


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
        values = [v for v in range(search.knob.low, search.knob.high + 1)
                  if holds(checks, point | {knob: v})] if knob else []
        if knob and not values:
            raise ConfigError("search.constraints", f"slice {point_id(point) or 'all'} leaves no knob value")
        measures = {}
        if not params:  # with params, a trial's config is known only once they are drawn: checked then
            for v in values:
                cfg = _check_point(base_dict, point | {knob: v})
                if guide.active(search):
                    measures[v] = guide.measure(cfg, search.guide.metric)
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
        return samplers.ThresholdSampler(knob, sl.values, min_rate)
    if search.sampler == "grid":
        return samplers.ExhaustiveSampler(knob, sl.values, min_rate)
    # TPE with settings pinned (Optuna 5 changed its defaults): success enters as a constraint, set per trial;
    # several dimensions (a distribution's shape) are modelled jointly; several candidates a round need the liar.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(seed=search.sampler_seed, multivariate=bool(sl.params),
                                          constant_liar=search.per_round > 1,
                                          n_startup_trials=TPE_STARTUP if sl.params else min(5, len(sl.values)))
