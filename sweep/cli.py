"""`headsweep <verb> CONFIG [key=value ...] --out DIR`.

Bad input (unknown key, wrong type, impossible lengths, a GPU that is not there) is one line on stderr naming the key
and the reason, exit code 2, and nothing written.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sweep import report_cli
from trainables.errors import ConfigError

EXIT_BAD_INPUT = 2


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, like every other bad-input error
        self.exit(EXIT_BAD_INPUT, f"headsweep: error: {message} (see headsweep --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="headsweep", description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True, parser_class=_Parser)
    train = verbs.add_parser("train", help="train one model and write config.yaml, metrics.jsonl, result.json, attention.npz")
    train.add_argument("config", help="YAML file in configs/ (its keys override the schema's defaults)")
    train.add_argument("overrides", nargs="*", help="dotlist overrides, e.g. task.lengths.low=3 seed=1")
    train.add_argument("--out", required=True, type=Path, help="output directory (created; re-running resumes)")

    grid = verbs.add_parser("grid", help="run every point of the config's sweep section as a Ray Tune trial")
    grid.add_argument("config", help="YAML file with a sweep: section (axes, constraints, seeds, resources)")
    grid.add_argument("overrides", nargs="*", help="dotlist overrides; sweep.* ones change the sweep itself")
    grid.add_argument("--out", required=True, type=Path, help="output directory (re-running resumes the grid)")
    grid.add_argument("--address", help="join this Ray cluster (host:port); default: RAY_ADDRESS, else a local Ray")

    search = verbs.add_parser("search", help="Optuna search for the minimal diversity that generalizes OOD, per slice")
    search.add_argument("config", help="YAML file with a search: section (knob, slices, success, sampler, budget)")
    search.add_argument("overrides", nargs="*", help="dotlist overrides; search.* ones change the search itself")
    search.add_argument("--out", required=True, type=Path, help="output directory (re-running resumes the studies)")
    search.add_argument("--study", help="study name prefix (default: the config's name); one study per slice")
    search.add_argument("--storage", help="Optuna storage URL, e.g. postgresql://user@host/db (default: "
                                          "DIR/study.journal)")
    search.add_argument("--extend", type=int, default=0, help="add N completed trials to each slice's budget")
    search.add_argument("--address", help="join this Ray cluster (host:port); default: RAY_ADDRESS, else a local Ray")
    report_cli.add_parsers(verbs)
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


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    try:
        return {"train": _train, "grid": _grid, "search": _search,
                "report": report_cli.report, "dashboard": report_cli.dashboard}[args.verb](args)
    except ConfigError as e:
        print(f"headsweep: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _train(args) -> int:
    from trainables import config as config_module
    from trainables.logger import trial_logger
    from trainables.train import save, train

    cfg = config_module.load(args.config, args.overrides)
    resolved = config_module.to_yaml(cfg)
    out = args.out
    _check_out_is_ours(out, resolved)
    if (out / "result.json").exists():
        print(f"already finished: {_summary(json.loads((out / 'result.json').read_text()))}  [{out}]")
        return 0

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(resolved)
    (out / "metrics.jsonl").unlink(missing_ok=True)  # an unfinished earlier attempt restarts from step 0
    with trial_logger(cfg, out) as logger:
        result = train(cfg, logger)
        logger.summary(result.metrics)
    save(result, out)
    print(f"{_summary(result.metrics)}  [{out}]")
    return 0


def _grid(args) -> int:
    from sweep import grid_outputs, results, space, tuner

    base, sweep, points = space.load_sweep(args.config, args.overrides)
    resolved = space.to_yaml(base, sweep)
    out = args.out
    _check_out_is_ours(out, resolved)
    tuner.connect(args.address)
    tuner.check_resources(sweep.resources)

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(resolved)
    errors = {}
    try:
        errors = results.tune_errors(tuner.run(base, sweep, points, out))
    finally:  # even when interrupted: what finished is in results.csv
        frame = results.collect(tuner.members(points, out), errors)
        grid_outputs.write(out, frame, base, sweep, resolved)
    counts = frame["status"].value_counts().to_dict()
    print(f"{len(frame)} trials: " + ", ".join(f"{n} {status}" for status, n in counts.items())
          + f"  [{out / 'results.csv'}, {out / 'report.html'}]")
    return 1 if set(counts) & {"error", "unfinished"} else 0


def _search(args) -> int:
    from omegaconf import OmegaConf

    from sweep import best_outputs, search_loop, search_outputs, tuner
    from sweep import search as searching
    from trainables import config as config_module

    if args.extend < 0:
        raise ConfigError("--extend", f"must be >= 0, got {args.extend}")
    base, search = searching.load_search(args.config, args.overrides)
    all_slices = searching.slices(base, search, args.study or base.name)
    resolved = config_module.to_yaml(base) + OmegaConf.to_yaml({"search": OmegaConf.structured(search)})
    out = args.out
    _check_out_is_ours(out, resolved)
    storage = searching.storage_for(args.storage, out.resolve()) if args.storage else None  # checked before Ray
    tuner.connect(args.address)
    tuner.check_resources(search.resources)

    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(resolved)
    storage = storage or searching.storage_for(None, out.resolve())
    studies = {sl.study_name: searching.open_study(sl, search, storage) for sl in all_slices}
    try:
        search_loop.run(base, search, all_slices, studies, out, args.extend)
    finally:  # even when interrupted: what finished is in the tables and the report
        trials = search_outputs.trial_rows(studies, all_slices, search, out)
        if search.minimize:
            table, name = best_outputs.best_rows(studies, all_slices, search, base, out), "best.csv"
            best_outputs.write(out, base, search, trials, table, resolved)
        else:
            table, name = search_outputs.min_diversity_rows(studies, all_slices, search, out), "min_diversity.csv"
            search_outputs.write(out, base, search, trials, table, resolved)
    shapes = [c for c in ("q", "reference q") if c in table.columns]
    print(table.drop(columns=["study", *shapes]).to_string(index=False))
    print(f"[{out / name}, {out / 'report.html'}]")
    return 0


def _check_out_is_ours(out: Path, resolved: str) -> None:
    """Re-running the same command on the same --out resumes; another config there would mix two experiments."""
    if (out / "config.yaml").exists() and (out / "config.yaml").read_text() != resolved:
        raise ConfigError("--out", f"{out} holds the results of a different config; choose another directory")


def _summary(m: dict) -> str:
    def fmt(key: str) -> str:
        value = m.get(key)
        return f"{key}={value:.3f}" if isinstance(value, float) else f"{key}={value}"

    keys = ("ood/acc", "id/acc", "ood/pseudo_rate", "mech/induction_score", "data/max_sum_ratio", "status", "steps")
    return " ".join(fmt(k) for k in keys) + f" ({m['seconds']:.1f} s)"


if __name__ == "__main__":
    sys.exit(main())
