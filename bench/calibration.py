"""Calibration of the threshold search: one experiment repeated many times on a task whose seeds pass with a known
probability p(K), through the real samplers (sweep/search/bisection.py) on in-memory Optuna studies, asked and told
as the search loop does. Beside it, the older protocol on the same shapes: bisection with all of 2 seeds passing,
re-checked with 2 more.

    .venv/bin/python bench/calibration.py [--repeats 200] [--seed 0]   (~4 min on 2 CPU cores)

Per shape: the true K*_q (q = 1/2), how often the interval held it (coverage, with its own 95% Clopper-Pearson
interval), the interval's median width in knob steps, seed trainings per slice (median and max), how often the
point estimate was the true value; for bisection, how often its answer was the true value and how many trainings it
spent. The shapes: sharp (the one-step model's), noisy (a slow rise), a plateau below 1 (seeds that stall), and a
plateau below q (no value reaches it: the answer is "beyond the widest").
"""
from __future__ import annotations

import argparse
import time

import numpy as np
import optuna
from scipy import stats

from sweep.search import bisection

KEY = "knob"
Q, CONFIDENCE, BATCH, RESOLUTION, BUDGET = 0.5, 0.95, 3, 1.0, 40  # the search's defaults
SHAPES = {  # p(K) at 12 knob values
    "sharp": [0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1],
    "noisy": [0, 0, .05, .1, .2, .35, .45, .6, .75, .85, .95, 1],
    "plateau below 1": [0, 0, 0, .1, .3, .55, .65, .7, .7, .7, .7, .7],
    "plateau below q": [0, 0, 0, .1, .2, .3, .35, .4, .4, .4, .4, .4],
}


def true_star(p: list[float], q: float = Q) -> int:
    """The index of K*_q; len(p) where no value reaches q."""
    return next((i for i, v in enumerate(p) if v >= q), len(p))


def run(sampler, p: list[float], seeds: int, rng: np.random.Generator) -> optuna.Study:
    """One search of one slice: ask the sampler's value, draw `seeds` (or the threshold sampler's batch) Bernoulli
    outcomes there, tell them as loop.tell does, until the sampler has nothing left to ask."""
    study = optuna.create_study(direction="minimize", sampler=sampler)
    distribution = {KEY: optuna.distributions.IntDistribution(0, len(p) - 1)}
    while sampler.next(study) is not None:
        trial = study.ask(distribution)
        value = trial.params[KEY]
        count = min(sampler.batch, sampler.seeds_left(study.trials)) if hasattr(sampler, "batch") else seeds
        passed = int(rng.binomial(count, p[value]))
        for name, attr in (("seed_list", list(range(count))), ("successes", passed), ("seeds", count),
                           ("judged", count)):
            trial.set_user_attr(name, attr)
        study.tell(trial, float(value))
    return study


def threshold_sampler(m: int) -> bisection.ThresholdSampler:
    return bisection.ThresholdSampler(KEY, list(range(m)), Q, CONFIDENCE, BATCH, RESOLUTION, BUDGET)


def calibrate(p: list[float], repeats: int, seed: int = 0) -> dict:
    """Coverage, widths, trainings and exact answers of the threshold sampler over `repeats` searches."""
    rng, truth = np.random.default_rng(seed), true_star(p)
    covered, widths, trainings, exact = 0, [], [], 0
    for _ in range(repeats):
        sampler = threshold_sampler(len(p))
        study = run(sampler, p, 0, rng)
        fit = sampler.fit(study.trials)
        covered += fit.low <= truth <= fit.high
        exact += fit.star == truth
        widths.append(fit.width())
        trainings.append(bisection.seeds_asked(study.trials))
    low, high = stats.binomtest(covered, repeats).proportion_ci(0.95, method="exact")
    return {"truth": truth, "coverage": covered / repeats, "coverage_low": low, "coverage_high": high,
            "median_width": float(np.median(widths)), "median_trainings": float(np.median(trainings)),
            "max_trainings": int(max(trainings)), "exact": exact / repeats}


def all_pass(p: list[float], repeats: int, seed: int = 0) -> dict:
    """The older protocol on the same shape: how often its answer is the true K*_q, and what it spends."""
    rng, truth, exact, trainings = np.random.default_rng(seed), true_star(p), 0, []
    for _ in range(repeats):
        sampler = bisection.BisectionSampler(KEY, list(range(len(p))), 1.0)
        study = run(sampler, p, 2, rng)
        answer = bisection.minimal_value(list(range(len(p))), bisection.evidence(study.trials, KEY), 1.0)
        exact += (len(p) if answer is None else answer) == truth
        trainings.append(bisection.seeds_asked(study.trials))
    return {"exact": exact / repeats, "median_trainings": float(np.median(trainings))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    print(f"q = {Q}, confidence {CONFIDENCE}, batch {BATCH}, resolution {RESOLUTION} step, budget {BUDGET} trainings, "
          f"{args.repeats} repeats per shape")
    print(f"{'shape':<17} {'K*':>3} {'coverage [95% CI]':>21} {'width':>6} {'trainings':>10} {'exact':>6}   "
          f"{'all-pass exact':>14} {'trainings':>10}")
    for name, p in SHAPES.items():
        start = time.perf_counter()
        c, b = calibrate(p, args.repeats, args.seed), all_pass(p, args.repeats, args.seed)
        truth = "none" if c["truth"] == len(p) else c["truth"]
        print(f"{name:<17} {truth:>3} {c['coverage']:>6.3f} [{c['coverage_low']:.3f}, {c['coverage_high']:.3f}] "
              f"{c['median_width']:>6.1f} {c['median_trainings']:>5.0f} ({c['max_trainings']:>2}) {c['exact']:>6.2f}   "
              f"{b['exact']:>14.2f} {b['median_trainings']:>10.0f}   ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
