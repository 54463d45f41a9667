"""Where a slice's next seeds go.

The interval (estimate.py) closes only where seeds show p clearly above q (its high end) and clearly below q (its low
end), so seeds near K* itself, where p is about q, decide neither end. Evaluations take turns:

1. the high end's plan: among the values the rates put at or above q (isotonic, each value's rate shrunk toward 1/2,
   interpolated between tried values), the least diverse one whose expected count would show p >= q within half the
   seeds left (the closest to K* that can decide), or, if none can, the one that needs the fewest; a tried value
   beyond it that has not shown p >= q yet comes first, since the high end needs every tried value above it to show
   it (closed testing);
2. the low end's plan, the same below q;
3. the value where `batch` more seeds are expected to leave the least uncertainty about where p crosses q, looking one
   batch ahead; also whenever a plan has nothing to propose (no value on its side of q yet).
Before the turns: while every seed failed at the widest tried value below q and passed at the narrowest one at or
above it, with untried values between them, the look-ahead probes that gap (bisection): on a sharp transition
topping up either side first spends seeds that a probe inside the gap would have placed better.
While the interval is open past the widest value, the widest value was never tried and no tried value's rate reaches
q, the widest value is tried first: it decides "none" (an interval that keeps "none" for want of a probe there is
honest but useless).

Step 3 is the one-step look-ahead of level-set estimation (Letham et al., AISTATS 2022) and of probabilistic
bisection, which queries the posterior median (Waeber, Frazier & Henderson 2013), on a belief model: K* uniform over
the values and "none", and each p uniform on its side of q, independently (the posterior the interval used before
2026-11-27). For each value, the batch's outcomes (0 .. batch passing) are weighed by their predictive probability
and the posterior each would leave is computed exactly; the value with the smallest expected entropy wins, ties to the
smallest expected credible width. The belief only steers: the answer is the tests'.

Other slices' verdicts (search.guide) enter the belief as pseudo-observations (one seed per value, passing where they
predict success), in its predictive probabilities and its look-ahead alike, so the first probes go where the other
slices put the boundary; they never enter the plans or the tests.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, special

from sweep.search import estimate

TINY = 1e-300  # log(0) guard: a side that the data rule out has likelihood ~0, not exactly 0


@dataclass
class Slice:
    """What the allocation reads of one slice: seeds passed / trained at each knob value, in increasing diversity,
    how many evaluations it has had (whose turn: steps 1-3 of the module docstring) and seed trainings left."""

    passed: np.ndarray  # (m,)
    trained: np.ndarray  # (m,)
    evaluations: int
    left: int


def choose(data: Slice, batch: int, q: float, confidence: float, guide: tuple | None = None) -> int:
    """The index of the knob value to train `batch` more seeds at. `guide`: (passed, trained) pseudo-counts from
    other slices' verdicts (search.guide), for the belief only."""
    passed, trained = np.asarray(data.passed, float), np.asarray(data.trained, float)
    m = len(trained)
    fit = estimate.fit(passed, trained, q, confidence)
    tried, rate = estimate.rates(passed, trained)
    if fit.high == m and len(tried) and not trained[-1] and (rate < q).all():
        return m - 1  # nothing tried reaches q yet: the widest value decides "none"
    belief_passed, belief_trained = (passed + guide[0], trained + guide[1]) if guide else (passed, trained)
    gap = unprobed_gap(passed, trained, q)
    if gap is not None:  # a clean fail and a clean pass with untried values between: bisect before topping up
        return look_ahead(belief_passed, belief_trained, batch, q, confidence, among=gap)
    turn = data.evaluations % 3
    if turn < 2 and len(tried):
        end = plan(passed, trained, q, confidence, fit, max(data.left, batch), high_end=turn == 0)
        if end is not None:
            return end
    return look_ahead(belief_passed, belief_trained, batch, q, confidence)


def unprobed_gap(passed, trained, q: float) -> np.ndarray | None:
    """The untried values between the widest tried value whose rate is below q and the narrowest one at or above it,
    when every seed failed at the first and passed at the second: there the curve may be a step anywhere in the gap,
    and topping up either side (the plans) decides nothing a probe inside the gap would not also tell. None when the
    two are neighbours or a side is mixed (the plans' turn)."""
    tried, rate = estimate.rates(passed, trained)
    below, above = tried[rate < q], tried[rate >= q]
    if not len(below) or not len(above):
        return None
    a, b = int(below.max()), int(above.min())
    return None if b - a < 2 or passed[a] > 0 or passed[b] < trained[b] else np.arange(a + 1, b)


def plan(passed, trained, q: float, confidence: float, fit: estimate.Estimate, left: int, high_end: bool) -> int | None:
    """The value one end's seeds go to (module docstring, steps 1-2), or None when the rates put no value between
    that end and the estimated crossing on its side of q."""
    m = len(trained)
    tests = estimate.tests(passed, trained, q, confidence)
    tried = tests.tried
    if not len(tried):
        return None
    # each tried value's rate shrunk toward 1/2 (a value's first seeds are not certainty), made monotone, interpolated
    shrunk = (passed[tried] + 1) / (trained[tried] + 2)
    rate = optimize.isotonic_regression(shrunk, weights=trained[tried] + 2).x
    smooth = np.interp(np.arange(m), tried, rate)  # (m,) monotone
    side = smooth >= q if high_end else smooth < q
    crossing = int(np.argmax(smooth >= q)) if (smooth >= q).any() else m
    inside = np.arange(m)
    inside = inside[(inside >= crossing) & (inside < fit.high)] if high_end else \
        inside[(inside > fit.excluded) & (inside < crossing)]
    inside = inside[side[inside]]
    if not len(inside):
        return None
    # a tried value beyond the target that has not shown its side blocks the end (closed testing): nearest the end first
    shown = dict(zip(tried.tolist(), (tests.above if high_end else tests.below).tolist()))
    open_tried = [int(i) for i in inside if trained[i] and not shown[int(i)]]
    # more seeds each needs to show its side on its own (its rate rounded to 2 decimals: one cached answer serves many)
    rounded = [round(float(smooth[i]), 2) for i in inside]
    need = np.array([estimate.fewest_seeds(p, q, confidence, p >= q, 1000) - trained[i]
                     for p, i in zip(rounded, inside)])
    feasible = inside[need <= left / 2]
    target = (feasible.min() if high_end else feasible.max()) if len(feasible) else inside[np.argmin(need)]
    blocking = [i for i in open_tried if (i > target if high_end else i < target)]
    return (max(blocking) if high_end else min(blocking)) if blocking else int(target)


def log_sides(passed, failed, q: float) -> tuple[np.ndarray, np.ndarray]:
    """The belief: each value's log likelihood with p below q and with p above q (p uniform on its side, up to the
    Beta function common to both):  below I_q(s + 1, f + 1) / q,  above I_(1-q)(f + 1, s + 1) / (1 - q)."""
    passed, failed = np.asarray(passed, float), np.asarray(failed, float)
    below = np.log(np.maximum(special.betainc(passed + 1.0, failed + 1.0, q), TINY)) - math.log(q)
    above = np.log(np.maximum(special.betainc(failed + 1.0, passed + 1.0, 1.0 - q), TINY)) - math.log(1.0 - q)
    return below, above


def from_sides(below: np.ndarray, above: np.ndarray) -> np.ndarray:
    """(..., m + 1) the belief's P(K* = k | data) for k = 0 .. m (m: none), K* uniform a priori, from (..., m) log
    likelihoods: log P(data | K* = k) = sum_{i<k} below_i + sum_{i>=k} above_i."""
    zero = np.zeros(below.shape[:-1] + (1,))
    prefix = np.concatenate([zero, np.cumsum(below, axis=-1)], axis=-1)
    suffix = np.concatenate([np.flip(np.cumsum(np.flip(above, -1), axis=-1), -1), zero], axis=-1)
    log_like = prefix + suffix
    w = np.exp(log_like - log_like.max(axis=-1, keepdims=True))
    return w / w.sum(axis=-1, keepdims=True)


def posterior(passed, trained, q: float) -> np.ndarray:
    """(m + 1,) the belief's P(K* = k | data) from seeds passed / trained at each value."""
    passed, trained = np.asarray(passed, float), np.asarray(trained, float)
    return from_sides(*log_sides(passed, trained - passed, q))


def _bounds(w: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) indices of the belief's equal-tailed credible sets of posteriors (..., m + 1)."""
    tail = (1.0 - confidence) / 2.0
    cdf = np.cumsum(w, axis=-1)
    first = lambda level: np.minimum((cdf < level).sum(axis=-1), w.shape[-1] - 1)
    return first(tail + 1e-12), first(1.0 - tail - 1e-12)


def predictive(passed: np.ndarray, trained: np.ndarray, batch: int, q: float) -> np.ndarray:
    """(m, batch + 1) the belief's probability that 0 .. batch of `batch` new seeds at each value pass."""
    s, f = passed[:, None], (trained - passed)[:, None]  # (m, 1)
    at_least = np.cumsum(posterior(passed, trained, q))[:-1, None]  # (m, 1) P(p_i >= q)
    new = np.arange(batch + 1, dtype=float)  # (batch + 1,)
    # Under each side a value's p has a truncated Beta(s + 1, f + 1) posterior; the batch's count is beta-binomial
    # on it: C(b, k) B(s + k + 1, f + b - k + 1) / B(s + 1, f + 1), each Beta restricted to the side.
    log_ratio = (special.gammaln(batch + 1) - special.gammaln(new + 1) - special.gammaln(batch - new + 1)
                 + special.betaln(s + new + 1, f + batch - new + 1) - special.betaln(s + 1, f + 1))
    below = special.betainc(s + new + 1, f + batch - new + 1, q) / np.maximum(special.betainc(s + 1, f + 1, q), TINY)
    above = special.betainc(f + batch - new + 1, s + new + 1, 1 - q) / np.maximum(
        special.betainc(f + 1, s + 1, 1 - q), TINY)
    probs = np.exp(log_ratio) * ((1 - at_least) * below + at_least * above)
    return probs / probs.sum(axis=1, keepdims=True)


def look_ahead(passed, trained, batch: int, q: float, confidence: float, among: np.ndarray | None = None) -> int:
    """The value where `batch` more seeds leave the belief about where p crosses q least uncertain (expected
    entropy), ties to the smallest expected credible width, then the less diverse value; `among`: only these."""
    passed, trained = np.asarray(passed, float), np.asarray(trained, float)
    m, outcomes = len(passed), np.arange(batch + 1, dtype=float)
    probed = candidates(passed, trained, q)  # (c,); an untried run's ends and middle are always among them
    if among is not None:
        probed = np.intersect1d(probed, among)
    below, above = log_sides(passed, trained - passed, q)  # (m,)
    # every look-ahead at once: value probed[r] with k of `batch` more seeds passed, the other values as they are
    after_below, after_above = log_sides(passed[probed, None] + outcomes,
                                         (trained - passed)[probed, None] + batch - outcomes, q)  # (c, batch + 1)
    rows = np.arange(len(probed))
    sides_below = np.broadcast_to(below, (len(probed), batch + 1, m)).copy()  # (probe, outcome, value)
    sides_above = np.broadcast_to(above, (len(probed), batch + 1, m)).copy()
    sides_below[rows, :, probed] = after_below
    sides_above[rows, :, probed] = after_above
    after = from_sides(sides_below, sides_above)  # (c, batch + 1, m + 1)
    low, high = _bounds(after, confidence)  # (c, batch + 1)
    chances = predictive(passed, trained, batch, q)[probed]  # (c, batch + 1)
    width = (chances * (high - low)).sum(axis=1).round(9)
    entropy = (chances * -(after * np.log(np.maximum(after, TINY))).sum(axis=-1)).sum(axis=1).round(9)
    return int(probed[np.lexsort((probed, width, entropy))[0]])  # least entropy, then width, then the narrowest


EVERY_VALUE = 64  # up to this many knob values the look-ahead weighs every value; above, the candidates below


def candidates(passed, trained, q: float) -> np.ndarray:
    """The values the look-ahead weighs: every value of a knob of up to EVERY_VALUE values; of a longer one (a
    width of 1..256), the tried values, the ends and middle of each run of untried values, and the belief's quartiles
    of K*, which is where the full look-ahead's choice falls on such knobs, at a fraction of its O(m^2) cost."""
    m = len(trained)
    if m <= EVERY_VALUE:
        return np.arange(m)
    tried = np.flatnonzero(trained > 0)
    edges = np.concatenate([[-1], tried, [m]])
    runs = [(a + 1, b - 1) for a, b in zip(edges[:-1], edges[1:]) if b - a > 1]
    cdf = np.cumsum(posterior(passed, trained, q))[:-1]
    quartiles = np.minimum(np.searchsorted(cdf, [0.25, 0.5, 0.75]), m - 1)
    picked = set(tried) | set(quartiles) | {v for a, b in runs for v in (a, (a + b) // 2, b)}
    return np.array(sorted(int(v) for v in picked))
