"""A slice's answer: K*_q, the smallest knob value at which a seed passes with probability at least q
(search.success.rate), with an interval at search.success.confidence, and the success curve p(K) behind it.

A seed trained at the i-th knob value (in increasing diversity) passes with an unknown probability p_i. K*_q is
defined by one crossing: p_i < q for every value below it, p_i >= q at it and above (a monotone p has one, and so does
a curve that stalls on a plateau below 1). The interval is the set of values that tests of that statement leave
standing, so it is a statement about seeds, not about a prior:

- "K* is at most h" holds once p_h >= q is shown: seeds at h pass more often than a coin of probability q would
  let them, one-sided binomial test at level 0.7 x (1 - confidence) / 2 (`level`: the 0.7 leaves room for the
  repeated looks of an adaptive search). "K* is above l" holds once p_l < q is shown the same way. The hypotheses
  are nested ("K* > h" implies "K* > h'" for every h' < h), so by closed testing (Marcus, Peritz & Gabriel 1976)
  the high end is the smallest tried value h such that every tried value from h up
  passes its own test, and each test is made at the full level with no correction for how many values were tried:
  the first false claim can only be made at one value, the tried value nearest K* on that side.
- A test at value i pools the tried values next to it, on the side where the hypothesis speaks for them (below i
  for "p_i >= q": under "K* > i" every value below i is below q too), until the pool holds `seeds_to_decide` seeds:
  one value's own seeds once it has that many. Values with fewer seeds borrow their neighbours' (monotone pooling).
- Ends are values seeds were trained at: the high end is a tried value, or the interval is open past the widest
  value tried ("none" stays in it); the low end is the tried value above the widest value ruled out, or that ruled-out
  value itself when the next one was never tried (the end moves outward, never into a block of untried values), or
  the smallest value when nothing was ruled out. With no data the interval is every value and "none".

The tests are exact for a fixed design; the search chooses where seeds go from earlier outcomes and stops when the
interval is narrow, which fixed-design tests do not account for. Their coverage under the search's real allocation
and stopping (and --extend) is measured on a bank of known curves, not assumed: bench/calibration.py,
docs/SCIENCE.md. Why not the Bayesian posterior this replaced (one crossing, p uniform on each side of q): on curves
that sit near q its uniform prior made 3 of 3 seeds at p = 0.48 worth odds of 15 to 1 for "p >= q", so plateaus just
below q lost "none" from the interval in most runs, and an untried block's flat posterior put ends where no seed was
trained. Why not a parametric psychometric fit: near a diversity threshold seeds stall, plateau or learn another
solution, and the curve need not be a sigmoid in any axis we could name.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats


@dataclass
class Estimate:
    """One slice's answer, as indices into its m knob values (m = past the widest value: "none")."""

    star: int  # the point estimate: the smallest tried value whose monotone (isotonic) rate reaches q; m: none
    low: int  # the interval's less diverse end (m: every value up to the widest is ruled out)
    high: int  # its more diverse end (m: open, "none" not ruled out)
    excluded: int  # the widest value shown below q (-1: none shown); K* is above it
    m: int  # how many knob values
    contradicted: bool = False  # seeds showed p >= q at or below a value shown p < q: one crossing does not hold

    def settled(self, resolution: float) -> bool:
        """Every value up to the widest is ruled out (the answer is "none"), or the interval is closed and at most
        `resolution` knob steps wide."""
        return self.low == self.m or (self.high < self.m and self.high - self.low <= resolution)


@dataclass
class Tests:
    """Each tried value's own tests (with pooling): seeds show p >= q there (`above`), or p < q (`below`)."""

    tried: np.ndarray  # (t,) indices of the values with seeds
    above: np.ndarray  # (t,) bool
    below: np.ndarray  # (t,) bool


LOOKS = 0.7  # each side's level is this share of (1 - confidence) / 2: room for the search's repeated looks


def level(confidence: float) -> float:
    """Each side's test level. (1 - confidence) / 2 would hold for a test made once; the search tests the same value
    again as its seeds grow (every batch, and on with --extend), which a fixed-design test does not account for: at
    the full level a plateau at p = 0.48 kept "none" in 0.928 of 1,000 intervals at 3x the budget (nominal 0.95).
    LOOKS = 0.7 keeps six seeds all passing (or all failing) decisive at 95% (0.5^6 = 0.0156 <= 0.0175), so a sharp
    transition costs what it did, and leaves room for the looks (bench/calibration.py, docs/SCIENCE.md)."""
    return LOOKS * (1.0 - confidence) / 2.0


def seeds_to_decide(q: float, confidence: float) -> int:
    """The fewest seeds that can show p >= q (all passing) and p < q (all failing) at one value: q^n and (1 - q)^n
    at most the test level. A test pools neighbouring values until it holds this many."""
    alpha = level(confidence)
    return max(math.ceil(math.log(alpha) / math.log(q) - 1e-9), math.ceil(math.log(alpha) / math.log(1 - q) - 1e-9))


def tests(passed, trained, q: float, confidence: float) -> Tests:
    """Every tried value's two tests, each pooled with its neighbours on the side its hypothesis covers until the
    pool holds seeds_to_decide seeds."""
    passed, trained = np.asarray(passed, float), np.asarray(trained, float)
    tried = np.flatnonzero(trained > 0)
    s, n = passed[tried].astype(int), trained[tried].astype(int)
    need, alpha, t = seeds_to_decide(q, confidence), level(confidence), len(tried)
    above, below = np.zeros(t, bool), np.zeros(t, bool)
    cs, cn = np.concatenate([[0], np.cumsum(s)]), np.concatenate([[0], np.cumsum(n)])
    for j in range(t):
        a = j  # pool downward for "p >= q somewhere in a..j" (so at j, by one crossing)
        while a > 0 and cn[j + 1] - cn[a] < need:
            a -= 1
        b = j  # pool upward for "p < q somewhere in j..b" (so at j)
        while b < t - 1 and cn[b + 1] - cn[j] < need:
            b += 1
        above[j] = tail_above(q, cn[j + 1] - cn[a], cs[j + 1] - cs[a]) <= alpha
        below[j] = tail_below(q, cn[b + 1] - cn[j], cs[b + 1] - cs[j]) <= alpha
    return Tests(tried, above, below)


@functools.lru_cache(maxsize=65536)
def tail_above(q: float, n: int, s: int) -> float:
    """P(Bin(n, q) >= s)."""
    return float(stats.binom.sf(s - 1, n, q))


@functools.lru_cache(maxsize=65536)
def tail_below(q: float, n: int, s: int) -> float:
    """P(Bin(n, q) <= s)."""
    return float(stats.binom.cdf(s, n, q))


def rates(passed, trained) -> tuple[np.ndarray, np.ndarray]:
    """(tried indices, their monotone pass rates): isotonic regression of each value's rate, weighted by its seeds."""
    passed, trained = np.asarray(passed, float), np.asarray(trained, float)
    tried = np.flatnonzero(trained > 0)
    if not len(tried):
        return tried, np.zeros(0)
    return tried, optimize.isotonic_regression(passed[tried] / trained[tried], weights=trained[tried]).x


def fit(passed, trained, q: float, confidence: float) -> Estimate:
    """The answer from seeds passed / trained at each knob value (in increasing diversity; zeros where none)."""
    trained = np.asarray(trained, float)
    m = len(trained)
    t = tests(passed, trained, q, confidence)
    high = m  # closed testing: every tried value from `high` up shows p >= q
    for j in reversed(range(len(t.tried))):
        if not t.above[j]:
            break
        high = int(t.tried[j])
    excluded = -1  # and every tried value up to `excluded` shows p < q
    for j in range(len(t.tried)):
        if not t.below[j]:
            break
        excluded = int(t.tried[j])
    low = 0 if excluded < 0 else m if excluded == m - 1 else excluded + 1 if trained[excluded + 1] > 0 else excluded
    # seeds showed p >= q at one value and p < q at a wider one: one crossing does not hold there (the chains above
    # stop at the first disagreeing value, so the interval spans both claims already)
    shown_above = np.flatnonzero(t.above)
    contradicted = bool(len(shown_above) and t.below[shown_above[0]:].any())
    tried, rate = rates(passed, trained)
    reaching = [int(i) for i, r in zip(tried, rate) if r >= q and i > excluded]
    star = min(max(reaching[0] if reaching else m, low), high)
    return Estimate(star=star, low=low, high=high, excluded=excluded, m=m, contradicted=contradicted)


@dataclass
class CurvePoint:
    """p at one knob value: the monotone estimate with bounds at the confidence, and the raw counts."""

    trained: int
    passed: int
    p: float
    p_low: float
    p_high: float


def curve(passed, trained, q: float, confidence: float) -> list[CurvePoint]:
    """p at every knob value under monotonicity: the isotonic rates (interpolated between tried values, held flat
    past the ends), bounded below by the largest Clopper-Pearson lower bound at or below the value and above by the
    smallest upper bound at or above it, so the curve and its bounds never decrease. (q is not used: the curve is the
    data's, the same at every q.)"""
    passed, trained = np.asarray(passed, float), np.asarray(trained, float)
    m = len(trained)
    tried, rate = rates(passed, trained)
    if not len(tried):
        return [CurvePoint(0, 0, float("nan"), 0.0, 1.0) for _ in range(m)]
    tail = level(confidence)
    lower = stats.beta.ppf(tail, passed[tried], trained[tried] - passed[tried] + 1)  # Clopper-Pearson, per value
    upper = stats.beta.ppf(1 - tail, passed[tried] + 1, trained[tried] - passed[tried])
    lower, upper = np.nan_to_num(lower, nan=0.0), np.nan_to_num(upper, nan=1.0)
    p = np.interp(np.arange(m), tried, rate)
    points = []
    for i in range(m):
        at_or_below, at_or_above = tried <= i, tried >= i
        low = float(lower[at_or_below].max()) if at_or_below.any() else 0.0
        high = float(upper[at_or_above].min()) if at_or_above.any() else 1.0
        high = max(low, high)  # bounds that cross (seeds against monotonicity) meet at the lower one
        points.append(CurvePoint(int(trained[i]), int(passed[i]), float(np.clip(p[i], low, high)), low, high))
    return points


OUT_OF_REACH = 10_000  # seeds_to_settle's answer for rates that sit at q


def seeds_to_settle(estimate: Estimate, passed, trained, q: float, confidence: float,
                    limit: int = OUT_OF_REACH) -> int:
    """About how many more seed trainings would close the interval if the rates stay as estimated: at each open end
    the value next to the estimated crossing, trained until its expected count passes its test (limit: not within
    reach, the rates there sit at q)."""
    passed, trained = np.asarray(passed, float), np.asarray(trained, float)
    tried, rate = rates(passed, trained)
    more = 0
    sides = [(rate >= q) & (tried < estimate.high), (rate < q) & (tried > estimate.excluded)]
    for above, candidates in zip((True, False), sides):
        if not candidates.any():
            continue
        j = np.flatnonzero(candidates)[0 if above else -1]
        n = fewest_seeds(float(np.clip(rate[j], 0.01, 0.99)), q, confidence, above, limit)
        if n == limit:
            return limit
        more += max(0, n - int(trained[tried[j]]))
    return min(more, limit)


@functools.lru_cache(maxsize=4096)
def fewest_seeds(p: float, q: float, confidence: float, above: bool, limit: int) -> int:
    """The fewest seeds (from seeds_to_decide on) at a value passing at rate p whose expected count, round(n p),
    shows p >= q (`above`) or p < q on its own; `limit` when none below it does. Every n at once: near q the first
    one is thousands of seeds away."""
    n = np.arange(seeds_to_decide(q, confidence), limit)
    passing = np.round(n * p)
    tail = stats.binom.sf(passing - 1, n, q) if above else stats.binom.cdf(passing, n, q)
    shown = np.flatnonzero(tail <= level(confidence))
    return int(n[shown[0]]) if len(shown) else limit
