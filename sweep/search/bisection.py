"""The evidence a slice's study holds (its seeds' results pooled per knob value), and the bisection over it that
the bisection sampler (samplers.py) asks: success taken as monotone in diversity, each value a verdict (m of n seeds
must succeed, pooled as a rate), the boundary re-checked with fresh seeds before it stops. A pure function of the
study's completed trials (and of the guide's predictions), so a resumed study asks what an uninterrupted one would."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from optuna.trial import FrozenTrial, TrialState


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


def boundary(values: list[int], verdicts: dict[int, bool]) -> tuple[int, int]:
    """(lo, hi) indices: hi the smallest evaluated success with no evaluated failure above it (len(values) while no
    such success exists: a virtual success just past the top), lo the largest evaluated failure below hi (-1 if
    none)."""
    hi = len(values)
    for i in reversed(range(len(values))):
        verdict = verdicts.get(values[i])
        if verdict is False:
            break
        if verdict:
            hi = i
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
    lo, hi = boundary(values, {v: e.succeeds(min_rate) for v, e in pooled.items()})
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
    _, hi = boundary(values, {v: e.succeeds(min_rate) for v, e in pooled.items()})
    return values[hi] if hi < len(values) else None
