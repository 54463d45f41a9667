"""Samplers for the minimal-diversity search, and the verdict logic they share with the reports.

Success is (nearly) monotone in diversity: if a width K generalizes, so does every larger K. The threshold sampler
bisects the ordered knob values under that assumption, pooling the seeds of every evaluation of a value (m of n
seeds must succeed, pooled as a rate), and re-checks the boundary with fresh seeds before it stops.
Its next value is a pure function of the study's completed trials (and, with search.guide, of the verdicts other
slices' earlier rounds imply), so a resumed study asks exactly what an uninterrupted one would have asked.
"""
from __future__ import annotations

from dataclasses import dataclass

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState


@dataclass
class Evidence:
    """Pooled seed results of every completed evaluation of one knob value."""

    successes: int = 0
    seeds: int = 0
    evaluations: int = 0

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
    return pooled


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
        value = self.next(study)
        if param_name != self.key or value is None:
            raise RuntimeError(f"{type(self).__name__} asked for {param_name} with nothing left to evaluate")
        return value


class ExhaustiveSampler(_OneKnobSampler):
    """The reference: every value once, smallest first. (Optuna's GridSampler calls study.stop() when exhausted,
    which only works inside study.optimize, not in an ask/tell loop.)"""

    def next(self, study: optuna.Study) -> int | None:
        trials = study.get_trials(deepcopy=False)
        taken = set(evidence(trials, self.key)) | {t.params[self.key] for t in trials if t.state == TrialState.RUNNING
                                                   and self.key in t.params}  # asked earlier in this round
        return next((v for v in self.values if v not in taken), None)


class ThresholdSampler(_OneKnobSampler):
    """Bisection over one ordered integer knob (see module docstring). `predicted` is set by the search loop before
    each round when a guide transfers other slices' verdicts (search.guide)."""

    predicted: dict[int, bool] | None = None

    def next(self, study: optuna.Study) -> int | None:
        pooled = evidence(study.get_trials(deepcopy=False), self.key)
        return next_value(self.values, pooled, self.min_rate, predicted=self.predicted)
