"""The `sweep:` section: axes, constraints and seeds -> the list of trial points a grid runs.

A point is {dotted key: value} (seed included); a trial's config is the base config with the point applied, so the
trainable only ever sees a base dict and a point, and a point's id names its directory.
"""
from __future__ import annotations

import difflib
import hashlib
import itertools
import json
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweep.verdicts import StopConfig, rule_per_point
from trainables import config
from trainables.errors import ConfigError, require
from trainables.io import ERROR_FILE, read_json
from trainables.tasks import task_of


@dataclass
class AxisConfig:
    """One swept key: explicit values, or an inclusive integer range [low, high] (with an optional step)."""

    key: str = "???"  # dotted config key
    values: list[Any] = field(default_factory=list)
    range: list[int] = field(default_factory=list)  # [low, high] or [low, high, step], both ends included


@dataclass
class ResourcesConfig:
    """What one trial asks Ray for; fractions of a GPU pack several trials onto one GPU."""

    cpu: float = 1.0
    gpu: float = 0.0


@dataclass
class PhaseDiagramConfig:
    """Which two axes the phase diagram plots (others become panels) and the contour drawn on top."""

    x: str = ""  # a swept key; "" = the first axis
    y: str = ""  # a swept key; "" = the second axis
    metric: str = ""  # "" = the task's success metric
    ratio_level: float = 0.0  # contour of the task's diversity measure (e.g. the max-sum ratio R) here; 0: none


@dataclass
class RunConfig:
    """How the members train and their packs run: the same keys in a grid's section (`sweep:`) and a search's
    (`search:`)."""

    resources: ResourcesConfig = field(default_factory=ResourcesConfig)
    pack: int = 0  # members per pack (one Tune trial, trained as one); 0 = auto (packing.members_per_pack)
    max_concurrent: int = 0  # trials running at once; 0 lets the cluster's free resources decide
    max_failures: int = 2  # retries of a crashed trial, each from its last checkpoint
    stop: StopConfig = field(default_factory=StopConfig)  # streak > 0: a member stops once it has succeeded

    def validate_run(self, section: str) -> None:
        require((f"{section}.pack", self.pack >= 0, "must be >= 0 (0 = auto)"),
                (f"{section}.max_concurrent", self.max_concurrent >= 0, "must be >= 0 (0: the cluster decides)"),
                (f"{section}.max_failures", self.max_failures >= 0, "must be >= 0"))
        self.stop.validate(section)


@dataclass
class SweepConfig(RunConfig):
    axes: list[AxisConfig] = field(default_factory=list)
    constraints: list[str] = field(default_factory=list)  # "A op B": A, B sums of swept keys and numbers;
    # < <= > >= == !=
    seeds: list[int] = field(default_factory=lambda: [0])
    phase_diagram: PhaseDiagramConfig = field(default_factory=PhaseDiagramConfig)


MAX_ID = 120  # characters of a trial directory name
_COMPARE = {"<=": operator.le, ">=": operator.ge, "==": operator.eq, "!=": operator.ne, "<": operator.lt,
            ">": operator.gt}
_CONSTRAINT = re.compile(r"^(.+?)(<=|>=|==|!=|<|>)(.+)$")
_TERM = re.compile(r"\s*([+-]?)\s*([A-Za-z_][\w.]*|\d+(?:\.\d+)?)\s*")

def load_sweep(path: str | Path, overrides: list[str]) -> tuple[config.Config, SweepConfig, list[dict[str, Any]]]:
    """The base trial config, the sweep section and its points, all validated. `sweep.*` overrides go to the sweep."""
    base, sweep = config.load_section(path, overrides, "sweep", SweepConfig)
    config.refuse_overrides_of(overrides, swept_keys(sweep))
    sweep.validate_run("sweep")
    require(("sweep.stop.decided", not sweep.stop.decided, "is for searches: a grid has no candidates to decide"))
    result = points(base, sweep)
    # resolved, so config.yaml says what it draws
    keys, diagram = [axis.key for axis in sweep.axes], sweep.phase_diagram
    diagram.x = diagram.x or keys[0]
    diagram.y = diagram.y or (keys[1] if len(keys) > 1 else "")
    diagram.metric = diagram.metric or task_of(base).success_metric
    return base, sweep, result


def swept_keys(sweep: SweepConfig) -> dict[str, str]:
    """The keys the grid sets at every point (its axes' and the seed), each with what to override instead."""
    set_by = {axis.key: f"is set at each point by sweep.axes[{i}], so this override would be ignored; to run one "
                        f"value, override the axis: 'sweep.axes.{i}.values=[{{value}}]'"
              for i, axis in enumerate(sweep.axes)}
    return set_by | {"seed": "is set at each point by sweep.seeds, so this override would be ignored; override the "
                             "seeds instead: 'sweep.seeds=[{value}]'"}


def points(base: config.Config, sweep: SweepConfig) -> list[dict[str, Any]]:
    """Every combination of axis values that meets the constraints, times the seeds; each one validated."""
    if not sweep.axes:
        raise ConfigError("sweep.axes", "name at least one axis (key plus values or range)")
    value_lists = []
    for i, axis in enumerate(sweep.axes):
        value_lists.append(axis_values(axis, f"sweep.axes[{i}]"))
        if axis.key == "seed":
            raise ConfigError(f"sweep.axes[{i}].key", "seeds are swept by sweep.seeds")
        if config.select(base, axis.key) is config.MISSING:
            raise ConfigError(f"sweep.axes[{i}].key", f"{axis.key} is not a key of the trial config")
    keys = [axis.key for axis in sweep.axes]
    checks = [parse_constraint(c, keys, f"sweep.constraints[{i}]") for i, c in enumerate(sweep.constraints)]
    if not sweep.seeds or len(set(sweep.seeds)) != len(sweep.seeds):
        raise ConfigError("sweep.seeds", "needs at least one seed, each once")

    combos = (dict(zip(keys, combo)) for combo in itertools.product(*value_lists))
    result = [point | {"seed": seed} for point in combos if all(check(point) for check in checks)
              for seed in sweep.seeds]
    if not result:
        raise ConfigError("sweep.constraints", "no point of the axes satisfies every constraint")
    base_dict = config.to_dict(base)
    for point in result:
        config_at(base_dict, point, "sweep point ")
    return result


def config_at(base_dict: dict, point: dict[str, Any], what: str = "") -> config.Config:
    """The config of a point (its device not checked); a ConfigError says at which point ("at " + `what` + its id)."""
    try:
        return config.with_point(base_dict, point, check_device=False)
    except ConfigError as e:
        raise ConfigError(e.key, f"{e.reason} (at {what}{point_id(point)})") from None


def verdict_rule(base: config.Config, sweep: SweepConfig):
    """point -> the rule its member is stopped by (sweep/verdicts.py): the task's success metric at the point's
    eval.threshold, each point a group of its own; None for every point when sweep.stop.streak is 0."""
    task = task_of(base)
    return rule_per_point(task.success_metric, task.success_above, sweep.stop.streak,
                          threshold=lambda point: point.get("eval.threshold", base.eval.threshold), group=point_id)


def axis_values(axis: AxisConfig, where: str) -> list[Any]:
    if bool(axis.values) == bool(axis.range):
        raise ConfigError(where, "give exactly one of values or range")
    if axis.values:
        return list(axis.values)
    if len(axis.range) not in (2, 3) or (len(axis.range) == 3 and axis.range[2] < 1):
        raise ConfigError(f"{where}.range", "must be [low, high] or [low, high, step] with step >= 1")
    low, high, step = (*axis.range, 1)[:3]
    if high < low:
        raise ConfigError(f"{where}.range", f"high ({high}) is below low ({low})")
    return list(range(low, high + 1, step))


def parse_constraint(text: str, keys: list[str], where: str):
    """'A op B' where A and B are sums and differences of swept keys and numbers, e.g. 'low + width <= 17'."""
    match = _CONSTRAINT.match(text)
    if not match:
        raise ConfigError(where, f"cannot read {text!r}; write e.g. 'a.b < c.d + 2'")
    left, op, right = match.groups()
    a, b, compare = parse_sum(left, keys, where), parse_sum(right, keys, where), _COMPARE[op]
    return lambda point: compare(a(point), b(point))


def did_you_mean(key: str, keys) -> str:
    """" (did you mean K?)" with the closest of `keys`, or "" if none is close."""
    match = difflib.get_close_matches(key, list(keys), n=1)
    return f" (did you mean {match[0]}?)" if match else ""


def parse_sum(text: str, keys: list[str], where: str):
    terms, position = [], 0
    while position < len(text):
        term = _TERM.match(text, position)
        if not term or (terms and not term.group(1)):
            raise ConfigError(where, f"cannot read {text.strip()!r}: use swept keys, numbers, + and -")
        sign, token = (-1 if term.group(1) == "-" else 1), term.group(2)
        if token[0].isdigit():
            terms.append(lambda point, value=sign * float(token): value)
        elif token in keys:
            terms.append(lambda point, key=token, sign=sign: sign * point[key])
        else:
            raise ConfigError(where, f"{token!r} is neither a swept key ({', '.join(keys)}) nor a number"
                                     + did_you_mean(token, keys))
        position = term.end()
    if not terms:
        raise ConfigError(where, "an empty side")
    return lambda point: sum(term(point) for term in terms)

def member_dir(out: Path, point: dict[str, Any]) -> Path:
    """Where the trial of `point` writes its outputs: out/trials/<point id>, absolute (Tune trials chdir)."""
    return (Path(out) / "trials" / point_id(point)).resolve()


def read_result(point: dict[str, Any], out: Path) -> dict | None:
    """The result.json of the trial of `point` under out/trials, or None if it never finished."""
    return read_json(member_dir(out, point) / "result.json")


def read_error(point: dict[str, Any], out: Path) -> str:
    """Why the last attempt of the trial of `point` failed ('' if none did, or it left no word: a killed worker)."""
    path = member_dir(out, point) / ERROR_FILE
    return path.read_text().strip() if path.is_file() else ""


def point_id(point: dict[str, Any]) -> str:
    """A readable, filesystem-safe, unique name: 'low=3,high=15,seed=0' from the keys' last parts
    (the full dotted key where last parts would collide). Lists read 'weights=1_0.5_0'; a name past 120 characters
    is cut and ends in a hash of the whole point, so it stays unique and within filesystem limits."""
    short = [key.rsplit(".", 1)[-1] for key in point]
    names = [s if short.count(s) == 1 else key for s, key in zip(short, point)]
    text = lambda v: "_".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)
    name = ",".join(f"{n}={text(v)}" for n, v in zip(names, point.values())).replace("/", "_")
    if len(name) <= MAX_ID:
        return name
    digest = hashlib.sha1(json.dumps(point, sort_keys=True, default=str).encode()).hexdigest()[:12]
    return f"{name[:MAX_ID - 13]}-{digest}"
