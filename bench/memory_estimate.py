"""How trainables/memory.py's estimate compares with the memory a packed training step really takes, measured on the
CPU as bench/gpu.py measures it on a GPU: the peak bytes of live tensors (trainables/live_bytes.py, each rounded up
to the CUDA caching allocator's 512-byte blocks) from before the members' states are built to after a training step
of every phase, against memory.needs(cfg, P), the packing planner's figure (sweep/packing.py), at the training
batch's key.

    .venv/bin/python bench/memory_estimate.py      (about a minute on 2 CPU cores)

The rows: bench/gpu.py's three configs at its sizes, P = 1 and 8 (on an H200 their peaks were within 1-5% of these,
but for the first row, which also paid for cuBLAS's workspaces: docs/PERFORMANCE.md), and single members of other
configs with a large batch or evaluation set. An estimate above the measurement refuses some configs that would fit
(by that factor at most); below it, a config estimated just under the available memory could still run out of it.
tests/unit/test_memory.py holds the estimate to within 25% of the same measurement on small batches.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import gpu  # noqa: E402
from trainables import config, memory  # noqa: E402
from trainables.live_bytes import CUDA_BLOCK, LiveBytes  # noqa: E402
from trainables.models import MODELS  # noqa: E402
from trainables.population import Batches, Stack  # noqa: E402
from trainables.train import init_state  # noqa: E402

MIB = 2 ** 20
CASES = [  # (config, overrides, P): a large batch or evaluation set, so that the fixed costs matter less
    *[(name, gpu.EVAL, P) for name, _ in gpu.BENCHED.values() for P in (1, 8)],
    ("debug.yaml", ["optim.batch_size=32768", "eval.n_id=16", "eval.n_ood=16"], 1),
    ("debug_bigram_trigger.yaml", ["optim.batch_size=4096"], 1),
    ("debug_markov_ngram.yaml", ["optim.batch_size=8192"], 1),
    ("debug_mixed_ngram.yaml", ["optim.batch_size=8192"], 1),
    ("paper_theory.yaml", ["model.n_samples_V=65536"], 1),
    ("paper_transformer.yaml", ["optim.batch_size=2048"], 1),
    ("paper_practical_grid.yaml", ["optim.batch_size=256"], 8),
]


def members(name: str, overrides: list[str], count: int) -> list:
    """`count` members of the config on the CPU, differing in seed."""
    base = config.to_dict(config.load(ROOT / "configs" / name, [*overrides, "device=cpu", "optim.compile=never",
                                                                 "logging.wandb=false"], check_device=False))
    return [config.with_point(base, {"seed": seed}, check_device=False) for seed in range(count)]


def measured_peak(cfgs: list) -> int:
    """Peak bytes of the tensors these members' training holds, as bench/gpu.py measures them on a GPU: their states
    and evaluation sets (init_state), the stacked population and its optimizers, and two training steps of every
    phase (the first makes the optimizer's moments), each on a fresh batch draw."""
    with LiveBytes(round_to=CUDA_BLOCK) as live:
        states = [init_state(cfg)[0] for cfg in cfgs]
        stack, batches = Stack(states), Batches(cfgs, states)
        for _ in range(2):
            for phase, settings in enumerate(states[0].phases):
                stack.step(batches.draw(settings.batch_size), phase)
        del stack, batches, states
    return live.peak


def estimated_peak(cfgs: list) -> int:
    """memory.needs(cfg, P) of the training batches' keys, as sweep/packing.py weighs a pack of P (the evaluation
    splits' keys weigh an evaluation, which neither this nor bench/gpu.py runs)."""
    peaks, spec = memory.needs(cfgs[0], len(cfgs)), MODELS[cfgs[0].model.name]
    return max(peaks[key] for key in spec.batch_sizes(cfgs[0].model, cfgs[0].optim))


def main() -> None:
    torch.set_num_threads(1)
    print(f"{'config':<30} {'overrides':<52} {'P':>3} {'measured MiB':>12} {'estimated MiB':>13} {'est/measured':>12}")
    ratios = []
    for name, overrides, P in CASES:
        cfgs = members(name, overrides, P)
        measured, estimated = measured_peak(cfgs), estimated_peak(cfgs)
        ratios.append(estimated / measured)
        print(f"{name:<30} {' '.join(o for o in overrides if o not in gpu.EVAL) or '(bench/gpu.py)':<52} {P:>3} "
              f"{measured / MIB:>12.1f} {estimated / MIB:>13.1f} {ratios[-1]:>12.2f}", flush=True)
    print(f"estimate/measured: min={min(ratios):.2f} max={max(ratios):.2f}")


if __name__ == "__main__":
    main()
