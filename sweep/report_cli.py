"""`headsweep report DIR` and `headsweep dashboard --entity E --project P [--push] --out DIR`.

report rebuilds the self-contained report.html of any train, grid or search output; dashboard builds the W&B
workspace and report specs (wandb-workspaces) offline and writes their JSON, or with --push saves them to W&B.
"""
from __future__ import annotations

import re
from pathlib import Path

from trainables.errors import ConfigError

# W&B entity and project names: no slashes, spaces or URL syntax (the server rejects them, after the network trip).
_WANDB_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


def add_parsers(verbs) -> None:
    """Register the two verbs on headsweep's subparsers."""
    report_parser = verbs.add_parser("report", help="(re)build report.html of a train, grid or search output dir")
    report_parser.add_argument("dir", type=Path, metavar="DIR", help="an output dir of headsweep train, grid or search")

    dashboard_parser = verbs.add_parser("dashboard", help="build the W&B workspace and report (JSON; --push saves)")
    dashboard_parser.add_argument("--entity", required=True, help="W&B entity (user or team) that owns the project")
    dashboard_parser.add_argument("--project", required=True, help="W&B project of the runs (logging.project)")
    dashboard_parser.add_argument("--group", help="only the runs of this experiment (W&B group = config name)")
    dashboard_parser.add_argument("--push", action="store_true", help="save them to W&B (needs login and network)")
    dashboard_parser.add_argument("--out", required=True, type=Path, help="directory for workspace.json, report.json")


def report(args) -> int:
    from dashboards import local_report

    path = local_report.build(args.dir)
    print(path)
    return 0


def dashboard(args) -> int:
    from trainables.logger import resolve_wandb_mode

    for flag, value in (("--entity", args.entity), ("--project", args.project)):
        if not _WANDB_NAME.match(value):
            raise ConfigError(flag, f"{value!r} is not a W&B name (letters, digits, '_', '-', '.'; no slashes)")
    if args.group is not None and not args.group.strip():
        raise ConfigError("--group", "must not be empty")
    if args.push:
        mode, why = resolve_wandb_mode("online")
        if mode != "online":  # before building anything: a push that cannot happen writes nothing
            raise ConfigError("--push", f"cannot reach W&B ({why}); run without --push to write the JSON specs")

    from dashboards import workspace

    paths = workspace.write_specs(args.out, args.entity, args.project, args.group)
    print("wrote " + ", ".join(str(p) for p in paths))
    if args.push:
        urls = workspace.push(args.entity, args.project, args.group)
        print(f"saved workspace: {urls['workspace']}\nsaved report: {urls['report']}")
    return 0
