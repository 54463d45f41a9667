"""The driver CPU of a `headsweep` command started cold (the executable) and warm (forked from tests/warm_cli.py's
server, as the integration tests start most of theirs), alternated in one run.

    python bench/warm_cli.py --runs 3
    python bench/warm_cli.py --runs 3 --not-preloaded scipy.stats   (the server without one of its preloads)

Each command joins a running 2-CPU head as the tests' do (tests/e2e/conftest.py). A cold command's CPU is its own
(the children's rusage of this process); a warm one's is what its fork server reaps (the server's children CPU),
both the driver alone: the head's workers are the same either way and not counted.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ["OMP_NUM_THREADS"] = "1"  # as tests/conftest.py
from tests import warm_cli  # noqa: E402
from tests.e2e.conftest import FOREIGN_RAY_VARS, start_head, stop_head  # noqa: E402

COMMANDS = {
    "debug train": ["train", str(ROOT / "configs/debug.yaml"), "optim.max_steps=50", "eval.every=50"],
    "debug grid": ["grid", str(ROOT / "configs/debug_grid.yaml")],
    "refused config": ["grid", str(ROOT / "configs/debug_grid.yaml"), "sweep.seeds=x"],
    "list": ["list"],
}


def children_cpu(pid: int | None = None) -> float:
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime
    times = psutil.Process(pid).cpu_times()
    return times.children_user + times.children_system


def run_once(args: list[str], env: dict, warm: bool) -> float:
    """Driver CPU seconds of one command (it must end with the exit code it is meant to)."""
    server = warm_cli.multiprocessing.forkserver._forkserver._forkserver_pid if warm else None  # started by main()
    before = children_cpu(server)
    if warm:
        proc = warm_cli.run(args, env, timeout=600)
    else:
        proc = subprocess.run([warm_cli.HEADSWEEP, *args], env=env, capture_output=True, text=True, timeout=600,
                              stdin=subprocess.DEVNULL)
    if proc.returncode != (2 if "sweep.seeds=x" in args else 0):
        sys.exit(f"warm_cli bench: `headsweep {' '.join(args)}` exited {proc.returncode}: {proc.stderr[-2000:]}")
    time.sleep(0.5)  # the server reaps its child
    return children_cpu(server) - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each command and way, alternated")
    parser.add_argument("--not-preloaded", action="append", default=[], metavar="MODULE",
                        help="a module of tests/warm_cli.py's PRELOAD the server leaves out (repeat)")
    args = parser.parse_args()
    runs = args.runs
    for module in args.not_preloaded:
        if module not in warm_cli.PRELOAD:
            parser.error(f"--not-preloaded: {module} is not preloaded (tests/warm_cli.py: PRELOAD)")
        warm_cli.PRELOAD.remove(module)
    head = start_head(dashboard=False)
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_RAY_VARS} | head.env
    cpu: dict[tuple[str, bool], list[float]] = {}
    try:
        warm_cli.run(["list"], env, timeout=600)  # the server starts (and preloads) once, as in a test session
        with tempfile.TemporaryDirectory() as scratch:
            for run in range(runs):
                for name, command in COMMANDS.items():
                    for warm in (False, True):
                        out = ["--out", f"{scratch}/{run}-{warm}-{command[0]}"]
                        args = command + (out if command[0] in ("grid", "train") else [])
                        cpu.setdefault((name, warm), []).append(run_once(args, env, warm))
                        print(f"{name:>15} {'warm' if warm else 'cold'}: {cpu[name, warm][-1]:.2f} s CPU", flush=True)
    finally:
        stop_head(head)
    print(f"\ndriver CPU, median of {runs} alternated runs each (cold / warm, ratio)")
    for name in COMMANDS:
        cold, warm = statistics.median(cpu[name, False]), statistics.median(cpu[name, True])
        print(f"{name:>15}: {cold:.2f} s / {warm:.2f} s  ({cold / warm:.1f}x; {cold - warm:.2f} s less)")


if __name__ == "__main__":
    main()
