"""Packed training against one model per trial, side by side in one run on the same hardware: P members of a grid
config's sweep trained as one population (train_members) against the same P trained one after another (train).

    .venv/bin/python bench/population.py                                  # transformer grid, 16 members, CPU
    .venv/bin/python bench/population.py --config configs/paper_theory_grid.yaml --members 64
    python3 bench/population.py --device cuda --members 64                 # on a GPU machine (see below)

Needs torch and three pure-Python packages only, omegaconf (with antlr4) and tqdm (trainables/train.py imports it),
not Ray, Optuna or W&B, so it runs on a GPU machine where those cannot be installed (the .whl wheels, installed as
bench/gpu.py says). Prints trials per hour both ways, the achieved FLOP/s of the packed training (FLOPs
of one training step counted by torch's FlopCounterMode), and the time all the config's trainings would take packed
at the measured rate; the last line is `speedup=<ratio>`.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a plain checkout too (the GPU machine has no editable install)

from sweep import space  # noqa: E402  (no Ray: the sweep section and its points only)
from trainables import config  # noqa: E402
from trainables.logger import Logger  # noqa: E402
from trainables.models import MODELS  # noqa: E402
from trainables.population import Batches, Stack  # noqa: E402
from trainables.train import init_state, train, train_members  # noqa: E402


def member_configs(path: Path, members: int, steps: int, device: str) -> tuple[list, int, int]:
    """The first `members` points of the config's sweep as trial configs with `steps` training steps (the one-step
    model keeps its two), how many points the whole sweep has, and its configured steps per training."""
    base, sweep = config.load_section(path, [], "sweep", space.SweepConfig)
    configured = sum(phase.steps for phase in init_state(base)[0].phases)
    points = space.points(base, sweep)
    base_dict = config.to_dict(base) | {"device": device}
    cfgs = []
    for point in points[:members]:
        cfg = config.with_point(base_dict, point, check_device=False)
        cfg.logging.wandb = False
        if hasattr(cfg.optim, "max_steps") and cfg.model.name != "one_step":
            cfg.optim.max_steps, cfg.eval.every, cfg.eval.patience = steps, steps, 0
        cfgs.append(cfg)
    return cfgs, len(points), configured


def step_flops(cfgs: list) -> float:
    """FLOPs of one training step of the population (forward and backward), counted on a copy."""
    states = [init_state(cfg)[0] for cfg in cfgs]
    stack = Stack(states)
    batch = Batches(cfgs, states).draw(states[0].phase().batch_size)
    with FlopCounterMode(display=False) as counter:
        stack.step(batch, 0)
    return counter.get_total_flops()


def timed(fn) -> float:
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "transformer_grid.yaml")
    parser.add_argument("--members", type=int, default=16, help="P: points trained packed and one by one")
    parser.add_argument("--steps", type=int, default=200, help="training steps per member (transformers)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    cfgs, n_points, configured = member_configs(args.config, args.members, args.steps, args.device)
    device = torch.cuda.get_device_name() if args.device == "cuda" else platform.processor() or platform.machine()
    print(f"{args.config.name}: {len(cfgs)} members of {n_points} points, {cfgs[0].model.name}, device {device}, "
          f"torch {torch.__version__} ({torch.get_num_threads()} threads)")

    train(cfgs[0])  # warm-up: kernels, allocator, first-call costs
    train_members(cfgs[:2], [Logger(), Logger()], [None, None])
    alone = timed(lambda: [train(cfg) for cfg in cfgs])
    packed = timed(lambda: train_members(cfgs, [Logger() for _ in cfgs], [None] * len(cfgs)))
    steps = sum(phase.steps for phase in init_state(cfgs[0])[0].phases)
    flops = step_flops(cfgs) * steps  # of the whole packed training (evaluations not counted)
    print(f"one model per trial: {alone:8.2f} s for {len(cfgs)} trainings = {3600 * len(cfgs) / alone:10.0f} trials/h")
    print(f"packed, one population: {packed:5.2f} s for {len(cfgs)} trainings = {3600 * len(cfgs) / packed:10.0f} "
          f"trials/h; training FLOPs {flops:.3g}, achieved {flops / packed / 1e9:.2f} GFLOP/s (evaluations included "
          "in the time, not in the FLOPs)")
    per_member_step = packed / len(cfgs) / steps
    print(f"all {n_points} trainings of {args.config.name} at this packed rate: "
          f"{per_member_step * steps * n_points / 60:.1f} min at {steps} steps each, at most "
          f"{per_member_step * configured * n_points / 60:.1f} min at its {configured} (early stopping ends most "
          "sooner)")
    if not MODELS[cfgs[0].model.name].vectorize:
        print(f"({cfgs[0].model.name} does not vectorize (ModelSpec.vectorize): Ray trials train its packed members "
              "one after another, as fast as one by one; the population above is what vmapping them would do)")
    print(f"speedup={alone / packed:.2f}")


if __name__ == "__main__":
    main()
