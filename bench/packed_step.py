"""Issue [gpu-ready]'s counts and rates, per training step of a packed population: the torch operations dispatched
and the host synchronisations (trainables/op_count.py) at P = 1, 8 and 64, and steps per second of P = 64 packed
against the same 64 trained one by one; optionally for an older revision beside this checkout, in the same run.

    .venv/bin/python bench/packed_step.py                          # debug and paper transformer configs
    .venv/bin/python bench/packed_step.py --against HEAD~12        # and the same for an older revision
    python3 bench/packed_step.py --device cuda --alone-members 8   # on a GPU machine (torch, omegaconf, tqdm)

Everything is measured through train_members, which older revisions have too, as the difference between a run of 2S
steps and a run of S steps: both evaluate once, at their end, so setup and evaluation cancel and what is left is S
training steps exactly as the loop runs them (batch draws, padding and stacking, the step, the bookkeeping).
Members differ in seed and in their training lengths. The last line is `ops_ratio_64_8=<x> syncs_per_step=<y>`.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIGS = ("debug.yaml", "paper_transformer.yaml")
COUNTED = (1, 8, 64)


def op_counter():
    """This checkout's OpCounter, also when the code measured is an older revision's (which may not have it)."""
    spec = importlib.util.spec_from_file_location("op_count", HERE.parent / "trainables" / "op_count.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.OpCounter


def members(root: Path, name: str, count: int, steps: int, device: str) -> list:
    from trainables import config
    widths = (4, 2, 3)  # training lengths Unif{2..2+K-1}: members of one pack with different batch widths
    return [config.load(root / "configs" / name, [
        f"seed={i}", f"optim.max_steps={steps}", f"eval.every={steps}", "eval.patience=0", "eval.n_id=64",
        "eval.n_ood=64", "eval.n_examples=1", "task.lengths.low=2", f"task.lengths.width={widths[i % 3]}",
        f"device={device}", "optim.compile=never"]) for i in range(count)]


def run(root: Path, name: str, count: int, steps: int, device: str, alone: bool) -> None:
    from trainables.logger import Logger
    from trainables.train import train_members
    cfgs = members(root, name, count, steps, device)
    groups = [[cfg] for cfg in cfgs] if alone else [cfgs]
    for group in groups:
        train_members(group, [Logger() for _ in group], [None] * len(group))


def per_step(root: Path, name: str, count: int, steps: int, device: str, alone: bool = False) -> tuple[float, ...]:
    """(operations, synchronisations, seconds) per training step of `count` members, by the 2S - S difference. A run
    first warms the members up, uncounted (without it the first measurement of a member count depended on what ran
    before: debug.yaml's P = 8 gave 348 operations a step right after P = 1, 645 every time after), and each timed
    run follows a counted one of the same steps."""
    import torch
    run(root, name, count, steps, device, alone)
    counted, timed = [], []
    for s in (steps, 2 * steps):
        with op_counter()() as counter:
            run(root, name, count, s, device, alone)
        counted.append((counter.total, sum(counter.syncs.values())))
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        run(root, name, count, s, device, alone)
        if device == "cuda":
            torch.cuda.synchronize()
        timed.append(time.perf_counter() - start)
    (ops1, syncs1), (ops2, syncs2) = counted
    return (ops2 - ops1) / steps, (syncs2 - syncs1) / steps, (timed[1] - timed[0]) / steps


def measure(root: Path, steps: int, device: str, alone_members: int) -> dict:
    """Everything for one tree (imported from `root`), as JSON-able numbers. The one-by-one rate of P = 64 is measured
    on `alone_members` of them and scaled: one by one, each member's steps add to the time (64 on a GPU took
    minutes)."""
    run(root, CONFIGS[0], 2, 2, device, False)  # warm-up: kernels, allocator, first-call costs
    out = {}
    for name in CONFIGS:
        counts = {p: per_step(root, name, p, 2, device)[:2] for p in COUNTED}
        packed = per_step(root, name, COUNTED[-1], steps, device)[2]
        alone = per_step(root, name, alone_members, steps, device, alone=True)[2] * COUNTED[-1] / alone_members
        out[name] = {"ops": {p: c[0] for p, c in counts.items()}, "syncs": {p: c[1] for p, c in counts.items()},
                     "packed_steps_per_s": 1 / packed, "alone_steps_per_s": 1 / alone}
        print(f"{name}: measured", file=sys.stderr, flush=True)
    return out


def report(label: str, result: dict) -> None:
    for name, r in result.items():
        ops = "  ".join(f"P={p}: {r['ops'][str(p)]:7.0f}" for p in COUNTED)
        syncs = "  ".join(f"P={p}: {r['syncs'][str(p)]:5.1f}" for p in COUNTED)
        print(f"{label:>12} {name:24} ops/step {ops}   ratio 64/8 {r['ops']['64'] / r['ops']['8']:.2f}")
        print(f"{'':>12} {'':24} syncs/step {syncs}")
        print(f"{'':>12} {'':24} P=64 packed {r['packed_steps_per_s']:.2f} steps/s against 64 one by one "
              f"{r['alone_steps_per_s']:.3f} steps/s: {r['packed_steps_per_s'] / r['alone_steps_per_s']:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", help="an older revision to measure beside this checkout")
    parser.add_argument("--steps", type=int, default=10, help="S: timing by 2S - S training steps")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--alone-members", type=int, default=COUNTED[-1],
                        help="members trained one by one for P = 64's one-by-one rate, scaled to 64 (a GPU loan: 8)")
    parser.add_argument("--measure", help=argparse.SUPPRESS)  # a tree to measure, printing JSON (a child run)
    args = parser.parse_args()
    if args.measure:
        sys.path.insert(0, args.measure)
        print(json.dumps(measure(Path(args.measure), args.steps, args.device, args.alone_members)))
        return
    trees = {"this checkout": HERE.parent}
    sys.path.insert(0, str(HERE))
    from worktree import checked_out
    from contextlib import nullcontext
    with checked_out(args.against) if args.against else nullcontext() as old:
        if old:
            trees[args.against] = old
        print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, device {args.device}, "
              f"S = {args.steps}, one by one: {args.alone_members} of 64, scaled", flush=True)
        results = {}
        for label, tree in trees.items():  # each in its own process: the revision's own modules
            # The tree first, then what PYTHONPATH held (on a GPU machine, the pure-Python wheels' folder).
            path = os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))
            child = subprocess.run([sys.executable, __file__, "--measure", str(tree), "--steps", str(args.steps),
                                    "--device", args.device, "--alone-members", str(args.alone_members)],
                                   stdout=subprocess.PIPE, text=True, env=os.environ | {"PYTHONPATH": path})
            if child.returncode:
                sys.exit(f"measuring {label} failed (its stderr is above)")
            results[label] = json.loads(child.stdout.strip().splitlines()[-1])
            report(label, results[label])
    mine = results["this checkout"]
    worst = max(r["ops"]["64"] / r["ops"]["8"] for r in mine.values())
    print(f"ops_ratio_64_8={worst:.2f} syncs_per_step={max(max(r['syncs'].values()) for r in mine.values()):.1f}")


if __name__ == "__main__":
    main()
