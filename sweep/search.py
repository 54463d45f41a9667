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
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from omegaconf import OmegaConf
from optuna.trial import TrialState

from sweep import samplers, tuner
from sweep.results import read_result
from sweep.space import AxisConfig, ResourcesConfig, axis_values, parse_constraint, point_id
from trainables import config
from trainables.errors import ConfigError

SAMPLERS = ("threshold", "tpe", "grid")


@dataclass
class KnobConfig:
    """The diversity knob: an integer config key searched over [low, high] (values breaking a constraint skipped)."""

    key: str = "task.lengths.width"
    low: int = 1
    high: int = 13


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
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    max_concurrent: int = 0
    max_failures: int = 2


@dataclass
class Slice:
    point: dict  # slice keys -> values
    values: list[int]  # the knob values valid for this slice, increasing
    study_name: str


def load_search(path, overrides) -> tuple[config.Config, SearchConfig]:
    """The base trial config and the validated search section (`search.*` overrides go to it)."""
    layers = config.read_layers(path, overrides)
    base = config.load(path, [o for o in overrides if not o.startswith("search.")], check_device=False)
    sections = [OmegaConf.create(layer["search"]) for layer in layers if "search" in layer]
    search = OmegaConf.to_object(config.merge_checked(SearchConfig(), sections, prefix="search."))
    _require_valid(base, search)
    return base, search


def _require_valid(base: config.Config, search: SearchConfig) -> None:
    success = search.success
    checks = [
        ("search.sampler", search.sampler in SAMPLERS, f"must be one of {', '.join(SAMPLERS)}"),
        ("search.knob.key", config.select(base, search.knob.key) is not config.MISSING, "is not a key of the trial config"),
        ("search.knob.high", search.knob.high >= search.knob.low, "must be >= search.knob.low"),
        ("search.success.seeds", bool(success.seeds) and len(set(success.seeds)) == len(success.seeds),
         "needs at least one seed, each once"),
        ("search.success.min_seeds", 1 <= success.min_seeds <= len(success.seeds), "must be in 1..len(seeds)"),
        ("search.budget.per_slice", search.budget.per_slice >= 1, "must be >= 1"),
        ("search.budget.total", search.budget.total >= 0, "must be >= 0"),
    ]
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
    checks = [parse_constraint(c, keys + [knob], f"search.constraints[{i}]") for i, c in enumerate(search.constraints)]
    base_dict = config.to_dict(base)
    result = []
    for combo in itertools.product(*value_lists):
        point = dict(zip(keys, combo))
        values = [v for v in range(search.knob.low, search.knob.high + 1)
                  if all(check(point | {knob: v}) for check in checks)]
        if not values:
            raise ConfigError("search.constraints", f"slice {point_id(point) or 'all'} leaves no knob value")
        for v in values:
            try:
                config.with_point(base_dict, point | {knob: v}, check_device=False)
            except ConfigError as e:
                raise ConfigError(e.key, f"{e.reason} (at {point_id(point | {knob: v})})") from None
        name = f"{study_prefix}.{point_id(point)}" if point else study_prefix
        result.append(Slice(point, values, name))
    return result


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
    # TPE with settings pinned (Optuna 5 changed its defaults): success enters as a constraint, set per trial.
    return optuna.samplers.TPESampler(seed=search.sampler_seed, multivariate=False, constant_liar=False,
                                      n_startup_trials=min(5, len(sl.values)))


def wants_more(study: optuna.Study, sl: Slice, search: SearchConfig, budget: int) -> bool:
    trials = study.get_trials(deepcopy=False)
    completed = sum(t.state == TrialState.COMPLETE for t in trials)
    if completed >= budget or len(trials) >= 3 * budget:  # the second bound stops a candidate that always errors
        return False
    if isinstance(study.sampler, samplers.ThresholdSampler | samplers.ExhaustiveSampler):
        return study.sampler.next(study) is not None
    return True


def seeds_for(study: optuna.Study, search: SearchConfig, knob_value: int) -> list[int]:
    """Fresh seeds for each re-evaluation of a value: block k of the seed list, shifted past every earlier block."""
    k = samplers.evidence(study.get_trials(deepcopy=False), search.knob.key).get(knob_value, samplers.Evidence()).evaluations
    stride = max(search.success.seeds) + 1
    return [seed + k * stride for seed in search.success.seeds]


def run(base: config.Config, search: SearchConfig, all_slices: list[Slice], studies: dict[str, optuna.Study],
        out: Path, extend: int) -> None:
    """Rounds of ask -> train on Ray Tune -> tell until every study is done or out of budget.

    extend adds that many completed trials to each slice's budget (and to the total), beyond what is done already;
    a converged threshold or grid study has nothing left to ask, so extending it changes nothing.
    """
    budgets = {}
    for sl in all_slices:
        completed = sum(t.state == TrialState.COMPLETE for t in studies[sl.study_name].get_trials(deepcopy=False))
        budgets[sl.study_name] = max(search.budget.per_slice, completed + extend if extend else 0)
    round_index = 0
    while True:
        total_done = sum(t.state == TrialState.COMPLETE for s in studies.values() for t in s.get_trials(deepcopy=False))
        batch = []
        for sl in all_slices:
            study = studies[sl.study_name]
            if search.budget.total and total_done + len(batch) >= search.budget.total + extend * len(all_slices):
                break
            if not wants_more(study, sl, search, budgets[sl.study_name]):
                continue
            trial = study.ask({search.knob.key: optuna.distributions.IntDistribution(sl.values[0], sl.values[-1])})
            value = trial.params[search.knob.key]
            if value not in sl.values:  # tpe and grid draw from the interval; constraints may exclude some values
                study.tell(trial, state=TrialState.PRUNED)
                continue
            seeds = seeds_for(study, search, value)
            trial.set_user_attr("seed_list", seeds)  # before training: a failed evaluation still lists its trials
            points = [sl.point | {search.knob.key: value, "seed": s} for s in seeds]
            batch.append((study, trial, value, points))
        if not batch:
            return
        round_index += 1
        points = [p for *_, pts in batch for p in pts]
        tuner.run(base, search, points, out, experiment=f"search-{time.strftime('%Y%m%d-%H%M%S')}-r{round_index}",
                  restore=False, job_type="search")
        for study, trial, value, pts in batch:
            tell(study, trial, value, pts, search, out)


def tell(study, trial, value: int, points: list[dict], search: SearchConfig, out: Path) -> None:
    """Read each seed's result.json and report the candidate: COMPLETE with its evidence, or FAIL if a seed errored."""
    results = [read_result(point, out) for point in points]
    if any(r is None for r in results):
        study.tell(trial, state=TrialState.FAIL)
        return
    success = search.success
    successes = sum(_metric(r, success.metric) >= success.threshold for r in results)
    trial.set_user_attr("successes", successes)
    trial.set_user_attr("seeds", len(results))
    trial.set_constraint("success", success.min_seeds - successes)  # <= 0: feasible (generalizes)
    study.tell(trial, float(value))


def _metric(result: dict, name: str) -> float:
    value = result.get(name)
    return value if isinstance(value, (int, float)) and not math.isnan(value) else -math.inf
