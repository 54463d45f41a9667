"""How trainables/memory.py's estimate compares with the memory a trial really takes: for each config, one fresh
process trains two steps and reports its peak resident memory above what it held before training, beside the
estimate of the largest batch (which memory.check compares with the memory available).

    .venv/bin/python bench/memory_estimate.py      (about half a minute on 2 CPU cores)

A ratio above 1 refuses some configs that would fit (by that factor at most); below 1, a config estimated just
under the available memory could still run out of it.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
CASES = [  # (config, overrides): each a large batch or evaluation set, so the fixed costs of a process matter less
    ("debug.yaml", ["optim.batch_size=32768", "eval.n_id=16", "eval.n_ood=16"]),
    ("debug.yaml", ["eval.n_ood=32768", "eval.n_id=16"]),
    ("debug_bigram_trigger.yaml", ["optim.batch_size=4096"]),
    ("debug_markov_ngram.yaml", ["optim.batch_size=8192"]),
    ("debug_mixed_ngram.yaml", ["optim.batch_size=8192"]),
    ("paper_theory.yaml", ["model.n_samples_V=65536"]),
    ("paper_transformer.yaml", ["optim.batch_size=2048"]),
]
MEASURE = """
import json, resource, sys
from trainables import config, memory
from trainables.train import train
cfg = config.load(sys.argv[1], sys.argv[2:] + ["optim.max_steps=2", "eval.every=2"], check_device=False)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
train(cfg)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"measured": peak - before, "estimated": max(memory.needs(cfg).values())}))
"""


def main() -> None:
    print(f"{'config':<28} {'overrides':<42} {'measured MiB':>12} {'estimated MiB':>13} {'ratio':>6}")
    ratios = []
    for name, overrides in CASES:
        out = subprocess.run([sys.executable, "-c", MEASURE, str(CONFIGS / name), *overrides], check=True,
                             capture_output=True, text=True, env={"OMP_NUM_THREADS": "1", "PATH": ""}).stdout
        sizes = json.loads(out.strip().splitlines()[-1])
        ratios.append(sizes["estimated"] / sizes["measured"])
        print(f"{name:<28} {' '.join(overrides):<42} {sizes['measured'] / 2**20:>12.0f} "
              f"{sizes['estimated'] / 2**20:>13.0f} {ratios[-1]:>6.2f}")
    print(f"estimate/measured: min={min(ratios):.2f} max={max(ratios):.2f}")


if __name__ == "__main__":
    main()
