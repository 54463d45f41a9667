"""What one path to merge a config costs (issue [lean] item 5): `config.with_point` (a sweep point set on the base,
called once per point and per member by a grid's and a search's driver) and `config.load` with one override, in this
tree and in an older revision checked out beside it (default a184461: a fast setter that bypassed OmegaConf for
with_point), alternated `--rounds` times in one run. CPU time of this process, so other load on the machine weighs
less than in wall time.

    .venv/bin/python bench/config_merge.py [--revision REV] [--points 1000] [--rounds 2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from worktree import ROOT, checked_out

# Run inside a tree (cwd and PYTHONPATH): its with_point over `points` points of the paper's grid (156, cycled) after
# one warm-up call, and 20 loads with one override; prints the two in ms.
PROBE = """
import sys, time
from trainables import config
from sweep.space import load_sweep
base, _, points = load_sweep("configs/paper_theory_grid.yaml", [])
base_dict, n = config.to_dict(base), int(sys.argv[1])
chosen = (points * (n // len(points) + 1))[:n]
config.with_point(base_dict, chosen[0], check_device=False)
start = time.process_time()
for point in chosen:
    config.with_point(base_dict, point, check_device=False)
per_point = (time.process_time() - start) / n
start = time.process_time()
for _ in range(20):
    config.load("configs/paper_theory_grid.yaml", ["task.lengths.low=4"], check_device=False)
print(per_point * 1e3, (time.process_time() - start) / 20 * 1e3)
"""


def probe(tree: Path, points: int) -> tuple[float, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", PROBE, str(points)], cwd=tree, env=env, check=True,
                         capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--revision", default="a184461")
    parser.add_argument("--points", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    runs: dict[str, list[tuple[float, float]]] = {"this tree": [], args.revision: []}
    with checked_out(args.revision) as old:
        for _ in range(args.rounds):
            runs["this tree"].append(probe(ROOT, args.points))
            runs[args.revision].append(probe(old, args.points))
    for name, measured in runs.items():
        point = statistics.median(m[0] for m in measured)
        load = statistics.median(m[1] for m in measured)
        print(f"{name:>10}: with_point {point:.3f} ms a point, load with one override {load:.1f} ms "
              f"(medians of {len(measured)}; CPU time)")
    ratio = statistics.median(m[0] for m in runs["this tree"]) / statistics.median(m[0] for m in runs[args.revision])
    print(f"with_point, this tree / {args.revision}: {ratio:.1f}x")


if __name__ == "__main__":
    main()
