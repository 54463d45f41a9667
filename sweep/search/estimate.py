"""A slice's success curve and its answer: K*_q, the smallest knob value at which a seed passes with probability at
least q (search.success.rate), with an interval at search.success.confidence.

A seed trained at the i-th knob value (in increasing diversity) passes with an unknown probability p_i. K*_q is
defined by one crossing: p_i < q for every value below it, p_i >= q at it and above (a monotone p has one, and so does
a curve that stalls on a plateau below 1; one that dips below q above K* breaks the assumption). The model assumes
that and nothing more:

    K* ~ uniform over the m values and "none" (p < q at every value tried, index m);
    given K* = k, each p_i is uniform on its side of q, [0, q) for i < k and [q, 1] for i >= k, independently;
    each seed at value i passes with probability p_i.

A value with s seeds passed and f failed then contributes, with the Beta function B = B(s + 1, f + 1) common to both
sides (so it cancels):
    below q:  P(s, f | p_i < q)  ∝ I_q(s + 1, f + 1) / q
    above q:  P(s, f | p_i >= q) ∝ I_(1-q)(f + 1, s + 1) / (1 - q)
(I the regularised incomplete beta function), and log P(data | K* = k) is a prefix sum of the first plus a suffix sum
of the second. The exact posterior over K* costs a few microseconds, so allocation.py can refit it for every outcome
it weighs. The interval is the equal-tailed credible set of K* (at most (1 - confidence) / 2 of the posterior below
`low`, at most that above `high`); its coverage over repeated experiments is measured, not assumed
(bench/calibration.py, docs/SCIENCE.md).

Why not a parametric psychometric function (psignifit's sigmoid with guess and lapse rates): near a diversity
threshold seeds stall, plateau or learn another solution, and the curve need not be a sigmoid in K or in any axis we
could name; the one-crossing model needs no axis and no shape. Why not isotonic regression with binomial intervals:
the answer is a knob value, and its interval should be one statement about it, not m intervals about p.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

TINY = 1e-300  # log(0) guard: a side that the data rule out has likelihood ~0, not exactly 0


@dataclass
class Estimate:
    """The posterior of one slice: over K* (index m = none of the values), and of p at each value."""

    posterior: np.ndarray  # (m + 1,) P(K* = index | data); the last entry: no value tried reaches q
    star: int  # posterior median of K*; m: none
    low: int  # interval: the smallest index not ruled out below (m: every value tried is ruled out)
    high: int  # interval: the largest index not ruled out above (m: "none" is not ruled out, an open interval)

    def width(self) -> int:
        """high - low in knob steps, "none" counting as one step past the widest value."""
        return self.high - self.low

    def settled(self, resolution: float) -> bool:
        """The interval is as narrow as `resolution` knob steps. One that reaches past the widest value is settled
        only once it lies wholly past it (no value reaches q): "K* is the widest value or none" is still open,
        and with a single value it is where every slice starts."""
        none = len(self.posterior) - 1
        return self.low == none or (self.high < none and self.width() <= resolution)

    def p_at_least(self) -> np.ndarray:
        """(m,) P(p_i >= q | data) = P(K* <= i | data)."""
        return np.cumsum(self.posterior)[:-1]


def log_sides(passed, failed, q: float) -> tuple[np.ndarray, np.ndarray]:
    """Each value's log likelihood below q and above q (up to the common Beta function); any array shape."""
    passed, failed = np.asarray(passed, float), np.asarray(failed, float)
    below = np.log(np.maximum(special.betainc(passed + 1.0, failed + 1.0, q), TINY)) - math.log(q)
    above = np.log(np.maximum(special.betainc(failed + 1.0, passed + 1.0, 1.0 - q), TINY)) - math.log(1.0 - q)
    return below, above


def from_sides(below: np.ndarray, above: np.ndarray) -> np.ndarray:
    """(..., m + 1) P(K* = k | data) for k = 0 .. m (m: none), under a uniform prior, from (..., m) log likelihoods:
    log P(data | K* = k) = sum_{i<k} below_i + sum_{i>=k} above_i."""
    zero = np.zeros(below.shape[:-1] + (1,))
    prefix = np.concatenate([zero, np.cumsum(below, axis=-1)], axis=-1)
    suffix = np.concatenate([np.flip(np.cumsum(np.flip(above, -1), axis=-1), -1), zero], axis=-1)
    log_like = prefix + suffix
    w = np.exp(log_like - log_like.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1, keepdims=True)


def posterior(passed, trained, q: float) -> np.ndarray:
    """(m + 1,) P(K* = k | data) from seeds passed / trained at each value."""
    passed, trained = np.asarray(passed, float), np.asarray(trained, float)
    return from_sides(*log_sides(passed, trained - passed, q))


def bounds(w: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(median, low, high) indices of posteriors (..., m + 1): P(K* < low) <= (1 - confidence) / 2 and
    P(K* > high) <= (1 - confidence) / 2, with a little slack against rounding in the sums."""
    tail = (1.0 - confidence) / 2.0
    cdf = np.cumsum(w, axis=-1)
    first = lambda level: np.minimum((cdf < level).sum(axis=-1), w.shape[-1] - 1)
    return first(0.5), first(tail + 1e-12), first(1.0 - tail - 1e-12)


def entropy(w: np.ndarray) -> np.ndarray:
    return -(w * np.log(np.maximum(w, TINY))).sum(axis=-1)


def fit(passed, trained, q: float, confidence: float) -> Estimate:
    """The estimate from seeds passed / trained at each knob value (in increasing diversity; zeros where none)."""
    w = posterior(passed, trained, q)
    star, low, high = bounds(w, confidence)
    return Estimate(posterior=w, star=int(star), low=int(low), high=int(high))


@dataclass
class CurvePoint:
    """p at one knob value: the posterior mean and equal-tailed credible interval, and the raw counts."""

    trained: int
    passed: int
    p: float
    p_low: float
    p_high: float


def curve(passed, trained, q: float, confidence: float, grid: int = 2001) -> list[CurvePoint]:
    """p at each value under the model: a mixture of its two truncated Beta posteriors, weighted by P(K* <= i)."""
    passed, trained = np.asarray(passed, float), np.asarray(trained, float)
    failed = trained - passed
    at_least = fit(passed, trained, q, confidence).p_at_least()
    x = np.linspace(0.0, 1.0, grid)
    tail = (1.0 - confidence) / 2.0
    points = []
    for s, f, above in zip(passed, failed, at_least):
        whole = special.betainc(s + 1, f + 1, x)  # (grid,) the untruncated posterior's CDF
        at_q = special.betainc(s + 1, f + 1, q)
        cdf_below = np.minimum(whole, at_q) / max(at_q, TINY)
        cdf_above = np.maximum(whole - at_q, 0.0) / max(1.0 - at_q, TINY)
        cdf = (1.0 - above) * cdf_below + above * cdf_above
        density = np.diff(cdf)
        mean = float((density * (x[1:] + x[:-1]) / 2).sum())
        points.append(CurvePoint(int(s + f), int(s), mean, float(np.interp(tail, cdf, x)),
                                 float(np.interp(1.0 - tail, cdf, x))))
    return points


def seeds_to_decide(q: float, confidence: float, limit: int = 100_000) -> int:
    """The fewest seeds at one value that can rule it in (all passing) or out (all failing) on their own, as the
    model decides with nothing else tried: a budget below this cannot close the interval on either side."""
    tail = (1.0 - confidence) / 2.0
    for n in range(1, limit):
        all_pass = posterior([n], [n], q)  # [P(K* = that value), P(none)]
        all_fail = posterior([0], [n], q)
        if all_pass[1] <= tail and all_fail[0] <= tail:
            return n
    return limit
