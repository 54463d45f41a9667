"""`headsweep search`: Optuna decides which training distributions to try, Ray Tune trains them.

One Optuna study per slice (a value of the other axes, e.g. l_min), stored in a journal file in the output directory
(or any Optuna storage URL). Rounds: each unfinished study asks for one candidate; every (slice, candidate, seed)
runs as one Tune trial of the grid's trainable; results are told back. Killing the driver at any point loses nothing:
finished Tune trials keep their result.json and are never re-run, Optuna trials left RUNNING are marked FAIL and
their candidates asked again.
"""
from __future__ import annotations

import itertools
import math
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from omegaconf import OmegaConf
from optuna.trial import TrialState

from sweep import samplers, tuner
from sweep.results import read_result
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
        values = [v for v in range(search.knob.low, search.knob.high + 1) if holds(checks, point | {knob: v})]
        if knob and not values:
            raise ConfigError("search.constraints", f"slice {point_id(point) or 'all'} leaves no knob value")
        if not params:  # with params, a trial's config is known only once they are drawn: checked then
            for v in values:
                _check_point(base_dict, point | {knob: v})
        if search.reference:
            _check_point(base_dict, point | search.reference)
        result.append(Slice(point, values if knob else [], name, params))
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


def _check_point(base_dict: dict, point: dict) -> None:
    try:
        config.with_point(base_dict, point, check_device=False)
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
        storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)  # noqa: SLF001 (no public API for this)
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


def wants_more(study: optuna.Study, search: SearchConfig, budget: int) -> bool:
    trials = study.get_trials(deepcopy=False)
    asked = sum(t.state in (TrialState.COMPLETE, TrialState.RUNNING) for t in trials)
    if asked >= budget or len(trials) >= 3 * budget:  # the second bound stops a candidate that always errors
        return False
    if isinstance(study.sampler, samplers.ThresholdSampler | samplers.ExhaustiveSampler):
        return study.sampler.next(study) is not None
    return True


def seeds_for(study: optuna.Study, search: SearchConfig, params: dict) -> list[int]:
    """Fresh seeds for each re-evaluation of a candidate: block k of the seed list, shifted past every earlier block,
    k = its completed evaluations plus those asked already this round."""
    k = sum(t.params == params and t.state in (TrialState.COMPLETE, TrialState.RUNNING)
            for t in study.get_trials(deepcopy=False)) - 1  # minus the trial being asked
    stride = max(search.success.seeds) + 1
    return [seed + k * stride for seed in search.success.seeds]


def reference_points(all_slices: list[Slice], search: SearchConfig) -> list[dict]:
    """search.reference applied to each slice, with the success seeds; slices that agree on it share its trials."""
    if not search.reference:
        return []
    points = [sl.point | search.reference | {"seed": s} for sl in all_slices for s in search.success.seeds]
    return list({point_id(p): p for p in points}.values())


def run(base: config.Config, search: SearchConfig, all_slices: list[Slice], studies: dict[str, optuna.Study],
        out: Path, extend: int) -> None:
    """Rounds of ask -> train on Ray Tune -> tell until every study is done or out of budget.

    extend adds that many completed trials to each slice's budget (and to the total), beyond what is done already;
    a converged threshold or grid study has nothing left to ask, so extending it changes nothing. The reference
    points (if any) train in the first round.
    """
    budgets = {}
    for sl in all_slices:
        completed = sum(t.state == TrialState.COMPLETE for t in studies[sl.study_name].get_trials(deepcopy=False))
        budgets[sl.study_name] = max(search.budget.per_slice, completed + extend if extend else 0)
    checks, base_dict = constraint_checks(search), config.to_dict(base)
    pending_references = [p for p in reference_points(all_slices, search) if read_result(p, out) is None]
    round_index = 0
    while True:
        total_done = sum(t.state == TrialState.COMPLETE for s in studies.values() for t in s.get_trials(deepcopy=False))
        batch = []
        for sl in all_slices:
            study = studies[sl.study_name]
            for _ in range(search.per_round):
                if search.budget.total and total_done + len(batch) >= search.budget.total + extend * len(all_slices):
                    break
                if not wants_more(study, search, budgets[sl.study_name]):
                    break
                batch += ask(study, sl, search, checks, base_dict)
        references = pending_references if round_index == 0 else []
        if not batch and not references:
            return
        round_index += 1
        points = [p for *_, pts in batch for p in pts] + references
        tuner.run(base, search, points, out, experiment=f"search-{time.strftime('%Y%m%d-%H%M%S')}-r{round_index}",
                  restore=False, job_type="search")
        for study, trial, pts in batch:
            tell(study, trial, pts, search, out)


def ask(study: optuna.Study, sl: Slice, search: SearchConfig, checks: list, base_dict: dict) -> list[tuple]:
    """One candidate as [(study, trial, its points, one per seed)], or [] if Optuna proposed an invalid one (told
    PRUNED with the reason: a value a constraint excludes, or a config that cannot exist such as all-zero weights)."""
    trial = study.ask(sl.distributions(search.knob.key))
    point = sl.point | sl.candidate(trial.params, search.knob.key)
    reason = None
    if search.knob.key and point[search.knob.key] not in sl.values:  # tpe draws from the whole interval
        reason = f"{search.knob.key}={point[search.knob.key]} breaks a constraint"
    elif not holds(checks, sl.point | trial.params):
        reason = "breaks a constraint"
    else:
        try:
            config.with_point(base_dict, point, check_device=False)
        except ConfigError as e:
            reason = str(e)
    if reason:
        trial.set_user_attr("pruned_because", reason)
        study.tell(trial, state=TrialState.PRUNED)
        return []
    seeds = seeds_for(study, search, trial.params)
    trial.set_user_attr("seed_list", seeds)  # before training: a failed evaluation still lists its trials
    return [(study, trial, [point | {"seed": s} for s in seeds])]


def tell(study, trial, points: list[dict], search: SearchConfig, out: Path) -> None:
    """Read each seed's result.json and report the candidate: COMPLETE with its evidence, or FAIL if a seed errored.

    Success is a constraint Optuna's TPE understands: the shortfall of the min_seeds-th best seed below the threshold
    (<= 0: at least min_seeds seeds succeed), graded so that near misses rank above clear failures."""
    results = [read_result(point, out) for point in points]
    if any(r is None for r in results):
        study.tell(trial, state=TrialState.FAIL)
        return
    success = search.success
    metrics = [_metric(r, success.metric) for r in results]
    trial.set_user_attr("successes", sum(m >= success.threshold for m in metrics))
    trial.set_user_attr("seeds", len(results))
    shortfall = success.threshold - sorted(metrics, reverse=True)[success.min_seeds - 1]
    trial.set_constraint("success", min(shortfall, 1e6))  # finite: a NaN metric is a large shortfall
    if not search.minimize:
        study.tell(trial, float(trial.params[search.knob.key]))
        return
    objective = [_metric(r, search.minimize) for r in results]
    if not all(math.isfinite(v) for v in objective):
        trial.set_user_attr("failed_because", f"{search.minimize} is missing or not finite in a result")
        study.tell(trial, state=TrialState.FAIL)
        return
    study.tell(trial, sum(objective) / len(objective))


def _metric(result: dict, name: str) -> float:
    value = result.get(name)
    return value if isinstance(value, (int, float)) and not math.isnan(value) else -math.inf
