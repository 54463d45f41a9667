"""A richer interval tried against the tests' (issue [honest-intervals], item 3): is a parametric curve, which pools
every width's seeds through its shape, sharper on shallow curves at the same coverage?

The model: p(i) = floor + (top - floor) / (1 + exp(-(i - c) / s)) at knob index i (a psychometric function with a
floor and a plateau, so plateaus below and above q are inside it), fitted by maximum likelihood on a grid of
(c, s, top, floor). Its interval for K*_q is the profile-likelihood set: every K (and "none") whose best fit is within
crit / 2 log-likelihood of the best overall (crit = the chi-square's 95% point, 3.84, and a wider 6.63), its ends
moved outward to tried widths as the tests' are. Seeds are allocated by the search's own decision
(samplers.Threshold.decide, which feeds the tests) or by the belief's look-ahead alone (which puts seeds near K*, where
a curve fit learns most), to the default budget (40) and on to 3x (120), as bench/calibration.py runs them.

    .venv/bin/python bench/interval_models.py --repeats 200 --size 32 --workers 2
"""
from __future__ import annotations

import argparse
import itertools
import multiprocessing
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `from bench import ...` when run as a script
from bench import calibration  # noqa: E402
from sweep.search import allocation, estimate  # noqa: E402

CRITS = (3.84, 6.63)


class Logistic:
    """The four-parameter curve on a grid, and each grid point's K*_q, for a knob of m values."""

    def __init__(self, m: int, q: float):
        c = np.linspace(-2, m + 1, 4 * (m + 3))
        s = np.geomspace(0.05, max(m, 4), 24)
        top, floor = np.linspace(0.05, 1, 20), np.array([0.0, 0.05, 0.1, 0.2, 0.3])
        C, S, T, F = np.meshgrid(c, s, top, floor, indexing="ij")
        keep = F < T
        C, S, T, F = C[keep], S[keep], T[keep], F[keep]  # (G,) each
        i = np.arange(m)
        p = F[:, None] + (T - F)[:, None] / (1 + np.exp(-(i[None] - C[:, None]) / S[:, None]))  # (G, m)
        reach = p >= q
        self.star = np.where(reach.any(1), reach.argmax(1), m)  # (G,) K* of each grid point; m: none
        self.log_p, self.log_not_p = np.log(np.clip(p, 1e-9, 1)), np.log(np.clip(1 - p, 1e-9, 1))
        self.m = m

    def interval(self, passed, trained, crit: float) -> tuple[int, int]:
        tried = np.flatnonzero(trained > 0)
        ll = self.log_p[:, tried] @ passed[tried] + self.log_not_p[:, tried] @ (trained - passed)[tried]  # (G,)
        profile = np.full(self.m + 1, -np.inf)
        np.maximum.at(profile, self.star, ll)
        kept = np.flatnonzero(2 * (ll.max() - profile) <= crit)
        low, high = int(kept.min()), int(kept.max())
        while 0 < low < self.m and not trained[low]:  # ends move outward to tried widths, as the tests' do
            low -= 1
        while high < self.m and not trained[high]:
            high += 1
        return low, high


def run(args: tuple) -> list[dict]:
    name, m, allocator, repeats, seed = args
    p, model = calibration.bank(m)[name], Logistic(m, calibration.Q)
    truth, rng = calibration.true_star(p), np.random.default_rng(seed)
    look_ahead = lambda passed, trained: allocation.look_ahead(passed, trained, calibration.BATCH, calibration.Q, 0.95)
    found = []  # per repeat, per budget: (tests' low, high), then (low, high) per crit
    for _ in range(repeats):
        stops = []
        for passed, trained in calibration.counts_at_stops(p, 0.95, rng, None if allocator == "search" else look_ahead):
            tests = estimate.fit(passed, trained, calibration.Q, 0.95)
            stops.append([(tests.low, tests.high)] + [model.interval(passed, trained, c) for c in CRITS])
        found.append(stops)
    ends = np.array(found, float)  # (repeats, budgets, 1 + crits, 2)
    rows = []
    for b, budget in enumerate((calibration.BUDGET, calibration.BUDGET + calibration.EXTEND)):
        for k, interval in enumerate(["tests"] + [f"logistic, crit {c}" for c in CRITS]):
            low, high = ends[:, b, k].T
            rows.append({"curve": name, "m": m, "allocation": allocator, "budget": budget, "interval": interval,
                         "coverage": float(((low <= truth) & (truth <= high)).mean()),
                         "width": float(np.median(high - low))})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--curves", nargs="+", default=["noisy (s=2)", "shallow (s=4)", "shallow (s=8)",
                                                         "plateau 0.48", "plateau 0.55", "p(K*) = q"])
    parser.add_argument("--allocations", nargs="+", default=["search", "look-ahead"])
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    tasks = [(n, args.size, a, args.repeats, 0) for a, n in itertools.product(args.allocations, args.curves)]
    print(f"m = {args.size}, 95%, {args.repeats} repeats; coverage must be >= 0.93; width: median, in knob steps")
    print(f"{'allocation':<10} {'curve':<14} {'budget':>6}  " + "  ".join(
        f"{h:>24}" for h in ["tests", *[f"logistic crit {c}" for c in CRITS]]))
    with multiprocessing.Pool(args.workers) as pool:
        for rows in pool.imap(run, tasks):
            for budget in (calibration.BUDGET, calibration.BUDGET + calibration.EXTEND):
                cells = [r for r in rows if r["budget"] == budget]
                print(f"{cells[0]['allocation']:<10} {cells[0]['curve']:<14} {budget:>6}  " + "  ".join(
                    f"{r['coverage']:>8.3f} {'ok' if r['coverage'] >= 0.93 else 'UNDER':>5} width {r['width']:>4.0f}"
                    for r in cells), flush=True)


if __name__ == "__main__":
    main()
