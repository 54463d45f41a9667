"""Issue [fast]'s goals, wall time of whole commands from start to exit, optionally against an older revision in the
same run (rounds alternate the two trees, since this kind of VM drifts minute to minute):

    .venv/bin/python bench/main_job.py                                  # 3 rounds of the three jobs below
    .venv/bin/python bench/main_job.py --jobs grid --rounds 5 --against HEAD~2
    .venv/bin/python bench/main_job.py --jobs quickstart --against <commit> --new-answers   # a new protocol

- grid: the paper's §4.1 grid (configs/paper_theory_grid.yaml, 156 one-step trials), W&B off; goal 20 s
- grid_wandb: the same with W&B on, offline (WANDB_MODE=offline); goal 40 s
- quickstart: `headsweep search configs/quickstart.yaml`; goal 45 s

Every run starts its own local Ray (RAY_ADDRESS is unset), in a fresh output directory; one untimed run of the first
job per tree comes first. The answers of both trees are compared: the grid's metrics per trial, the search's
min_diversity.csv (numbers up to float32 rounding). Last line: `<job>_median=<s>` for each job of this checkout.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import pandas as pd

from worktree import ROOT, checked_out

GRID = ["grid", "configs/paper_theory_grid.yaml"]
JOBS = {  # name -> (headsweep arguments, extra environment, goal in seconds, the file whose answers must agree)
    "grid": (GRID + ["logging.wandb=false"], {}, 20, "results.csv"),
    "grid_wandb": (GRID + ["logging.wandb=true"], {"WANDB_MODE": "offline"}, 40, "results.csv"),
    "quickstart": (["search", "configs/quickstart.yaml"], {}, 45, "min_diversity.csv"),
}
# Columns that differ from run to run whatever the code: timings, and W&B's run ids
VARYING = ("seconds", "wandb")


def run(tree: Path, job: str, out: Path) -> float:
    """Seconds of one `headsweep` command of `job`, run with the code of `tree`."""
    arguments, extra_env, _, _ = JOBS[job]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | extra_env | {"PYTHONPATH": str(tree)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", "from sweep.cli import run; run()", *arguments, "--out", str(out)],
                          cwd=tree, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        sys.exit(f"{job} in {tree} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return seconds


def same_answers(out: Path, other: Path, job: str) -> bool:
    """Whether two runs of `job` gave the same answers: equal text columns, numbers equal up to float32 rounding
    (the one-step model's W_KQ is a sum over 8192 sequences scaled by eta_KQ = 1e4: another summation order moves its
    entries, about 100, by up to 2e-3, and the attention read off them in the fifth digit)."""
    frames = [pd.read_csv(o / JOBS[job][3]) for o in (out, other)]
    keep = [c for c in frames[0].columns if not any(word in c for word in VARYING)]
    a, b = (f[keep] for f in frames)
    if list(b.columns) != keep or len(a) != len(b):
        return False
    numbers = a.select_dtypes("number").columns
    return (a.drop(columns=numbers).equals(b.drop(columns=numbers))
            and np.allclose(a[numbers], b[numbers], rtol=1e-4, atol=1e-5, equal_nan=True))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", nargs="+", choices=list(JOBS), default=list(JOBS))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--against", help="an older revision to run beside this checkout, alternating")
    parser.add_argument("--new-answers", action="store_true",
                        help="the change alters what a job answers (a new protocol, new columns): time both trees, "
                             "compare no answers")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch, \
            (checked_out(args.against) if args.against else nullcontext()) as old:
        trees = {"now": ROOT} | ({args.against: old} if old else {})
        seconds = {(job, name): [] for job in args.jobs for name in trees}
        for name, tree in trees.items():  # untimed: the first run after a while pays cold caches (+4-6 s seen)
            run(tree, args.jobs[0], Path(scratch) / f"warm-up-{name}")
        for round_ in range(args.rounds):
            for job in args.jobs:
                outs = {}
                for name, tree in trees.items():
                    outs[name] = Path(scratch) / f"{job}-{name}-{round_}"
                    seconds[job, name].append(run(tree, job, outs[name]))
                if old and not args.new_answers and not same_answers(outs["now"], outs[args.against], job):
                    sys.exit(f"{job}: the answers of this checkout and {args.against} differ")
                print(f"round {round_ + 1} {job}: " + ", ".join(f"{name} {seconds[job, name][-1]:.1f} s"
                                                                 for name in trees), flush=True)
    for (job, name), times in seconds.items():
        goal = JOBS[job][2]
        print(f"{job:11s} {name:12s} median {statistics.median(times):5.1f} s, min {min(times):5.1f}, max "
              f"{max(times):5.1f} ({sum(t <= goal for t in times)} of {len(times)} within the goal of {goal} s)")
    print(" ".join(f"{job}_median={statistics.median(seconds[job, 'now']):.1f}" for job in args.jobs))


if __name__ == "__main__":
    main()
