"""What W&B costs a trial: the same one-step trials with W&B off, with an offline run but no media, and with an
offline run and its media, side by side in one process (what a reused Ray worker does).

    .venv/bin/python bench/wandb_cost.py [--trials 20]      (about a minute on 2 CPU cores)

Each trial is `configs/paper_theory.yaml` (the §4.1 grid's trial) run and saved as the trainable runs it.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from trainables import config
from trainables.logger import WandbSink, member_logger
from trainables.train import save, train

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "paper_theory.yaml"
VARIANTS = ("W&B off", "offline run, no media", "offline run with media")


def trials(variant: str, n: int, tmp: Path) -> list[float]:
    """Seconds per trial of one variant, member_logger to save() included."""
    log_media = WandbSink.log_media
    if variant == "offline run, no media":
        WandbSink.log_media = lambda self, arrays, step: None
    try:
        times = []
        for seed in range(n):
            cfg = config.load(CONFIG, [f"seed={seed}", f"logging.wandb={str(variant != 'W&B off').lower()}"])
            out = tmp / f"{VARIANTS.index(variant)}-{seed}"
            out.mkdir(parents=True)
            start = time.perf_counter()
            with member_logger(cfg, out, job_type="grid", name=out.name) as logger:
                result = train(cfg, logger)
                logger.summary(result.metrics)
            save(result, out)
            times.append(time.perf_counter() - start)
        return times
    finally:
        WandbSink.log_media = log_media


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=20)
    args = parser.parse_args()
    os.environ.setdefault("WANDB_MODE", "offline")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for variant in VARIANTS:  # warm-up: PyTorch's start-up, wandb's import and service, matplotlib's colour table
            trials(variant, 1, tmp / "warm")
        medians = {variant: statistics.median(trials(variant, args.trials, tmp)) for variant in VARIANTS}
    off = medians["W&B off"]
    print(f"{args.trials} one-step trials per variant, medians per trial:")
    for variant, seconds in medians.items():
        print(f"  {variant:<24} {seconds * 1e3:7.1f} ms  (+{(seconds - off) * 1e3:6.1f} ms over W&B off)")
    print(f"W&B with media costs {medians[VARIANTS[2]] / off:.2f}x a trial without W&B")


if __name__ == "__main__":
    main()
