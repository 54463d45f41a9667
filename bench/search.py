"""Trials-to-answer of the threshold sampler against the exhaustive grid sampler on the same slices, one after the
other in one run, with the answers compared.

    .venv/bin/python bench/search.py [CONFIG]      (default configs/quickstart.yaml: ~6 min on 2 CPU cores)
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
HEADSWEEP = str(Path(sys.executable).parent / "headsweep")


def search(config: Path, sampler: str, out: Path) -> tuple[pd.DataFrame, float]:
    start = time.perf_counter()
    subprocess.run([HEADSWEEP, "search", str(config), f"search.sampler={sampler}", "--out", str(out)], check=True,
                   capture_output=True)
    return pd.read_csv(out / "min_diversity.csv"), time.perf_counter() - start


def main() -> None:
    config = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "configs" / "quickstart.yaml"
    with tempfile.TemporaryDirectory() as tmp:
        threshold, threshold_seconds = search(config, "threshold", Path(tmp) / "threshold")
        grid, grid_seconds = search(config, "grid", Path(tmp) / "grid")
    keys = [c for c in threshold.columns if "." in c and c != "data/max_sum_ratio"]
    both = threshold.merge(grid, on=keys, suffixes=("_threshold", "_grid"))
    agree = (both["diversity_star_threshold"].fillna(-1) == both["diversity_star_grid"].fillna(-1))
    print(f"{config.name}: {len(both)} slices")
    print(both[keys + ["diversity_star_threshold", "diversity_star_grid", "n_trials_threshold", "n_trials_grid"]]
          .to_string(index=False))
    ratio = both["n_trials_threshold"].sum() / both["n_trials_grid"].sum()
    print(f"diversity* agrees on {agree.sum()}/{len(both)} slices")
    print(f"Optuna trials (candidate evaluations): threshold {both['n_trials_threshold'].sum()}, grid "
          f"{both['n_trials_grid'].sum()}: ratio {ratio:.0%} (goal: at most 40%)")
    print(f"wall time: threshold {threshold_seconds:.0f} s, grid {grid_seconds:.0f} s")


if __name__ == "__main__":
    main()
