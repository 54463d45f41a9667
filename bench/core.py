"""Core throughput on this machine: data generation, one paper-theory trial, paper-transformer training steps.

    .venv/bin/python bench/core.py            (about a minute on 2 CPU cores; `make bench`)

Also times, side by side, two choices the hot paths rest on: the one-step model as gathers and scatter-adds vs
Definition 3 with the one-hot X, and the transformer's training step with its last layer and unembedding at the
query only vs at every position. Numbers go to docs/PERFORMANCE.md with the machine line printed first.
"""
from __future__ import annotations

import os
import platform
import statistics
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from trainables import config
from trainables.models import one_step
from trainables.models.one_step import OneHotOneStepModel
from trainables.tasks.trigger_copy import TASK
from trainables.population import Stack
from trainables.tasks import stack_batches
from trainables.train import init_state, train

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def timed(fn, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    return (f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads), "
            f"Python {platform.python_version()}")


def bench_generator(cfg) -> None:
    g = torch.Generator().manual_seed(0)
    for split in ("train", "displaced", "all_pairs"):
        seconds = statistics.median(timed(lambda: TASK.sample(cfg.task, 8192, g, split), 20))
        print(f"generator {split:<10} {8192 / seconds:>12,.0f} sequences/s   (batches of 8192, N=32, L=34)")


def bench_one_step_trial(cfg) -> None:
    cold = timed(lambda: train(cfg), 1)[0]
    warm = timed(lambda: train(cfg), 7)
    print(f"paper-theory trial   first in process {cold:.2f} s, then median {statistics.median(warm):.3f} s "
          f"(min {min(warm):.3f}, max {max(warm):.3f}) incl. 2 x 8192 training + 1024 ID + 1024 OOD + all_pairs eval")


def bench_one_step_formulations(cfg) -> None:
    """A paper-theory trial with the gather formulation (what trains) against Definition 3 with the one-hot X."""
    spec = one_step.SPEC
    fast_times = timed(lambda: train(cfg), 5)
    build = spec.build
    spec.build = lambda model_cfg, d_vocab, n_ctx: OneHotOneStepModel(d_vocab, n_ctx)
    try:
        one_hot_times = timed(lambda: train(cfg), 5)
    finally:
        spec.build = build
    fast, one_hot = statistics.median(fast_times), statistics.median(one_hot_times)
    print(f"one-step trial       gathers {fast * 1e3:.0f} ms, one-hot X {one_hot * 1e3:.0f} ms (median of 5): "
          f"{one_hot / fast:.1f}x")


def bench_transformer(steps: int = 60) -> None:
    cfg = config.load(CONFIGS / "paper_transformer.yaml", [f"optim.max_steps={steps}", f"eval.every={steps}",
                                                          "task.n_pairs_per_cell=1"])
    train(config.load(CONFIGS / "paper_transformer.yaml", ["optim.max_steps=5", "eval.every=5"]))  # warm-up
    seconds = train(cfg).metrics["seconds"]
    print(f"paper transformer    {steps / seconds:.1f} training steps/s (batch 64, 2 layers, D = 72, one eval "
          f"included: {seconds:.2f} s for {steps} steps)")


def bench_query_path(steps: int = 60) -> None:
    """Training steps of the paper transformer with its last layer at the query only (what train() does) against
    the same steps computing every position and reading the query row (what it did before)."""
    cfg = config.load(CONFIGS / "paper_transformer.yaml", [])

    def run(query_only: bool) -> float:
        state, _, _ = init_state(cfg)
        generator = torch.Generator().manual_seed(0)
        batches = [stack_batches([TASK.sample(cfg.task, 64, generator)]) for _ in range(steps)]
        if not query_only:  # the step calls forward(tokens, query): make it compute every position
            full = state.model.forward
            rows = torch.arange(64)
            state.model.forward = lambda tokens, query=None: full(tokens)[rows, query]
        stack = Stack([state])
        start = time.perf_counter()
        for batch in batches:
            stack.step(batch, 0)
        return steps / (time.perf_counter() - start)

    run(True), run(False)  # warm-up
    query, every = statistics.median(run(True) for _ in range(3)), statistics.median(run(False) for _ in range(3))
    print(f"transformer step     last layer at the query only {query:.1f} steps/s, at every position "
          f"{every:.1f} steps/s: {query / every:.2f}x")
    state, _, _ = init_state(cfg)
    with FlopCounterMode(display=False) as counter:
        Stack([state]).step(stack_batches([TASK.sample(cfg.task, 64, torch.Generator().manual_seed(0))]), 0)
    size = 1024
    a, b = torch.randn(size, size), torch.randn(size, size)
    matmul = statistics.median(timed(lambda: a @ b, 20))
    peak = 2 * size ** 3 / matmul / 1e9
    achieved = counter.get_total_flops() * query / 1e9
    print(f"achieved             {achieved:.1f} GFLOP/s in the transformer step (FLOPs counted by FlopCounterMode), "
          f"against {peak:.1f} GFLOP/s of a {size}x{size} matmul in this run: {achieved / peak:.0%}")


def main() -> None:
    print(machine())
    cfg = config.load(CONFIGS / "paper_theory.yaml", [])
    bench_generator(cfg)
    bench_one_step_formulations(cfg)
    bench_one_step_trial(cfg)
    bench_transformer()
    bench_query_path()


if __name__ == "__main__":
    main()
