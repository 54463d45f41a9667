"""Trainings-to-answer of the threshold sampler (guided across slices as the config says, and unguided) and of the
older all-pass bisection (2 of 2 seeds, re-checked) against the exhaustive sampler (one seed per value) on the
same slices, one after the other in one run, with the answers compared (the bisection's own answer: bisection_star).

    .venv/bin/python bench/search.py [CONFIG ...]   (default configs/quickstart.yaml; ~12 min on 2 CPU cores)
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
VARIANTS = {"threshold": [], "unguided": ["search.guide.metric="],
            "bisection": ["search.sampler=bisection", "search.success.seeds=[0,1]", "search.success.min_seeds=2"],
            "exhaustive": ["search.sampler=exhaustive", "search.guide.metric="]}


def search(config: Path, overrides: list[str], out: Path) -> tuple[pd.DataFrame, int, float]:
    """min_diversity.csv, the number of seeds trained, and the wall time of one search."""
    start = time.perf_counter()
    subprocess.run([HEADSWEEP, "search", str(config), *overrides, "--out", str(out)], check=True, capture_output=True)
    seconds = time.perf_counter() - start
    return pd.read_csv(out / "min_diversity.csv"), len(pd.read_csv(out / "trials.csv")), seconds


def compare(config: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        runs = {name: search(config, overrides, Path(tmp) / name) for name, overrides in VARIANTS.items()}
    tables = {name: table.assign(diversity_star=table.get("bisection_star", table["diversity_star"]))
              for name, (table, *_) in runs.items()}
    keys = [c for c in tables["exhaustive"].columns if "." in c and c != "data/max_sum_ratio"]
    both = tables["exhaustive"][keys + ["diversity_star", "seeds"]].rename(
        columns={"diversity_star": "star exhaustive", "seeds": "trials exhaustive"})
    others = [name for name in VARIANTS if name != "exhaustive"]
    for name in others:
        both = both.merge(tables[name][keys + ["diversity_star", "seeds"]].rename(
            columns={"diversity_star": f"star {name}", "seeds": f"trials {name}"}), on=keys)
    print(f"\n{config.name}: {len(both)} slices")
    print(both.to_string(index=False))
    all_trials, all_seeds, all_seconds = both["trials exhaustive"].sum(), runs["exhaustive"][1], runs["exhaustive"][2]
    for name in others:
        agree = (both[f"star {name}"].fillna(-1) == both["star exhaustive"].fillna(-1)).sum()
        trials, seeds, seconds = both[f"trials {name}"].sum(), runs[name][1], runs[name][2]
        print(f"{name:>9}: diversity* agrees with the exhaustive sampler on {agree}/{len(both)} slices; candidate "
              f"evaluations {trials} vs {all_trials} ({trials / all_trials:.0%}); seeds trained {seeds} vs {all_seeds} "
              f"({seeds / all_seeds:.0%}); wall {seconds:.0f} s vs {all_seconds:.0f} s")


def main() -> None:
    for config in [Path(c) for c in sys.argv[1:]] or [ROOT / "configs" / "quickstart.yaml"]:
        compare(config)


if __name__ == "__main__":
    main()
