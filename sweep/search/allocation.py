"""Where a slice's next seeds go: the knob value at which `batch` more seeds are expected to leave the least
uncertainty about K*_q (estimate.py), looking one batch ahead.

For each value, the batch's outcomes (0 .. batch passing) are weighed by their predictive probability under the
current posterior, and the posterior each would leave is computed exactly. The value with the smallest expected
entropy of K* wins, which probes where the posterior is most split, as bisection would; ties go to the smallest
expected interval width. (Width first does not work: while the interval spans most values no single batch narrows
it, and a mixed outcome can widen it, so width alone prefers probes that can change nothing.) This is
the one-step look-ahead of level-set estimation (Letham et al., AISTATS 2022) and of probabilistic bisection, which
queries the posterior median (Waeber, Frazier & Henderson 2013), on the model of estimate.py.

Other slices' verdicts (search.guide) enter as pseudo-observations (one seed per value, passing where they predict
success): the look-ahead runs on the slice's seeds plus them, so the first probes go where the other slices put the
boundary. They enter the predictive probabilities and the look-ahead's posteriors alike: weighing outcomes by one
model and scoring them by another can make the least informative probe look best. Whether a slice is finished, and
its answer, rest on its own seeds only (bisection.ThresholdSampler).
"""
from __future__ import annotations

import numpy as np
from scipy import special

from sweep.search import estimate


def predictive(passed: np.ndarray, trained: np.ndarray, batch: int, q: float) -> np.ndarray:
    """(m, batch + 1) the probability that 0 .. batch of `batch` new seeds at each value pass."""
    s, f = passed[:, None], (trained - passed)[:, None]  # (m, 1)
    at_least = np.cumsum(estimate.posterior(passed, trained, q))[:-1, None]  # (m, 1) P(p_i >= q)
    new = np.arange(batch + 1, dtype=float)  # (batch + 1,)
    # Under each side a value's p has a truncated Beta(s + 1, f + 1) posterior; the batch's count is beta-binomial
    # on it: C(b, k) B(s + k + 1, f + b - k + 1) / B(s + 1, f + 1), each Beta restricted to the side.
    log_ratio = (special.gammaln(batch + 1) - special.gammaln(new + 1) - special.gammaln(batch - new + 1)
                 + special.betaln(s + new + 1, f + batch - new + 1) - special.betaln(s + 1, f + 1))
    below = special.betainc(s + new + 1, f + batch - new + 1, q) / np.maximum(special.betainc(s + 1, f + 1, q),
                                                                               estimate.TINY)
    above = special.betainc(f + batch - new + 1, s + new + 1, 1 - q) / np.maximum(
        special.betainc(f + 1, s + 1, 1 - q), estimate.TINY)
    probs = np.exp(log_ratio) * ((1 - at_least) * below + at_least * above)
    return probs / probs.sum(axis=1, keepdims=True)


def choose(passed, trained, batch: int, q: float, confidence: float) -> int:
    """The index of the knob value to train `batch` more seeds at, from seeds passed / trained at each value (with a
    guide's pseudo-counts, if any)."""
    passed, trained = np.asarray(passed, float), np.asarray(trained, float)
    m, outcomes = len(passed), np.arange(batch + 1, dtype=float)
    below, above = estimate.log_sides(passed, trained - passed, q)  # (m,)
    # every look-ahead at once: value i with k of `batch` more seeds passed, the other values as they are
    after_below, after_above = estimate.log_sides(passed[:, None] + outcomes,
                                                  (trained - passed)[:, None] + batch - outcomes, q)  # (m, batch + 1)
    sides_below = np.broadcast_to(below, (m, batch + 1, m)).copy()  # (value probed, outcome, value)
    sides_above = np.broadcast_to(above, (m, batch + 1, m)).copy()
    probed = np.arange(m)
    sides_below[probed, :, probed] = after_below
    sides_above[probed, :, probed] = after_above
    after = estimate.from_sides(sides_below, sides_above)  # (m, batch + 1, m + 1)
    _, low, high = estimate.bounds(after, confidence)  # (m, batch + 1)
    chances = predictive(passed, trained, batch, q)  # (m, batch + 1)
    width = (chances * (high - low)).sum(axis=1).round(9)
    entropy = (chances * estimate.entropy(after)).sum(axis=1).round(9)
    return int(np.lexsort((probed, width, entropy))[0])  # least entropy, then width, then the narrowest value
