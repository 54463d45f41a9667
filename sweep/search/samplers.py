"""The search's samplers: what a slice's study evaluates next, on which seeds, and what its evaluations mean. Each is
an object answering the questions the rounds (loop.py), the tables and the guide ask; `kind` is the only place that
reads `search.sampler`.

- Threshold (`threshold`, the default): the next value is where `search.threshold.batch` more seeds are expected to
  leave the least uncertainty about K*_q (allocation.py, on estimate.py's model); a slice is done when its interval is
  as narrow as `search.threshold.resolution` or its `search.budget.trainings` are spent. Every seed is trained at one
  value only, so the values' outcomes are independent draws, as the interval's tests assume.
- Bisection (`bisection`, the protocol before intervals): success is taken as monotone in diversity and each value
  gets a verdict (m of n seeds must succeed, pooled as a rate); it bisects the ordered values and re-checks the
  boundary with fresh seeds before it stops (bisection.next_value). With m = n that is the all-pass rule.
- Exhaustive (`exhaustive`, `grid` before): every value once, smallest first: the reference.
- Tpe (`tpe`): Optuna's TPE over the knob and search.tpe.params, minimising the knob or search.tpe.minimize among the
  candidates that succeed (a constraint TPE understands: loop.tell).
The last three judge a candidate by one m-of-n verdict over the same seeds (search.success.seeds) at every value.

A one-knob sampler's choice is a pure function of the study's trials and of the guide's predictions, which the loop
hands in, so a resumed study asks what an uninterrupted one would have asked. The loop asks the sampler first and
hands Optuna the value fixed (owners.ask): "nothing left" is a None the loop reads, never an exception raised
through study.ask.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from sweep.search import allocation, bisection, estimate, owners

if TYPE_CHECKING:
    from sweep.search.config import SearchConfig

TPE_STARTUP = 10  # random candidates before TPE models a multi-dimensional space
ASKED = (TrialState.COMPLETE, TrialState.RUNNING)  # an evaluation asked, done or under way


@dataclass
class ThresholdConfig:
    """search.threshold: the threshold sampler's settings (its budget: search.budget.trainings)."""

    batch: int = 3  # seeds trained per evaluation of a knob value (a slice's seeds: seed, seed + 1, ...)
    resolution: float = 1.0  # a slice is done once its interval spans at most this many knob steps


@dataclass
class ParamConfig:
    """A further dimension of a tpe search (search.tpe.params), e.g. a parameter of the training distribution: a
    number, or a list of `size` numbers."""

    key: str = "???"  # dotted config key, e.g. a parameter of the training distribution
    type: str = "float"  # float | int
    low: float = 0.0
    high: float = 1.0
    step: float = 0.0  # 0: continuous floats, steps of 1 for ints
    log: bool = False
    size: int = 0  # > 0: the key takes a list, searched as key[0] .. key[size-1] (e.g. free weights q_1 .. q_U)
    when: dict[str, Any] = field(default_factory=dict)  # only in slices with these {slice key: value}

    def names(self) -> list[str]:
        return [f"{self.key}[{i}]" for i in range(self.size)] if self.size else [self.key]

    def distribution(self) -> optuna.distributions.BaseDistribution:
        if self.type == "int":
            return optuna.distributions.IntDistribution(int(self.low), int(self.high), log=self.log,
                                                        step=int(self.step or 1))
        return optuna.distributions.FloatDistribution(self.low, self.high, log=self.log, step=self.step or None)


@dataclass
class TpeConfig:
    """search.tpe: the tpe sampler's settings (its budget: search.budget.per_slice)."""

    seed: int = 0  # fixed, so a study is reproducible
    params: list[ParamConfig] = field(default_factory=list)  # dimensions beyond (or instead of) the knob
    minimize: str = ""  # the metric minimised over candidates that succeed (e.g. data/cost); "" = the knob


@dataclass
class Sampler:
    """What every sampler answers; the defaults are those of the samplers that judge a candidate's seeds together."""

    key: str  # the knob ("" for a tpe search of search.tpe.params alone)
    values: list  # the slice's valid knob values, least diverse first
    min_rate: float  # a value succeeds when at least this share of its seeds pass
    per_slice: int  # the budget: evaluations a slice may ask (seed trainings, for the threshold sampler)
    seeds_each: list[int] = field(default_factory=lambda: [0])  # the seeds of every evaluation (search.success.seeds),
    # shifted on a re-evaluation (not the threshold sampler's: it draws fresh seeds at every evaluation)

    judged_by_candidate: ClassVar[bool] = True  # one m-of-n verdict per candidate, no interval (tables.py); else each
    # seed is a draw of p(K) and the answer is K*_q with its interval
    steerable: ClassVar[bool] = False  # the guide's predictions steer where it probes (guide.py)
    one_at_a_time: ClassVar[bool] = False  # asks where its last results point: one candidate a round
    searches_params: ClassVar[bool] = False  # searches search.tpe.params (may minimise a metric), not the knob alone

    @classmethod
    def for_slice(cls, search: SearchConfig, values: list, params: list) -> Sampler:
        """The sampler of a slice with these knob values and search.tpe.params (those that apply to it)."""
        success = search.success
        return cls(search.knob.key, values, success.min_seeds / len(success.seeds), search.budget.per_slice,
                   success.seeds)

    def optuna_sampler(self) -> optuna.samplers.BaseSampler:
        """What the study is opened with. Never consulted for the knob of a one-knob sampler, which the loop fixes
        at every ask."""
        return optuna.samplers.RandomSampler(seed=0)

    def used(self, trials: list[FrozenTrial]) -> int:
        """The budget asked so far (done, or under way: earlier this round or by another driver)."""
        return sum(t.state in ASKED for t in trials if owners.LOST_TO not in t.user_attrs)

    def evaluations(self, budget: int) -> int:
        return budget

    def budget(self, trials: list[FrozenTrial], extend: int) -> int:
        """What the slice may spend in this run: the config's budget, or `extend` more than it used (--extend)."""
        return max(self.per_slice, self.used(trials) + extend if extend else 0)

    def spent(self, trials: list[FrozenTrial], budget: int) -> bool:
        """The budget is used, or the slice's evaluations keep failing (a candidate that always errors)."""
        live = [t for t in trials if owners.LOST_TO not in t.user_attrs]
        return len(live) >= 3 * self.evaluations(budget) or self.used(trials) >= budget

    def next(self, trials: list[FrozenTrial], budget: int, predicted: dict | None = None) -> dict | None:
        """The params the slice's next evaluation fixes, or None: the slice asks no more (its budget spent, or its
        answer settled). `predicted`: the verdicts the guide predicts for some knob values (a steerable sampler's)."""
        if self.spent(trials, budget):
            return None
        value = self.choose(trials, budget, predicted or {})
        return None if value is None else {self.key: value}

    def choose(self, trials: list[FrozenTrial], budget: int, predicted: dict):
        """The knob value to evaluate next, or None when there is none."""
        raise NotImplementedError

    def finished(self, trials: list[FrozenTrial], fit: estimate.Estimate) -> bool:
        """No evaluation in flight and nothing more to ask within the config's budget (--extend raises the budget of
        the run that gives it, not this verdict)."""
        return (not any(t.state == TrialState.RUNNING for t in trials)
                and self.next(trials, self.budget(trials, 0)) is None)

    def seeds(self, trials: list[FrozenTrial], trial: optuna.Trial, first: int, budget: int) -> list[int]:
        """The seeds of a new evaluation, counted from `first` (the config's seed): block k of the seed list,
        shifted past every earlier block of the candidate. Earlier evaluations are counted by trial number, so a
        trial asked at the same moment by another driver never shifts this one's seeds."""
        stride = max(self.seeds_each) + 1
        repeats = sum(t.params == trial.params for t in trials if t.number < trial.number and t.state in ASKED)
        return [first + seed + repeats * stride for seed in self.seeds_each]


@dataclass
class Exhaustive(Sampler):
    """The reference: every value once, smallest first. (Optuna's GridSampler calls study.stop() when exhausted,
    which only works inside study.optimize, not in an ask/tell loop.)"""

    def choose(self, trials, budget, predicted):
        taken = {t.params[self.key] for t in trials if t.state in ASKED and self.key in t.params}
        return next((v for v in self.values if v not in taken), None)


@dataclass
class Bisection(Sampler):
    """The m-of-n bisection (module docstring; bisection.next_value)."""

    steerable: ClassVar[bool] = True
    one_at_a_time: ClassVar[bool] = True

    def choose(self, trials, budget, predicted):
        return bisection.next_value(self.values, bisection.evidence(trials, self.key), self.min_rate,
                                    predicted=predicted)


@dataclass
class Tpe(Sampler):
    seed: int = 0  # search.tpe.seed
    several: bool = False  # search.tpe.params: several dimensions (a distribution's parameters) modelled jointly
    per_round: int = 1

    searches_params: ClassVar[bool] = True

    @classmethod
    def for_slice(cls, search: SearchConfig, values: list, params: list) -> Tpe:
        return cls(**vars(Sampler.for_slice(search, values, params)), seed=search.tpe.seed, several=bool(params),
                   per_round=search.per_round)

    def optuna_sampler(self) -> optuna.samplers.BaseSampler:
        # Settings pinned (Optuna 5 changed its defaults): success enters as a constraint, set per trial; several
        # candidates a round need the liar.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=self.seed, multivariate=self.several,
                                              constant_liar=self.per_round > 1,
                                              n_startup_trials=TPE_STARTUP if self.several
                                              else min(5, len(self.values)))

    def next(self, trials, budget, predicted=None):
        """{} while the budget lasts: TPE chooses every param inside study.ask, from the trials it sees there."""
        return None if self.spent(trials, budget) else {}


@dataclass
class Threshold(Sampler):
    """K*_q with an interval (module docstring): `min_rate` is q; a slice's seeds are seed, seed + 1, ... in the
    order asked, `batch` per evaluation, up to its budget of seed trainings."""

    confidence: float = 0.95
    batch: int = 3
    resolution: float = 1.0

    judged_by_candidate: ClassVar[bool] = False
    steerable: ClassVar[bool] = True
    one_at_a_time: ClassVar[bool] = True

    @classmethod
    def for_slice(cls, search: SearchConfig, values: list, params: list) -> Threshold:
        success = search.success
        return cls(search.knob.key, values, success.rate, search.budget.trainings, confidence=success.confidence,
                   batch=search.threshold.batch, resolution=search.threshold.resolution)

    def used(self, trials):
        return bisection.seeds_asked(trials)

    def evaluations(self, budget):
        return math.ceil(budget / self.batch)

    def fit(self, trials: list[FrozenTrial]) -> estimate.Estimate:
        return estimate.fit(*bisection.counts(self.values, bisection.evidence(trials, self.key)), self.min_rate,
                            self.confidence)

    def finished(self, trials, fit):
        return not any(t.state == TrialState.RUNNING for t in trials) and (
            fit.settled(self.resolution) or self.spent(trials, self.per_slice))

    def choose(self, trials, budget, predicted):
        passed, trained = bisection.counts(self.values, bisection.evidence(trials, self.key))
        evaluations = sum(1 for t in trials if t.state in ASKED and "seed_list" in t.user_attrs)
        guide = {v: verdict for v, verdict in predicted.items() if v in self.values}
        pseudo = (np.array([float(guide.get(v) is True) for v in self.values]),
                  np.array([float(v in guide) for v in self.values])) if guide else None
        index = self.decide(passed, trained, evaluations, budget - self.used(trials), pseudo)
        return None if index is None else self.values[index]

    def decide(self, passed, trained, evaluations: int, left: int, pseudo=None) -> int | None:
        """The index of the value the next `batch` seeds go to, or None: the budget is spent or the interval
        settled. What choose() asks of the study's counts, and what bench/calibration.py drives directly."""
        if left <= 0 or estimate.fit(passed, trained, self.min_rate, self.confidence).settled(self.resolution):
            return None
        return allocation.choose(allocation.Slice(passed, trained, evaluations, left), min(self.batch, left),
                                 self.min_rate, self.confidence, pseudo)

    def seeds(self, trials, trial, first, budget):
        """The slice's next `batch` seeds (fewer if the budget is nearly spent): no seed number is trained at two
        knob values, so the values' outcomes are independent draws (a seed that stalls at one width would otherwise
        tend to stall at the next, its data drawn from the same stream)."""
        earlier = [t for t in trials if t.number < trial.number and t.state in ASKED]
        taken = sum(len(t.user_attrs.get("seed_list", ())) for t in earlier)
        count = min(self.batch, budget - self.used([t for t in trials if t.number != trial.number]))
        return [first + taken + i for i in range(max(0, count))]


KINDS: dict[str, type[Sampler]] = {"threshold": Threshold, "bisection": Bisection, "exhaustive": Exhaustive,
                                   "tpe": Tpe}


def kind(search: SearchConfig) -> type[Sampler]:
    """The sampler class search.sampler names (validated: config.py)."""
    return KINDS[search.sampler]


def for_slice(search: SearchConfig, values: list, params: list = ()) -> Sampler:
    """The sampler of a slice with these knob values and search.tpe.params (those that apply to it)."""
    return kind(search).for_slice(search, values, list(params))
