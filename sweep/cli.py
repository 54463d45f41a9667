"""`headsweep <verb> CONFIG [key=value ...] --out DIR`: train, grid, search, report, compare and dashboard.

Bad input (unknown key, wrong type, impossible values, a GPU that is not there) is one line on stderr naming the key
and the reason, exit code 2, and nothing written. Heavy imports (torch, Ray, Optuna, W&B) happen inside the verbs,
so `--help` and argument errors answer at once.
"""
from __future__ import annotations

import argparse
import atexit
import os
import re
import select
import signal
import sys
import threading
from pathlib import Path

from sweep import stopping  # first: its settings of Ray's signal handlers must come before Ray is imported
from trainables.errors import ConfigError

EXIT_BAD_INPUT = 2
# What a shell reports for a command whose reader went away (`headsweep list | head`): killed by SIGPIPE.
EXIT_READER_GONE = 128 + signal.SIGPIPE
# W&B entity and project names: no slashes, spaces or URL syntax (the server rejects them, after the network trip).
_WANDB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, like every other bad-input error
        self.exit(EXIT_BAD_INPUT, f"headsweep: error: {message} (see headsweep --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="headsweep", description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    train = verbs.add_parser("train", help="train one model and write config.yaml, metrics.jsonl, result.json, "
                                           "attention.npz")
    train.add_argument("config", help="YAML file in configs/ (its keys override the schema's defaults)")
    train.add_argument("overrides", nargs="*", help="dotlist overrides, e.g. seed=1 eval.every=100")
    train.add_argument("--out", required=True, type=Path, help="output directory (created; re-running resumes)")

    grid = verbs.add_parser("grid", help="train every point of the config's sweep section, packed into Ray Tune trials")
    grid.add_argument("config", help="YAML file with a sweep: section (axes, constraints, seeds, resources)")
    grid.add_argument("overrides", nargs="*", help="dotlist overrides; sweep.* ones change the sweep itself")
    grid.add_argument("--out", required=True, help="output directory, or s3://bucket/prefix[?endpoint_override=URL] "
                                                   "(re-running resumes the grid)")

    search = verbs.add_parser("search", help="Optuna search for the minimal diversity that generalizes OOD, per slice")
    search.add_argument("config", help="YAML file with a search: section (knob, slices, success, sampler, budget)")
    search.add_argument("overrides", nargs="*", help="dotlist overrides; search.* ones change the search itself")
    search.add_argument("--out", required=True, help="output directory, or s3://bucket/prefix[?endpoint_override=URL] "
                                                     "with a --storage database (re-running resumes the studies)")
    search.add_argument("--study", help="study name prefix (default: the config's name); one study per slice")
    search.add_argument("--storage", help="Optuna storage: a database URL, e.g. postgresql://user:password@host/db, "
                                          "or a journal file path (default: DIR/study.journal)")
    search.add_argument("--extend", type=int, default=0,
                        help="add N to each slice's budget (seed trainings; completed Optuna trials with the "
                             "bisection, exhaustive and tpe samplers)")
    for verb in (grid, search):
        verb.add_argument("--address", help="join this Ray cluster (host:port); default: RAY_ADDRESS, else a local Ray")

    report = verbs.add_parser("report", help="(re)build report.html of a train, grid or search output dir")
    show = verbs.add_parser("show", help="print the table a train, grid or search printed (or so far), from its files: "
                                         "no Ray, no training")
    for verb in (report, show):
        verb.add_argument("dir", metavar="DIR", help="an output dir of headsweep train, grid or search "
                                                     "(or its s3:// place)")

    compare = verbs.add_parser("compare", help="the thresholds of several searches against the theory, one figure")
    compare.add_argument("dirs", nargs="+", metavar="DIR", help="output dirs (or s3:// places) of headsweep search")
    compare.add_argument("--out", required=True, type=Path, help="the figure (.png); its points go beside it (.csv)")

    verbs.add_parser("list", help="every task and model a config can name: where each comes from, its diversity knobs, "
                                  "success metric and training")

    dashboard = verbs.add_parser("dashboard", help="build the W&B workspace and report (JSON; --push saves)")
    dashboard.add_argument("--entity", required=True, help="W&B entity (user or team) that owns the project")
    dashboard.add_argument("--project", required=True, help="W&B project of the runs (logging.project)")
    dashboard.add_argument("--group", help="only the runs of this experiment (W&B group = config name)")
    dashboard.add_argument("--task", help="whose panels (task.name of the runs, a plugin's too; default: the first "
                                          "built-in task)")
    dashboard.add_argument("--push", action="store_true", help="save them to W&B (needs login and network)")
    dashboard.add_argument("--out", required=True, type=Path, help="directory for workspace.json, report.json")
    return parser


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The verb's arguments; key=value overrides may also come after the options (`--out DIR seed=1`)."""
    parser = _parser()
    args, extra = parser.parse_known_args(argv)
    if extra and (not hasattr(args, "overrides") or any(a.startswith("-") or "=" not in a for a in extra)):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if extra:
        args.overrides += extra
    return args


def run() -> None:
    """The `headsweep` command: main(), then exit without the interpreter's teardown of the modules it imported, which
    for torch and Ray takes 0.7 s after every command (measured; 0.04 s without it). What that teardown does that
    matters is done first: other non-daemon threads joined, exit handlers run (Ray's, W&B's, logging's), output
    flushed. Every file headsweep writes is closed before main() returns. An exception or SystemExit ends the usual
    way."""
    code = main()
    # What the interpreter does first at exit: threading's own exit hooks, which tell idle ThreadPoolExecutor workers to
    # stop (torch.compile leaves some), then every non-daemon thread joined. Joining them without the hooks waited
    # forever on those workers: a compiled `headsweep train` finished its run and never exited.
    threading._shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    stopping.on_sigterm()
    try:
        code = {"train": _train, "grid": _grid, "search": _search, "report": _report, "show": _show,
                "compare": _compare, "list": _list, "dashboard": _dashboard}[args.verb](args)
        sys.stdout.flush()  # here, not at exit: a reader that has gone away is then seen below
        return code
    except ConfigError as e:
        print(f"headsweep: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM (sweep/stopping.py)
        if isinstance(stop, stopping.Stopped):  # what finished, as the table the verb prints at its end
            print(stop.so_far, flush=True)
        why = stopping.stopped_by()
        # grids and searches keep every finished member and resume
        resumes = (f"its finished members are in {args.out} (results so far in its tables and report.html); run the "
                   "same command again to resume: nothing finished is trained again" if args.verb in ("grid", "search")
                   else "nothing was kept that a rerun would not redo")
        print(f"headsweep: stopped ({'Ctrl-C' if why == signal.SIGINT else why.name}); {resumes}", file=sys.stderr)
        return 128 + why
    except BrokenPipeError:
        if not _stdout_reader_gone():  # another pipe or socket broke (a worker's): a real error, with its traceback
            raise
        # What is still buffered, and whatever exit handlers print, goes nowhere instead of failing again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_READER_GONE


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe or socket whose reading end is closed (Linux's poll says POLLERR or POLLHUP)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
    except (OSError, ValueError):  # stdout is no file (replaced, or closed)
        return False
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


def _train(args) -> int:
    from sweep import show, single
    from trainables import config
    from trainables.tasks import task_of, view_of

    cfg = config.load(args.config, args.overrides)
    metrics, before = single.run(cfg, args.out)
    print(f"{'already finished: ' if before else ''}{show.line(metrics, view_of(task_of(cfg)).headline)}  [{args.out}]")
    return 0


def _grid(args) -> int:
    from sweep import grid, space
    from trainables.io import FAILED

    base, sweep, points = space.load_sweep(args.config, args.overrides)
    out, frame = grid.run(base, sweep, points, args.out, args.address)
    print(grid.summary(base, sweep, frame, out))
    return 1 if frame["status"].isin(FAILED).any() else 0


def _search(args) -> int:
    from sweep import search
    from sweep.search.config import load_search

    base, section = load_search(args.config, args.overrides)
    out, table = search.run(base, section, args.out, args.study, args.storage, args.extend, args.address)
    print(search.summary(base, section, table, out))
    return 0


def _report(args) -> int:
    from dashboards import report
    from sweep.storage.out_dir import OutDir

    out = OutDir.open(args.dir)
    path = report.build(out.local)
    out.sync()
    print(f"{out}/report.html (local copy: {path})" if out.mirror else path)
    return 0


def _show(args) -> int:
    from sweep import show
    from sweep.storage.out_dir import OutDir

    print(show.text(OutDir.open(args.dir)))
    return 0


def _compare(args) -> int:
    from dashboards.compare import compare
    from sweep.storage.out_dir import OutDir

    figure, table = compare([OutDir.open(d).local for d in args.dirs], args.out)
    print(f"wrote {figure}, {table}")
    return 0


def _dashboard(args) -> int:
    from trainables.logger import resolve_wandb_mode
    from trainables.tasks import TASKS

    for flag, value in (("--entity", args.entity), ("--project", args.project)):
        if not _WANDB_NAME.match(value):
            raise ConfigError(flag, f"{value!r} is not a W&B name (letters, digits, '_', '-', '.'; no slashes)")
    if args.group is not None and not args.group.strip():
        raise ConfigError("--group", "must not be empty")
    try:
        task = TASKS[args.task or TASKS.default]
    except ConfigError as e:
        raise ConfigError("--task", e.reason) from None
    if args.push:
        mode, why = resolve_wandb_mode("online")
        if mode != "online":  # before building anything: a push that cannot happen writes nothing
            raise ConfigError("--push", f"cannot reach W&B ({why}); run without --push to write the JSON specs")

    from dashboards import workspace
    from trainables.io import create_out

    create_out(args.out)
    paths = workspace.write_specs(args.out, task, args.entity, args.project, args.group)
    print("wrote " + ", ".join(str(p) for p in paths))
    if args.push:
        urls = workspace.push(task, args.entity, args.project, args.group)
        print(f"saved workspace: {urls['workspace']}\nsaved report: {urls['report']}")
    return 0


def _list(args) -> int:
    """Each registry's names, one block each: name, where it comes from, what it is; a plugin that cannot be loaded
    says why on its line and spoils nothing else."""
    from trainables.models import MODELS
    from trainables.tasks import TASKS

    width = max(len(name) for registry in (TASKS, MODELS) for name in registry.sources())  # one column for all
    for registry, describe in ((TASKS, _describe_task), (MODELS, _describe_model)):
        print(f"{registry.kind}s ({registry.key}: one of these, or a module path my_package.my_module:ATTR):")
        for name, sources in registry.sources().items():
            try:
                facts = describe(registry[name])
            except ConfigError as e:
                facts = [f"not usable: {e.reason}"]
            origin = " and ".join(s.origin for s in sources)
            print(f"  {name:<{width}} {origin}")
            for line in facts:
                print(f"  {'':<{width}}   {line}")
    return 0


def _describe_task(task) -> list[str]:
    direction = ">=" if task.success_above else "<="
    return _doc(task) + [
        f"diversity knobs: {', '.join(task.knobs) or '(none declared)'}; axis: {task.diversity_axis or '(none)'}",
        f"success: {task.success_metric} {direction} eval.threshold"]


def _describe_model(spec) -> list[str]:
    trained = "by optim.*" if spec.uses_optim else "by its own phases (model.*)"
    reads = "one query position per sequence" if spec.needs_query else "every position"
    return _doc(spec) + [f"reads {reads}; trained {trained}"]


def _doc(obj) -> list[str]:
    """The first line of the docstring of the object's own class, if it has one (class docstrings are not inherited)."""
    return (type(obj).__doc__ or "").strip().splitlines()[:1]


if __name__ == "__main__":
    run()
