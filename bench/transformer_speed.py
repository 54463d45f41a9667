"""The paper transformer's training steps per second against an older revision of the project, side by side in one run.

    .venv/bin/python bench/transformer_speed.py                        # against 6b847a0, 5000 steps, 2 rounds
    .venv/bin/python bench/transformer_speed.py --against HEAD~3 --steps 2000 --rounds 3

Each measurement is a fresh process training `configs/paper_transformer.yaml` (its evaluations every 250 steps
included, early stopping off) for --steps steps: the old revision (checked out in a temporary git worktree), this
checkout eagerly (`optim.compile=never`) and compiled (`optim.compile=always`, compile time included, inductor's
cache warmed by one untimed run first). Rounds alternate the three, since this kind of VM drifts minute to minute.
The last line is `speedup=<ratio>`: this checkout's best mode against the old revision, medians of the rounds.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from worktree import ROOT, checked_out

# Runs in the measured tree (old or new): the steps per second of one training, as the last line.
MEASURE = """
import sys
from trainables import config
from trainables.train import train
steps = int(sys.argv[1])
cfg = config.load("configs/paper_transformer.yaml", [f"optim.max_steps={steps}", "eval.patience=0"] + sys.argv[2:])
print(steps / train(cfg).metrics["seconds"])
"""


def steps_per_second(tree: Path, steps: int, overrides: list[str]) -> float:
    done = subprocess.run([sys.executable, "-c", MEASURE, str(steps), *overrides], cwd=tree, capture_output=True,
                          text=True, env=os.environ | {"PYTHONPATH": str(tree)})
    if done.returncode:
        sys.exit(f"{tree} {' '.join(overrides)} failed:\n{done.stderr[-2000:]}")
    return float(done.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", default="6b847a0", help="the older revision (before issue [population])")
    parser.add_argument("--steps", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with checked_out(args.against) as old:
        modes = {f"{args.against} (old)": (old, []), "eager": (ROOT, ["optim.compile=never"]),
                 "compiled": (ROOT, ["optim.compile=always"])}
        steps_per_second(ROOT, 20, ["optim.compile=always"])  # warms inductor's cache, as a sweep's later trials
        rates: dict[str, list[float]] = {mode: [] for mode in modes}
        for round_ in range(args.rounds):
            for mode, (tree, overrides) in modes.items():
                rates[mode].append(steps_per_second(tree, args.steps, overrides))
            print(f"round {round_ + 1}: " + ", ".join(f"{m} {r[-1]:.1f}" for m, r in rates.items()), flush=True)
    medians = {mode: statistics.median(r) for mode, r in rates.items()}
    old_rate = medians.pop(f"{args.against} (old)")
    for mode, rate in medians.items():
        print(f"{mode:9s} {rate:.1f} steps/s (median of {args.rounds}), {rate / old_rate:.2f}x of {old_rate:.1f}")
    print(f"speedup={max(medians.values()) / old_rate:.2f}")


if __name__ == "__main__":
    main()
