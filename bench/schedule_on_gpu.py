"""A learning-rate schedule and gradient clipping on a GPU (issue [schedules]): 100 scheduled, clipped steps of a
packed population of 8 trigger-copy transformers read nothing back to the host (torch.cuda.set_sync_debug_mode
"error"), and three packed members end where each ends alone on the GPU and alone on the CPU.

On the GPU machine (PyTorch only; omegaconf and tqdm from .whl/, as bench/gpu.py):
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD && python3 bench/schedule_on_gpu.py
On the CPU (tests/unit/test_gpu_bench.py runs it so, small): python bench/schedule_on_gpu.py --device cpu --steps 20
"""
import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from trainables import config  # noqa: E402
from trainables.logger import Logger  # noqa: E402
from trainables.population import Batches, Stack  # noqa: E402
from trainables.train import init_state, train_members  # noqa: E402

KEYS = ("train/loss", "train/lr", "id/loss", "ood/acc")


def member(seed: int, device: str, steps: int):
    return config.load(Path(__file__).resolve().parents[1] / "configs/debug.yaml",
                       [f"seed={seed}", f"device={device}", f"optim.max_steps={steps}", "optim.schedule=cosine",
                        f"optim.warmup_steps={steps // 6}", "optim.clip_norm=0.5", f"eval.every={steps // 3}",
                        "eval.n_id=256", "eval.n_ood=256"])


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--steps", type=int, default=300, help="training steps of each run compared")
    args = parser.parse_args(argv)
    cfgs = [member(i, args.device, args.steps) for i in range(8)]
    print(torch.cuda.get_device_name() if args.device == "cuda" else "cpu", torch.__version__, flush=True)
    states = [init_state(c)[0] for c in cfgs]
    stack, batches = Stack(states), Batches(cfgs, states)
    n = states[0].phases[0].batch_size
    stack.step(batches.draw(n), 0, 0)  # creates the optimizer's state
    steps, on_gpu = min(100, args.steps // 2), args.device == "cuda"
    if on_gpu:  # any host synchronisation in the steps raises (the CPU has none to catch)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
    start = time.perf_counter()
    try:
        for t in range(1, steps + 1):
            stack.step(batches.draw(n), 0, t)
    finally:
        if on_gpu:
            torch.cuda.set_sync_debug_mode(0)
            torch.cuda.synchronize()
    rate = steps / (time.perf_counter() - start)
    lr = stack.optimizers[0].param_groups[0]["lr"]
    print(f"{steps} scheduled, clipped steps of 8 members on {args.device}: no host sync; {rate:.1f} steps/s; "
          f"lr now {lr:.6f} (lr_at({steps}) = {cfgs[0].optim.lr_at(steps):.6f})", flush=True)
    packed = train_members(cfgs[:3], [Logger() for _ in range(3)], [None] * 3)
    rows = {}
    for i in range(3):
        alone = train_members([cfgs[i]], [Logger()], [None])[0]
        on_cpu = train_members([member(i, "cpu", args.steps)], [Logger()], [None])[0]
        rows[i] = {name: [round(result.metrics[k], 5) for k in KEYS]
                   for name, result in (("packed", packed[i]), ("alone", alone), ("alone on cpu", on_cpu))}
        print(f"seed {i} {KEYS}: " + " | ".join(f"{name} {values}" for name, values in rows[i].items()), flush=True)
    return {"lr": lr, "lr_expected": cfgs[0].optim.lr_at(steps), "rows": rows}


if __name__ == "__main__":
    main()
