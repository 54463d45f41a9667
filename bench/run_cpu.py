"""The CPU one `headsweep` command costs a running Ray head, by process kind, variants alternated in one run.

    python bench/run_cpu.py --runs 2 -- search configs/debug_search.yaml
    (variants: `--variant NAME=OVERRIDE ...`; default: search.max_concurrent=0 against =1)

A head is started as the integration tests start theirs (tests/e2e/conftest.py: 2 CPUs, 127.0.0.1, no dashboard)
and each command joins it through RAY_ADDRESS, as a driver on a cluster's head does. The driver's CPU comes from
wait4; the head's processes (its servers and every worker it starts: they share its session) are read every
SAMPLE_S while the command runs, each at its last reading, so a worker's last SAMPLE_S before it exits may go
uncounted (the raylet ignores SIGCHLD, so its children's CPU never reaches its own counters). Process accounting
(`accton`, as root) counts the same within a few percent: docs/PERFORMANCE.md. The machine should be otherwise
idle: another process's CPU is not counted, but it slows what is.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.e2e.conftest import FOREIGN_RAY_VARS, session_processes, start_head, stop_head  # noqa: E402

HEADSWEEP = str(Path(sys.executable).parent / "headsweep")
SAMPLE_S = 0.1
SETTLE_S = 3  # after the driver exits: Ray ends the job's workers


class HeadWatch(threading.Thread):
    """The latest CPU seconds (user + system) of each process of the head's session, read every SAMPLE_S, and
    which of them were trial workers (Tune's actors, titled `ray::ImplicitFunc...`)."""

    def __init__(self, head):
        super().__init__(daemon=True)
        self.head, self.cpu, self.trial_workers, self.done = head, {}, set(), threading.Event()
        self.read()

    def read(self) -> None:
        for process in session_processes(self.head.process) + [psutil.Process(self.head.process.pid)]:
            try:
                key, times = (process.pid, process.create_time()), process.cpu_times()
                self.cpu[key] = times.user + times.system
                if process.name().startswith("ray::ImplicitFunc"):
                    self.trial_workers.add(key)
            except psutil.Error:
                pass  # it ended between listing and reading

    def run(self) -> None:
        while not self.done.wait(SAMPLE_S):
            self.read()

    def stop(self) -> None:
        self.done.set()
        self.join()
        self.read()


def run_once(head, args: list[str], out: Path) -> tuple[float, float, float, int]:
    """(wall s, driver CPU s, head CPU s, trial workers started) of one command."""
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_RAY_VARS} | head.env | {"OMP_NUM_THREADS": "1"}
    watch = HeadWatch(head)
    before, workers_before = dict(watch.cpu), set(watch.trial_workers)
    watch.start()
    started = time.monotonic()
    pid = os.posix_spawn(HEADSWEEP, [HEADSWEEP, *args, "--out", str(out)], env,
                         file_actions=[(os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                                       (os.POSIX_SPAWN_OPEN, 2, os.devnull, os.O_WRONLY, 0)])
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - started
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"run_cpu: `headsweep {' '.join(args)}` failed ({os.waitstatus_to_exitcode(status)})")
    time.sleep(SETTLE_S)
    watch.stop()
    head_cpu = sum(cpu - before.get(key, 0.0) for key, cpu in watch.cpu.items())
    return wall, usage.ru_utime + usage.ru_stime, head_cpu, len(watch.trial_workers - workers_before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2, help="runs of each variant, alternated")
    parser.add_argument("--variant", action="append", metavar="NAME=OVERRIDE",
                        help="a labelled override added to the command (repeat; default: max_concurrent 0 and 1)")
    parser.add_argument("command", nargs="+", help="the headsweep verb and its arguments, without --out")
    args = parser.parse_args()
    section = "sweep" if args.command[0] == "grid" else "search"
    variants = dict(v.split("=", 1) for v in args.variant) if args.variant else {
        "slots decide": f"{section}.max_concurrent=0", "one at a time": f"{section}.max_concurrent=1"}
    head = start_head(dashboard=False)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as scratch:
            for run in range(args.runs):
                for name, override in variants.items():
                    out = Path(scratch) / f"{len(rows)}"
                    rows.append((name, *run_once(head, [*args.command, override], out)))
                    print(f"{name:>16}: wall {rows[-1][1]:5.1f} s, CPU {rows[-1][2] + rows[-1][3]:5.1f} s "
                          f"(driver {rows[-1][2]:.1f}, head {rows[-1][3]:.1f}), trial workers {rows[-1][4]}",
                          flush=True)
    finally:
        stop_head(head)
    print(f"\n{' '.join(args.command)}, {args.runs} run(s) each, alternated; CPU = driver + head's processes")
    for name in variants:
        mine = [r for r in rows if r[0] == name]
        print(f"{name:>16}: CPU {', '.join(f'{r[2] + r[3]:.1f}' for r in mine)} s; wall "
              f"{', '.join(f'{r[1]:.1f}' for r in mine)} s; trial workers {', '.join(str(r[4]) for r in mine)}")


if __name__ == "__main__":
    main()
