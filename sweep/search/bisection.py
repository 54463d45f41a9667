"""Samplers of one knob for the minimal-diversity search, and the evidence they read from a study.

- ThresholdSampler (the default, `search.sampler: threshold`): the next value is where `search.batch` more seeds are
  expected to leave the least uncertainty about K*_q (allocation.py, on estimate.py's model); a slice is done when its
  interval is as narrow as `search.resolution` or its `search.budget.trainings` are spent.
- BisectionSampler (`search.sampler: bisection`, the protocol before intervals): success is taken as monotone in
  diversity and each value gets a verdict (m of n seeds must succeed, pooled as a rate); it bisects the ordered knob
  values, and re-checks the boundary with fresh seeds before it stops. With m = n that is the all-pass rule.
- ExhaustiveSampler (`search.sampler: exhaustive`, `grid` before): every value once, the reference.
Each one's next value is a pure function of the study's completed trials (and, with search.guide, of the verdicts
other slices' earlier rounds imply), so a resumed study asks exactly what an uninterrupted one would have asked.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from sweep.search import allocation, estimate


@dataclass
class Evidence:
    """Pooled seed results of every completed evaluation of one knob value."""

    successes: int = 0
    seeds: int = 0  # seeds the evaluations asked for (bisection's m of n counts a seed stopped undecided as failing)
    evaluations: int = 0
    judged: int = 0  # seeds with a verdict of their own: the success curve is fitted to these only

    def succeeds(self, min_rate: float) -> bool:
        return self.successes >= min_rate * self.seeds


def evidence(trials: list[FrozenTrial], key: str) -> dict[int, Evidence]:
    """knob value -> pooled evidence over the completed trials (their user attrs successes and seeds)."""
    pooled: dict[int, Evidence] = {}
    for trial in trials:
        if trial.state == TrialState.COMPLETE and key in trial.params:
            e = pooled.setdefault(trial.params[key], Evidence())
            e.successes += trial.user_attrs["successes"]
            e.seeds += trial.user_attrs["seeds"]
            e.evaluations += 1
            e.judged += trial.user_attrs.get("judged", trial.user_attrs["seeds"])
    return pooled


def counts(values: list, pooled: dict) -> tuple[np.ndarray, np.ndarray]:
    """(passed, trained) per value, in the values' order: the success curve's data."""
    passed = np.array([pooled[v].successes if v in pooled else 0 for v in values], float)
    trained = np.array([pooled[v].judged if v in pooled else 0 for v in values], float)
    return passed, trained


def seeds_asked(trials: list[FrozenTrial]) -> int:
    """Seed trainings asked so far (completed, or running: asked earlier this round or by another driver)."""
    return sum(len(t.user_attrs.get("seed_list", ())) for t in trials
               if t.state in (TrialState.COMPLETE, TrialState.RUNNING))


def boundary(values: list[int], verdicts: dict[int, bool]) -> tuple[int, int] | None:
    """(lo, hi) indices: hi the smallest evaluated success with no evaluated failure above it, lo the largest
    evaluated failure below hi (-1 if none). None while no such success exists."""
    hi = None
    for i in reversed(range(len(values))):
        verdict = verdicts.get(values[i])
        if verdict is False:
            break
        if verdict:
            hi = i
    if hi is None:
        return None
    lo = max((i for i in range(hi) if verdicts.get(values[i]) is False), default=-1)
    return lo, hi


def next_value(values: list[int], pooled: dict[int, Evidence], min_rate: float, rechecks: int = 1,
               predicted: dict[int, bool] | None = None) -> int | None:
    """The value the threshold search evaluates next, or None when it is done.

    Bisection between the largest failure below the smallest consistent success (lo) and that success (hi); before
    any success, hi is a virtual success just past the top, so the top is evaluated only if everything below fails.
    `predicted` (verdicts other slices' evidence implies, see search.guide) narrows where inside (lo, hi) to probe,
    never what counts: the answer rests on this slice's own evaluations only.
    At convergence the success side is re-checked with fresh seeds (a lucky success would understate the diversity
    needed), the failure side only when its seeds disagreed.
    """
    verdicts = {v: e.succeeds(min_rate) for v, e in pooled.items()}
    span = boundary(values, verdicts)
    if span is None:
        lo = max((i for i, v in enumerate(values) if verdicts.get(v) is False), default=-1)
        span = (lo, len(values))
    lo, hi = span
    if hi - lo > 1:
        return values[_probe(values, lo, hi, predicted or {})]
    if hi < len(values) and pooled[values[hi]].evaluations <= rechecks:
        return values[hi]
    if lo >= 0:
        e = pooled[values[lo]]
        if 0 < e.successes < e.seeds and e.evaluations <= rechecks:
            return values[lo]
    return None


def _probe(values: list[int], lo: int, hi: int, predicted: dict[int, bool]) -> int:
    """An index strictly inside (lo, hi): the middle of the interval the predictions leave open, or, when they pin
    the boundary, its predicted success side first (then its failure side)."""
    inner = range(lo + 1, hi)
    p_lo = max((i for i in inner if predicted.get(values[i]) is False), default=lo)
    p_hi = min((i for i in inner if predicted.get(values[i]) is True), default=hi)
    if p_hi <= p_lo:  # predictions that contradict each other: plain bisection
        p_lo, p_hi = lo, hi
    if p_hi - p_lo > 1:
        return (p_lo + p_hi) // 2
    return p_hi if p_hi < hi else p_lo


def minimal_value(values: list[int], pooled: dict[int, Evidence], min_rate: float) -> int | None:
    """diversity*: the smallest evaluated value that succeeds with every evaluated larger value succeeding."""
    span = boundary(values, {v: e.succeeds(min_rate) for v, e in pooled.items()})
    return values[span[1]] if span else None


class NothingLeft(RuntimeError):
    """The sampler has no value left to ask: another driver's result settled the study between this driver's
    wants_more and its ask. Carries the number of the trial study.ask had already created, for the caller to fail."""

    def __init__(self, sampler: str, number: int):
        super().__init__(f"{sampler}: nothing left to evaluate (trial {number})")
        self.number = number


class _OneKnobSampler(BaseSampler):
    """A sampler that decides one integer knob from the study's completed trials alone (no other parameters)."""

    def __init__(self, key: str, values: list[int], min_rate: float):
        self.key, self.values, self.min_rate = key, values, min_rate

    def next(self, study: optuna.Study) -> int | None:
        raise NotImplementedError

    def infer_relative_search_space(self, study, trial) -> dict[str, BaseDistribution]:
        return {}

    def sample_relative(self, study, trial, search_space) -> dict:
        return {}

    def sample_independent(self, study, trial, param_name: str, param_distribution: BaseDistribution):
        if param_name != self.key:
            raise RuntimeError(f"{type(self).__name__} decides {self.key} alone, not {param_name}")
        value = self.next(study)
        if value is None:
            raise NothingLeft(type(self).__name__, trial.number)
        return value


class ExhaustiveSampler(_OneKnobSampler):
    """The reference: every value once, smallest first. (Optuna's GridSampler calls study.stop() when exhausted,
    which only works inside study.optimize, not in an ask/tell loop.)"""

    def next(self, study: optuna.Study) -> int | None:
        trials = study.get_trials(deepcopy=False)
        taken = set(evidence(trials, self.key)) | {t.params[self.key] for t in trials if t.state == TrialState.RUNNING
                                                   and self.key in t.params}  # asked earlier in this round
        return next((v for v in self.values if v not in taken), None)


class BisectionSampler(_OneKnobSampler):
    """Bisection over one ordered integer knob (see module docstring). `predicted` is set by the search loop before
    each round when a guide transfers other slices' verdicts (search.guide)."""

    predicted: dict[int, bool] | None = None

    def next(self, study: optuna.Study) -> int | None:
        pooled = evidence(study.get_trials(deepcopy=False), self.key)
        return next_value(self.values, pooled, self.min_rate, predicted=self.predicted)


class ThresholdSampler(_OneKnobSampler):
    """K*_q with an interval (see module docstring): `rate` q, `confidence`, `batch` seeds per evaluation,
    `resolution` in knob steps, `budget` seed trainings. `predicted` as BisectionSampler's (search.guide): it steers
    where to probe, never the answer. The search loop sets `budget` (raised by --extend)."""

    predicted: dict | None = None

    def __init__(self, key: str, values: list, rate: float, confidence: float, batch: int, resolution: float,
                 budget: int):
        super().__init__(key, values, rate)
        self.confidence, self.batch, self.resolution, self.budget = confidence, batch, resolution, budget

    def fit(self, trials: list[FrozenTrial]) -> estimate.Estimate:
        return self.fit_counts(*counts(self.values, evidence(trials, self.key)))

    def fit_counts(self, passed, trained) -> estimate.Estimate:
        return estimate.fit(passed, trained, self.min_rate, self.confidence)

    def seeds_left(self, trials: list[FrozenTrial]) -> int:
        return max(0, self.budget - seeds_asked(trials))

    def next(self, study: optuna.Study) -> int | None:
        trials = study.get_trials(deepcopy=False)
        passed, trained = counts(self.values, evidence(trials, self.key))
        evaluations = sum(1 for t in trials if t.state in (TrialState.COMPLETE, TrialState.RUNNING)
                          and "seed_list" in t.user_attrs)
        guide = {v: verdict for v, verdict in (self.predicted or {}).items() if v in self.values}
        pseudo = (np.array([float(guide.get(v) is True) for v in self.values]),
                  np.array([float(v in guide) for v in self.values])) if guide else None
        index = self.decide(passed, trained, evaluations, self.seeds_left(trials), pseudo)
        return None if index is None else self.values[index]

    def decide(self, passed, trained, evaluations: int, left: int, pseudo=None) -> int | None:
        """The index of the value the next `batch` seeds go to, or None: the budget is spent or the interval settled.
        What next() asks of the study's counts, and what bench/calibration.py drives directly."""
        if left <= 0 or self.fit_counts(passed, trained).settled(self.resolution):
            return None
        return allocation.choose(allocation.Slice(passed, trained, evaluations, left), min(self.batch, left),
                                 self.min_rate, self.confidence, pseudo)
