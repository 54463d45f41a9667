"""Calibration of the threshold search on a bank of success curves whose answer is known: one slice's search repeated
many times, seeds drawn as Bernoulli(p(K)), through the sampler's own decision (samplers.Threshold.decide: the
settled check, the budget and allocation.choose, exactly as Threshold.choose runs them on a study's counts), to
the default budget and then on with --extend to 3x it, as `headsweep search --extend` continues a stopped search.

    .venv/bin/python bench/calibration.py --repeats 1000 --workers 2            # the whole bank (about 35 min)
    .venv/bin/python bench/calibration.py --repeats 200 --sizes 32 --confidence 0.95

Per curve, knob size and confidence: the true K*_q (q = 1/2), how often the interval held it (coverage, with its own
95% Clopper-Pearson interval), the interval's median width in knob steps (an open interval counts to "none", one
step past the widest value), the median trainings, the share of open intervals, and the share of slices that
stopped settled, at the budget and at 3x. Curves (p at knob index i of m, crossing near 0.4 m): sharp (0 then 1),
noisy (logistic, scale 2 steps), shallow (scale 4 and 8 steps), plateaus at 0.4, 0.45, 0.48 (no value reaches q:
the answer is "none") and 0.55, 0.6 (a rise to the plateau), and p(K*) = q exactly (a logistic through q at K*).
"""
from __future__ import annotations

import argparse
import itertools
import multiprocessing
import time

import numpy as np
from scipy import stats

from sweep.search import estimate, samplers

Q, BATCH, RESOLUTION, BUDGET, EXTEND = 0.5, 3, 1.0, 40, 80  # the search's defaults; --extend to 3x the budget
PLATEAUS = (0.4, 0.45, 0.48, 0.55, 0.6)


def bank(m: int) -> dict[str, np.ndarray]:
    """The curves at a knob of m values (the review's p(K) = top / (1 + exp(-(K - c) / s)), c between two values)."""
    i = np.arange(m, dtype=float)
    centre = round(0.4 * m) - 0.5
    logistic = lambda scale, c=centre: 1.0 / (1.0 + np.exp(-(i - c) / scale))
    curves = {"sharp": (i > centre).astype(float), "noisy (s=2)": logistic(2), "shallow (s=4)": logistic(4),
              "shallow (s=8)": logistic(8)}
    curves |= {f"plateau {h}": np.minimum(logistic(2), h) for h in PLATEAUS}
    curves["p(K*) = q"] = logistic(2, centre + 0.5)
    return curves


def true_star(p: np.ndarray, q: float = Q) -> int:
    """The index of K*_q; len(p) where no value reaches q."""
    return next((i for i, v in enumerate(p) if v >= q), len(p))


def counts_at_stops(p: np.ndarray, confidence: float, rng: np.random.Generator, choose=None):
    """One slice's seeds drawn as Bernoulli(p) where the sampler's decision puts them (or `choose(passed, trained)`,
    which ignores settling), to the budget and then --extend to 3x: (passed, trained) at each stop, as the counts
    stand then (the arrays go on changing after the first)."""
    m = len(p)
    sampler = samplers.Threshold("knob", list(range(m)), Q, BUDGET, confidence=confidence, batch=BATCH,
                                 resolution=RESOLUTION)
    passed, trained, evaluations = np.zeros(m), np.zeros(m), 0
    for budget in (BUDGET, BUDGET + EXTEND):
        while trained.sum() < budget:
            left = int(budget - trained.sum())
            index = sampler.decide(passed, trained, evaluations, left) if choose is None else choose(passed, trained)
            if index is None:
                break
            seeds = min(BATCH, left)
            passed[index] += rng.binomial(seeds, p[index])
            trained[index] += seeds
            evaluations += 1
        yield passed, trained


def search(p: np.ndarray, confidence: float, rng: np.random.Generator) -> list[tuple]:
    """One slice's search to the budget, then --extend to 3x: (low, high, trainings, settled) at each stop."""
    fits = [(estimate.fit(passed, trained, Q, confidence), trained.sum())
            for passed, trained in counts_at_stops(p, confidence, rng)]
    return [(fit.low, fit.high, int(trainings), fit.settled(RESOLUTION)) for fit, trainings in fits]


def calibrate(p: np.ndarray, confidence: float, repeats: int, seed: int = 0) -> list[dict]:
    """Coverage, widths and trainings over `repeats` searches, at the budget and at 3x."""
    rng, truth = np.random.default_rng(seed), true_star(p)
    runs = np.array([search(p, confidence, rng) for _ in range(repeats)], float)  # (repeats, 2 stops, 4)
    rows = []
    for stop, budget in enumerate((BUDGET, BUDGET + EXTEND)):
        low, high, trainings, settled = runs[:, stop].T
        covered = int(((low <= truth) & (truth <= high)).sum())
        ci = stats.binomtest(covered, repeats).proportion_ci(0.95, method="exact")
        rows.append({"truth": "none" if truth == len(p) else truth, "budget": budget, "coverage": covered / repeats,
                     "coverage_low": ci.low, "coverage_high": ci.high, "width": float(np.median(high - low)),
                     "trainings": float(np.median(trainings)), "open": float(np.mean(high == len(p))),
                     "settled": float(np.mean(settled))})
    return rows


def _task(args: tuple) -> list[dict]:
    name, m, confidence, repeats, seed = args
    start = time.perf_counter()
    rows = calibrate(bank(m)[name], confidence, repeats, seed)
    return [{"curve": name, "m": m, "confidence": confidence, "seconds": time.perf_counter() - start} | r
            for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1000)
    parser.add_argument("--sizes", type=int, nargs="+", default=[12, 32, 59, 256])
    parser.add_argument("--confidence", type=float, nargs="+", default=[0.95, 0.8])
    parser.add_argument("--curves", nargs="+", default=None, help="names from the bank (default: all)")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--csv", default=None, help="also write every row here")
    args = parser.parse_args()
    names = args.curves or list(bank(12))
    tasks = [(n, m, c, args.repeats, args.seed) for c, m, n in itertools.product(args.confidence, args.sizes, names)]
    print(f"q = {Q}, batch {BATCH}, resolution {RESOLUTION} step, budget {BUDGET} trainings then --extend {EXTEND} "
          f"(3x), {args.repeats} repeats per curve; coverage needs >= confidence - 0.02")
    print(f"{'conf':>4} {'m':>3} {'curve':<14} {'K*':>4} {'budget':>6} {'coverage [95% CI]':>21} {'width':>6} "
          f"{'trainings':>9} {'open':>5} {'settled':>7}  check")
    rows = []
    with multiprocessing.Pool(args.workers) as pool:
        for result in pool.imap(_task, tasks):
            for r in result:
                ok = "ok" if r["coverage"] >= r["confidence"] - 0.02 else "UNDER"
                print(f"{r['confidence']:>4} {r['m']:>3} {r['curve']:<14} {r['truth']:>4} {r['budget']:>6} "
                      f"{r['coverage']:>6.3f} [{r['coverage_low']:.3f}, {r['coverage_high']:.3f}] {r['width']:>6.1f} "
                      f"{r['trainings']:>9.0f} {r['open']:>5.2f} {r['settled']:>7.2f}  {ok}", flush=True)
            rows += result
    under = [r for r in rows if r["coverage"] < r["confidence"] - 0.02]
    print(f"{len(rows) - len(under)} of {len(rows)} rows at least nominal - 0.02")
    if args.csv:
        import pandas as pd
        pd.DataFrame(rows).to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
