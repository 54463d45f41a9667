"""The paper-theory grid through `headsweep grid` (Ray Tune, reused workers) against the same points as sequential
`headsweep train` processes, measured one after the other in one run.

    .venv/bin/python bench/grid.py [--low-max 15] [--triggers 4 8]     (full grid: ~10 min on 2 CPU cores)

Prints wall times, the speed-up, and how much of the grid's core time went into trials (the rest is Ray: start-up,
scheduling, reporting, checkpoint snapshots).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from sweep.space import load_sweep

ROOT = Path(__file__).resolve().parents[1]
HEADSWEEP = str(Path(sys.executable).parent / "headsweep")


def grid_config(low_max: int, triggers: list[int]) -> dict:
    cfg = yaml.safe_load((ROOT / "configs" / "paper_theory_grid.yaml").read_text())
    cfg["sweep"]["axes"] = [{"key": "task.lengths.low", "range": [3, low_max]},
                            {"key": "task.lengths.high", "range": [3, 15]},
                            {"key": "task.n_triggers", "values": triggers}]
    return cfg


def run_grid(config_file: Path, out: Path) -> float:
    start = time.perf_counter()
    subprocess.run([HEADSWEEP, "grid", str(config_file), "--out", str(out)], check=True, capture_output=True)
    return time.perf_counter() - start


def run_sequential(config_file: Path, points: list[dict], out: Path) -> float:
    start = time.perf_counter()
    for i, point in enumerate(points):
        overrides = [f"{k}={v}" for k, v in point.items()]
        subprocess.run([HEADSWEEP, "train", str(config_file), *overrides, "--out", str(out / str(i))], check=True,
                       capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--low-max", type=int, default=15, help="largest task.lengths.low (smaller: fewer points)")
    parser.add_argument("--triggers", type=int, nargs="+", default=[4, 8])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        config_file = tmp / "grid.yaml"
        config_file.write_text(yaml.safe_dump(grid_config(args.low_max, args.triggers)))
        grid_seconds = run_grid(config_file, tmp / "grid")
        results = [json.loads(p.read_text()) for p in (tmp / "grid" / "trials").glob("*/result.json")]
        _, _, points = load_sweep(config_file, [])
        sequential_seconds = run_sequential(config_file, points, tmp / "sequential")
    trial_seconds = sum(r["seconds"] for r in results)
    print(f"{len(results)} paper-theory trials (one-step model, 2 x 8192 sequences each)")
    print(f"  headsweep grid (Ray Tune, 1 CPU per trial, reused workers): {grid_seconds:7.1f} s wall")
    print(f"  sequential headsweep train processes:                      {sequential_seconds:7.1f} s wall")
    print(f"  speed-up of the grid: {sequential_seconds / grid_seconds:.2f}x")
    print(f"  trial compute inside the grid: {trial_seconds:.1f} s = {trial_seconds / len(results):.3f} s per trial;"
          f" with 2 workers that is {trial_seconds / (2 * grid_seconds):.0%} of the grid's 2-core wall time "
          f"(the rest: Ray start-up, scheduling, reporting, checkpoint snapshots)")


if __name__ == "__main__":
    main()
