"""Packed training on a GPU, in one table (issue [gpu]): for the one-step model, the trigger-copy transformer and the
regression transformer, training steps per second at P = 1, 8, 64 and 256 packed members, eager and replayed as CUDA
graphs (`optim.compile=reduce-overhead`), the member-steps per second that makes against one model per process
(P = 1, eager), trainings per hour, peak GPU memory against trainables/memory.py's estimate, and the torch operations
dispatched and host syncs per step (trainables/op_count.py).

On the GPU machine, from the repository root (torch, numpy and PyYAML are there; omegaconf, antlr4 and tqdm come as
pure-Python wheels in .whl/, which git ignores; no Ray, Optuna or W&B is needed), about 5 minutes on an H100, under 8:

    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD && PYTHONUNBUFFERED=1 timeout 470 python3 bench/gpu.py --out $OUT

and in the test suite on the CPU, in seconds (P = 1, 2; no CUDA graphs there): `.venv/bin/python bench/gpu.py --tiny`.

What is timed is the training loop's step between evaluations, exactly as train_members runs it (one batch draw for
every member, one population.Stack.step): a loop of it between two device synchronisations, after warm-up steps (the
optimizer's state, cuBLAS, torch.compile and the CUDA graphs' recording, which take up to a minute a row). Set-up and
evaluations are not timed, so trainings per hour are what the training steps alone allow. "One model per process" is
P = 1 eager: the step train(cfg) takes (no vmap). CUDA graphs replay what Stack compiles, the forward and backward;
the batch draw and the fused optimizer step stay eager. Members differ in seed. Peak memory is
torch.cuda.max_memory_allocated above what was allocated before the row, cuBLAS's workspaces excluded (allocated
before the first row, their size in the header; the first run, on 2026-11-27, counted them in its first row); the
estimate is the packing planner's, memory.needs(cfg, P) at the training batch's key (sweep/packing.py;
bench/memory_estimate.py measures the same peak on the CPU). Each row is printed as soon as it is measured and the
--out files (gpu.md, gpu.json, errors.txt) are rewritten, so a timeout keeps what was done; a row that runs out of
memory reads OOM (and larger P of that model and mode are skipped), any other failure its error, with the traceback
in errors.txt.
"""
from __future__ import annotations

import argparse
import gc
import json
import platform
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a plain checkout too (the GPU machine has no editable install)

from trainables import config, memory  # noqa: E402
from trainables.models import MODELS  # noqa: E402
from trainables.op_count import OpCounter  # noqa: E402
from trainables.population import Batches, Stack, compile_mode  # noqa: E402
from trainables.train import init_state  # noqa: E402

# label -> (config, the tiny mode's overrides: the same model, small batches)
BENCHED = {
    "one-step": ("quickstart.yaml", ["model.n_samples_V=64", "model.n_samples_KQ=64"]),
    "trigger-copy transformer": ("transformer_search.yaml", ["optim.batch_size=8"]),
    "regression transformer": ("regression_diversity_gpu.yaml", ["optim.batch_size=8"]),
}
# Small evaluation sets: init_state draws them for every member, and the estimate is then the training batch's.
EVAL = ["eval.n_id=32", "eval.n_ood=32", "eval.n_examples=1", "logging.wandb=false"]
TINY_EVAL = ["eval.n_id=16", "eval.n_ood=16", "eval.n_examples=1", "logging.wandb=false"]
MODES = {"eager": "never", "cuda graphs": "reduce-overhead"}  # the table's mode -> optim.compile
MIB = 2 ** 20
# Seconds a row needs at least to be started within --budget: CUDA graphs' rows compile first.
ROW_SECONDS = {"eager": 10, "cuda graphs": 90}
COLUMNS = ("model", "P", "mode", "steps/s", "member-steps/s", "x alone", "trainings/h", "peak MiB", "estimate MiB",
           "est/peak", "ops/step", "syncs/step", "status")


def members(name: str, overrides: list[str], count: int, device: str, mode: str) -> list:
    """`count` members of the config, differing in seed."""
    base = config.load(ROOT / "configs" / name, [*overrides, f"device={device}", f"optim.compile={MODES[mode]}"],
                       check_device=False)
    base_dict = config.to_dict(base)
    return [config.with_point(base_dict, {"seed": seed}, check_device=False) for seed in range(count)]


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def measure(cfgs: list, warmup: int, steps: int, seconds: float, count_ops: bool) -> dict:
    """The row's numbers for these members trained as one population (P = len(cfgs))."""
    device = cfgs[0].device
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    compiled = compile_mode(cfgs[0])
    skips = cudagraph_skips() if compiled else 0
    trials = [init_state(cfg) for cfg in cfgs]  # each member's state and evaluation sets, held as a trial holds them
    states = [state for state, _, _ in trials]
    stack, batches = Stack(states, compiled), Batches(cfgs, states)
    phases = states[0].phases
    done = 0

    def step() -> None:  # the loop's step between evaluations; the phases in turn (the one-step model has two)
        nonlocal done
        phase = done % len(phases)
        stack.step(batches.draw(phases[phase].batch_size), phase)
        done += 1

    for _ in range(warmup):
        step()
    sync(device)
    start, timed = time.perf_counter(), 0
    while timed < steps and (timed < min(steps, 10) or time.perf_counter() - start < seconds):
        step()
        timed += 1
    sync(device)
    elapsed = time.perf_counter() - start
    row = {"steps/s": timed / elapsed, "timed_steps": timed, "training_steps": states[0].total_steps,
           "estimate MiB": estimate(cfgs) / MIB}
    if compiled and cudagraph_skips() > skips:  # inductor compiled the step but would not capture it (its log says why)
        row["status"] = f"ok, CUDA graphs skipped {cudagraph_skips() - skips}x"
    if device == "cuda":
        row["peak MiB"] = (torch.cuda.max_memory_allocated() - before) / MIB
    if count_ops:  # as many steps as phases, so every phase's step is counted once
        with OpCounter() as counter:
            for _ in phases:
                step()
        row |= {"ops/step": counter.total / len(phases), "syncs/step": sum(counter.syncs.values()) / len(phases)}
    return row


def estimate(cfgs: list) -> int:
    """The packing planner's bytes for these members as one population (memory.needs(cfg, P), sweep/packing.py) at
    the training batches' keys: a training step's peak."""
    peaks, spec = memory.needs(cfgs[0], len(cfgs)), MODELS[cfgs[0].model.name]
    return max(peaks[key] for key in spec.batch_sizes(cfgs[0].model, cfgs[0].optim))


def warm_cublas(device: str) -> float:
    """Make cuBLAS allocate its workspaces before the rows, so that no row counts them: torch keeps one per thread
    that multiplies (the forward's and the autograd engine's), 32 MiB each on a Hopper GPU. The MiB they took."""
    if device != "cuda":
        return 0.0
    before = torch.cuda.memory_allocated()
    weight = torch.ones(8, 8, device=device, requires_grad=True)
    ((weight @ weight).sum() + torch.nn.functional.linear(weight, weight, weight[0]).sum()).backward()  # mm, addmm
    del weight
    sync(device)
    return (torch.cuda.memory_allocated() - before) / MIB


def cudagraph_skips() -> int:
    """How often inductor has declined to capture a compiled graph as a CUDA graph in this process."""
    from torch._dynamo.utils import counters
    return counters["inductor"]["cudagraph_skips"]


def release(compiled: bool) -> None:
    """Free what the last row held (its CUDA graphs' memory pools with dynamo's caches)."""
    if compiled:
        torch._dynamo.reset()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def cells(row: dict) -> list[str]:
    def number(key: str, digits: int = 0) -> str:
        value = row.get(key)
        return "" if value is None else f"{value:,.{digits}f}"
    status = row.get("status", "ok")
    if "steps/s" not in row:
        return [row["model"], str(row["P"]), row["mode"], *[""] * (len(COLUMNS) - 4), status]
    ratio = row["estimate MiB"] / row["peak MiB"] if row.get("peak MiB") else None
    return [row["model"], str(row["P"]), row["mode"], number("steps/s", 1), number("member-steps/s", 1),
            number("x alone", 2), number("trainings/h", 0 if row["trainings/h"] >= 100 else 2),
            number("peak MiB") or "n/a", number("estimate MiB", 1),
            "" if ratio is None else f"{ratio:.2f}", number("ops/step"), number("syncs/step", 1), status]


def table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join(lines + ["| " + " | ".join(cells(row)) + " |" for row in rows])


def summary(rows: list[dict]) -> list[str]:
    """Per model: its best packed rate against one model per process (P = 1 eager), and against the best P = 1."""
    lines = []
    for model, (name, _) in BENCHED.items():
        ok = [r for r in rows if r["model"] == model and "x alone" in r]
        alone, packed = [r for r in ok if r["P"] == 1], [r for r in ok if r["P"] > 1]
        if not alone or not packed:
            continue
        best, best_alone = max(packed, key=lambda r: r["member-steps/s"]), max(alone, key=lambda r: r["steps/s"])
        line = (f"{model}: best packed P={best['P']} {best['mode']}, {best['member-steps/s']:,.1f} member-steps/s = "
                f"{best['x alone']:.1f}x one model per process (P=1 eager)")
        if best_alone["mode"] != "eager":
            line += f", {best['member-steps/s'] / best_alone['steps/s']:.1f}x P=1 {best_alone['mode']}"
        lines.append(line + f"; goal >= 20x: {'met' if best['x alone'] >= 20 else 'not met'}")
        if not MODELS[config.load(ROOT / "configs" / name, check_device=False).model.name].vectorize:
            lines.append(f"  ({model}: ModelSpec.vectorize is False, so a sweep trains its packed members one after "
                         "another; the rows P > 1 are what vmapping them does)")
    return lines


def machine(device: str) -> str:
    name = torch.cuda.get_device_name() if device == "cuda" else platform.processor() or platform.machine()
    cuda = f", CUDA {torch.version.cuda}" if device == "cuda" else f", {torch.get_num_threads()} threads"
    return f"{name}, torch {torch.__version__}{cuda}, Python {platform.python_version()}"


def write(out: Path | None, header: str, rows: list[dict], errors: list[str]) -> None:
    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu.md").write_text("\n".join([header, "", table(rows), "", *summary(rows)]) + "\n")
    (out / "gpu.json").write_text(json.dumps({"machine": header, "rows": rows, "summary": summary(rows)}, indent=1))
    (out / "errors.txt").write_text("\n".join(errors))


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="P = 1, 2, small batches, a few steps, on the CPU")
    parser.add_argument("--device", help="cuda (the default where there is one) or cpu")
    parser.add_argument("--members", type=int, nargs="+", help="P (default 1 8 64 256; tiny 1 2)")
    parser.add_argument("--graph-members", type=int, nargs="+", default=[1, 64],
                        help="P replayed as CUDA graphs too (each compiles for 30-60 s)")
    parser.add_argument("--steps", type=int, help="timed steps per row at most (default 200; tiny 2)")
    parser.add_argument("--seconds", type=float, default=3.0, help="a row's timing stops after this (and 10 steps)")
    parser.add_argument("--warmup", type=int, help="untimed steps first (default 5; tiny 1)")
    parser.add_argument("--budget", type=float, default=400.0,
                        help="seconds in all: rows that would start too late are skipped")
    parser.add_argument("--out", type=Path, help="folder for gpu.md, gpu.json and errors.txt")
    args = parser.parse_args(argv)
    args.device = args.device or ("cuda" if torch.cuda.is_available() and not args.tiny else "cpu")
    args.members = args.members or ([1, 2] if args.tiny else [1, 8, 64, 256])
    args.steps = args.steps or (2 if args.tiny else 200)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.tiny else 5)
    return args


def run_row(model: str, P: int, mode: str, args: argparse.Namespace, started: float, failed_at: dict,
            errors: list[str]) -> dict:
    """One row of the table: measured, or why not."""
    name, tiny = BENCHED[model]
    row = {"model": model, "P": P, "mode": mode}
    if mode != "eager" and args.device != "cuda":
        return row | {"status": "n/a (cpu)"}
    if mode != "eager" and not MODELS[config.load(ROOT / "configs" / name, check_device=False).model.name].uses_optim:
        return row | {"status": "n/a (not trained by optim)"}
    if (model, mode) in failed_at:
        return row | {"status": f"skipped (OOM at P={failed_at[model, mode]})"}
    if time.perf_counter() - started > args.budget - ROW_SECONDS[mode]:
        return row | {"status": "skipped (time)"}
    try:
        cfgs = members(name, [*tiny, *TINY_EVAL] if args.tiny else EVAL, P, args.device, mode)
        row |= measure(cfgs, args.warmup, args.steps, args.seconds, count_ops=mode == "eager")
    except Exception as error:  # noqa: BLE001  (one row's failure, e.g. on CUDA, must not end the table)
        message = (str(error).strip().splitlines() or [""])[0][:100]
        if isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error):
            row["status"], failed_at[model, mode] = "OOM", P
        else:
            row["status"] = f"{type(error).__name__}: {message}"
        errors.append(f"{model} P={P} {mode}:\n{traceback.format_exc()}")
    release(mode != "eager")  # after the except clause: its traceback held the row's tensors
    return row


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse(argv)
    started = time.perf_counter()
    header = f"{machine(args.device)}; bench/gpu.py {' '.join(sys.argv[1:] if argv is None else argv)}"
    if args.device == "cuda":
        header += f"; cuBLAS workspaces {warm_cublas(args.device):.0f} MiB, allocated before the rows"
    print(header, table([]), sep="\n", flush=True)
    plan = [(model, P, "eager") for model in BENCHED for P in args.members]  # the eager rows first: the cheap ones
    plan += [(model, P, "cuda graphs") for model in BENCHED for P in args.members if P in args.graph_members]
    rows, errors, failed_at = [], [], {}
    for model, P, mode in plan:
        row = run_row(model, P, mode, args, started, failed_at, errors)
        if "steps/s" in row:
            row["member-steps/s"] = row["steps/s"] * P
            row["trainings/h"] = row["member-steps/s"] * 3600 / row["training_steps"]
            alone = [r for r in rows + [row] if (r["model"], r["P"], r["mode"]) == (model, 1, "eager")]
            if alone and "steps/s" in alone[0]:
                row["x alone"] = row["member-steps/s"] / alone[0]["steps/s"]
        rows.append(row)
        print(table([row]).splitlines()[-1], f"({time.perf_counter() - started:.0f} s)", flush=True)
        write(args.out, header, rows, errors)
    print(f"\n{header}\n\n{table(rows)}\n", *summary(rows), sep="\n", flush=True)
    print(f"trainings/h: training steps alone (evaluations and set-up not timed) at each config's steps per training; "
          f"x alone: member-steps/s against P=1 eager's steps/s; total {time.perf_counter() - started:.0f} s",
          flush=True)
    return rows


if __name__ == "__main__":
    main()
