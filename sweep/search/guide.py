"""Verdicts carried between slices of a threshold search through a diversity measure of the config (search.guide).

For trigger copy, Theorem 5 (SPEC §1) says the one-step model's OOD success is decided by the max-sum ratio R, up to
constants that depend on N_trg but not on l_min. So a width that generalized at l_min = 5 with R = 0.3 predicts that, at
l_min = 7, every width with R <= 0.3 generalizes too, and a failure at R = 0.35 predicts failures at R >= 0.35. The
threshold sampler uses such predictions only to choose where to probe: each slice's answer still rests on its own
evaluations, so a wrong prediction costs evaluations, never correctness. (The threshold sampler takes them as
pseudo-observations that only shape where it expects outcomes: allocation.py.)
"""
from __future__ import annotations

from dataclasses import dataclass, field

from sweep.search import samplers
from trainables.errors import ConfigError
from trainables.tasks import task_of


@dataclass
class GuideConfig:
    """Which config-determined measure carries verdicts, and across which slice keys (the threshold sampler's)."""

    metric: str | None = None  # a data/* measure; none (search.guide.metric=) = every slice on its own
    across: list[str] = field(default_factory=list)  # slice keys; slices differing elsewhere never share


def group(point: dict, guide: GuideConfig) -> tuple:
    """Slices in one group share their verdicts: equal on every slice key not in guide.across."""
    return tuple((k, v) for k, v in point.items() if k not in guide.across)


def predictions(values: list[int], measures: dict[int, float], others: list[tuple[dict, dict]],
                min_rate: float) -> dict[int, bool]:
    """Predicted verdicts for this slice's knob values from other slices' pooled evidence.

    others: (pooled evidence by knob value, measure by knob value) of each other slice in the group. Measures are
    oriented so that they grow with this slice's knob (more diverse): a success elsewhere at d predicts success here
    for d' >= d, a failure at d predicts failure for d' <= d.
    """
    sign = 1.0 if measures[values[-1]] >= measures[values[0]] else -1.0
    succeeded, failed = [], []
    for pooled, other_measures in others:
        for value, evidence in pooled.items():
            (succeeded if evidence.succeeds(min_rate) else failed).append(sign * other_measures[value])
    least_diverse_success = min(succeeded, default=float("inf"))
    most_diverse_failure = max(failed, default=float("-inf"))
    result = {}
    for value in values:
        d = sign * measures[value]
        success, failure = d >= least_diverse_success, d <= most_diverse_failure
        if success != failure:  # both: contradicting evidence, no prediction
            result[value] = success
    return result


def active(search) -> bool:
    """Only steerable samplers are steered (threshold, bisection); tpe and exhaustive ignore the guide (so
    `search.sampler=exhaustive` runs a guided config's exhaustive reference as it is)."""
    return bool(search.guide.metric) and samplers.kind(search).steerable


def check(guide: GuideConfig, slice_keys: list[str], base) -> None:
    """The metric must be a diversity measure the task knows before training; `across` must name slice keys."""
    if not guide.metric:
        return
    measures = task_of(base).diversity(base.task)
    if guide.metric not in measures:
        raise ConfigError("search.guide.metric", f"must be one of {', '.join(measures)} (known before training)")
    if not guide.across or not set(guide.across) <= set(slice_keys):
        raise ConfigError("search.guide.across", f"must name one or more slice keys ({', '.join(slice_keys)}); "
                                                 "search.guide.metric= (empty) turns the guide off")
