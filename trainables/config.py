"""The config schema, `load()` (YAML file + dotlist overrides -> typed Config) and `validate()`.

Each part's dataclass lives next to its code; this module only assembles them from the registries. `task.name` and
`model.name` choose which dataclass types the `task` and `model` sections (tasks.TASKS, models.MODELS), so an
override like `model.n_layers=3` is checked against the transformer's schema and rejected (with the closest valid
key) against the one-step model's. `validate()` asks each part to validate itself.
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf import errors as oc_errors
from omegaconf._utils import get_omega_conf_dumper
from omegaconf._yaml import get_yaml_loader

from trainables import dry_run, memory
from trainables.errors import ConfigError, require
from trainables.logger import LoggingConfig
from trainables.models import MODELS
from trainables.optim import OptimConfig
from trainables.tasks import TASKS, is_continuous, task_of, threshold_problem
from trainables.train import EvalConfig

DEVICES = ("cpu", "cuda")


@dataclass
class Config:
    """One member: what data, which model, how it is trained and measured."""

    name: str = "headsweep"  # experiment name: progress bars, W&B group, Optuna study prefix
    seed: int = 0  # the one seed: initialisation, training data and evaluation data all derive from it
    device: str = "cpu"  # cpu | cuda
    task: Any = field(default_factory=lambda: TASKS[TASKS.default].config())  # typed by task.name (tasks.TASKS)
    model: Any = field(default_factory=lambda: MODELS[MODELS.default].config())  # typed by model.name (models.MODELS)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)


# Top-level sections that belong to the orchestration layer (sweep/): a single trial ignores them.
ORCHESTRATION_SECTIONS = ("sweep", "search")


def load(path: str | Path | Mapping | None = None, overrides: list[str] = (), check_device: bool = True) -> Config:
    """Schema defaults <- YAML file (or a plain dict of the same keys) <- `key=value` overrides, then validate().
    Raises ConfigError on bad input.

    `sweep:` and `search:` sections of the file are dropped here (sweep/ reads them with load_section), so a grid or
    search config also trains its base point with `headsweep train`; an override of one is refused, since nothing
    would read it.
    """
    for item in overrides:  # load_section took its own section's overrides; any left would be silently dropped
        key = item.partition("=")[0]
        if _head(key) in ORCHESTRATION_SECTIONS:
            raise ConfigError(key, f"this verb does not read a {_head(key)}: section (headsweep grid reads "
                                   "sweep.*, headsweep search reads search.*)")
    layers = [[(k, v) for k, v in layer if _head(k) not in ORCHESTRATION_SECTIONS]
              for layer in read_layers(path, overrides)]
    return _checked(_merged(layers), check_device)


# A layer: what a YAML file, a dict, an override or a sweep point sets, as (dotted key, value) pairs in its order.
Layer = list[tuple[str, Any]]


def read_layers(path: str | Path | Mapping | None, overrides: list[str]) -> list[Layer]:
    """The YAML file (or a dict holding what one would: from Python, headsweep.config) and each override as separate
    layers, syntax-checked."""
    layers = []
    if isinstance(path, Mapping):
        try:
            layers.append(_pairs(OmegaConf.create(dict(path))))
        except oc_errors.OmegaConfBaseException as e:
            raise ConfigError("CONFIG", f"the dict is not a config ({str(e).splitlines()[0]})") from None
    elif path is not None:
        try:  # OmegaConf's YAML loader (its floats, its refusal of duplicate keys), without building a DictConfig
            with open(path, encoding="utf-8") as f:
                data = yaml.load(f, Loader=get_yaml_loader())
            layers.append(_pairs({} if data is None else data))
        except FileNotFoundError:
            raise ConfigError("CONFIG", f"no such file: {path}") from None
        except yaml.YAMLError as e:
            raise ConfigError("CONFIG", f"{path} is not valid YAML ({str(e).splitlines()[0]})") from None
    return layers + [_override(item) for item in overrides]


def _override(item: str) -> Layer:
    """A `key=value` override as a layer, its value read as OmegaConf's dotlist reads it (YAML)."""
    key, equals, value = item.partition("=")
    if not equals or not key:
        raise ConfigError(item, "an override must look like key=value (e.g. task.lengths.low=3); " + _QUOTE_IT)
    try:
        return _dotted({key: OmegaConf.to_container(OmegaConf.from_dotlist([f"value={value}"]))["value"]})
    except oc_errors.OmegaConfBaseException as e:
        raise ConfigError(key, f"cannot parse override ({e})") from None
    except yaml.YAMLError as e:  # most often an unquoted list or mapping, cut at its spaces by the shell
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(key, f"the value {value} is not valid YAML ({problem}); {_QUOTE_IT}: '{item} ...'") from None


# The shell splits an unquoted override at each space: `search.slices=[{key: a, values: [1]}]` arrives as 4 words.
_QUOTE_IT = "if the shell split an override at its spaces, put single quotes around the whole override"


def _pairs(node: Mapping, prefix: str = "") -> Layer:
    """A mapping (a DictConfig unresolved: interpolations stay as written) as a layer: one pair per value that is not
    itself a non-empty mapping, so that setting them one by one merges it key by key, as OmegaConf.merge would. A
    dot in a key is escaped: it names one key (search.reference's `task.lengths.shape`)."""
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node)
    if not isinstance(node, Mapping):  # a YAML file that holds a list or a value
        raise ConfigError("CONFIG", f"must be a mapping of keys to values, not {node!r}")
    return _dotted({prefix + str(key).replace(".", "\\."): value for key, value in node.items()})


def _dotted(pairs: Mapping[str, Any]) -> Layer:
    """Dotted keys (an override, a sweep point) and their values as a layer: a mapping value set key by key."""
    return [pair for key, value in pairs.items()
            for pair in (_pairs(value, key + ".") if isinstance(value, Mapping) and value else [(key, value)])]


def _head(key: str) -> str:
    return key.partition(".")[0]


def from_layers(layers: list[Mapping], check_device: bool = True) -> Config:
    """Merge layers (files, overrides, plain dicts) onto the schema their task/model names pick, then validate."""
    return _checked(_merged([_pairs(layer) for layer in layers]), check_device)


def with_point(base: dict, point: dict[str, Any], check_device: bool = True) -> Config:
    """The validated config of one sweep member: a base config dict with the point's dotted keys set, each as an
    override sets it (see _merged for why a sweep's thousands of these stay cheap)."""
    return _checked(_merged([_pairs(base), _dotted(point)]), check_device)


def _checked(cfg: Config, check_device: bool) -> Config:
    task_of(cfg).resolve(cfg.task)  # derived fields, so config.yaml shows what is actually used
    validate(cfg, check_device)
    return cfg


def load_section(path: str | Path | Mapping, overrides: list[str], name: str, schema: type,
                 moved: Mapping[str, str] = {}) -> tuple[Config, Any]:
    """The base trial config and an orchestration section (`sweep:`, `search:`) typed by `schema`: `<name>.*`
    overrides go to the section, the others to the base config. `moved`: old dotted key -> new, for keys that moved
    within the section; a config is an interface, so the old key still sets the new one, with a one-line notice."""
    layers = read_layers(path, overrides)
    base = load(path, [o for o in overrides if _head(o.partition("=")[0]) != name], check_device=False)
    root = OmegaConf.create({name: OmegaConf.structured(schema())})  # so that every error names the whole key
    noticed = set()
    for layer in layers:
        pairs = [(_moved_key(key, moved, noticed), value) for key, value in layer if _head(key) == name]
        _apply(root, pairs)
    return base, OmegaConf.to_object(root[name])


def _moved_key(key: str, moved: Mapping[str, str], noticed: set) -> str:
    """`key` (or the key it is inside of: search.params.0.low) under its new name; a notice, once per old key."""
    for old, new in moved.items():
        if key == old or key.startswith(old + "."):
            if old not in noticed:
                noticed.add(old)
                print(f"headsweep: {old} is deprecated; use {new}", file=sys.stderr)
            return new + key[len(old):]
    return key


def renamed_value(key: str, value: Any, new_names: dict[str, str]) -> Any:
    """`value` of `key` under its current name. A user's config is an interface: a value that was renamed (new_names:
    old -> new) keeps working under its old name, with a one-line notice on stderr (its caller reads the config once
    per run, so once per run)."""
    if not isinstance(value, str) or value not in new_names:
        return value
    print(f"headsweep: {key}={value} is deprecated; use {key}={new_names[value]}", file=sys.stderr)
    return new_names[value]


def refuse_overrides_of(overrides: list[str], set_by: dict[str, str]) -> None:
    """Refuse an override that sets (a part of) a key a sweep sets at each of its points: it would be silently
    ignored. `set_by` maps each such key to what sets it and what to override instead; `{value}` in that text
    stands for the override's value."""
    for item in overrides:
        key, _, value = item.partition("=")
        for swept, reason in set_by.items():
            if key == swept:
                raise ConfigError(key, reason.replace("{value}", value))
            if key.startswith(swept + "."):
                raise ConfigError(key, f"it sets part of {swept}, which {reason.replace('{value}', '...')}")
            if swept.startswith(key + ".") and any(k == swept or k.startswith(swept + ".")  # task.lengths={low: 3}
                                                   for k, _ in _override(item)):
                raise ConfigError(key, f"it sets {swept}, which {reason.replace('{value}', '...')}")


def _merged(layers: list[Layer]) -> Config:
    """The layers set one after another onto the schema their task and model names pick, not yet resolved or
    validated.

    All but the last layer are set once per process: a sweep applies each of its thousands of points (the driver
    to plan, each pack to its members) to one base, and setting a whole base again (20 ms) costs more than training
    a one-step member; copying it once set costs a tenth of that. What the layers merge to is kept too (a copy is
    handed out): the same point is asked for again by the driver's check, its packing and its tables. Why not set a
    point on the dataclasses directly (0.1 ms; done until issue 41): that needed OmegaConf anyway for every value it
    could not vouch for, a second path that had to give the same configs and errors."""
    task, model = _name(layers, "task", TASKS), _name(layers, "model", MODELS)
    layers = _written_for(_written_for(layers, "task", TASKS, task), "model", MODELS, model) or [[]]
    key = repr((task, model, layers))
    if key not in _merged_configs:  # a driver asks for a point's config several times (check, packing, its tables)
        # As _applied would set the last layer, but not kept there: every point would crowd the bases out of it.
        *before, last = layers
        cfg = copy.deepcopy(_applied(task, model, before))
        _apply(cfg, last)
        _merged_configs[key] = OmegaConf.to_object(cfg)
        if len(_merged_configs) > 4096:  # bounded: the oldest go first
            del _merged_configs[next(iter(_merged_configs))]
    return copy.deepcopy(_merged_configs[key])  # 0.06 ms; the caller resolves and may change its copy


_merged_configs: dict[str, Config] = {}  # repr((task, model, layers)) -> what they merge to (never handed out)
_applied_layers: dict[str, DictConfig] = {}  # repr((task, model, layers)) -> the schema with those layers set


def _applied(task: str, model: str, layers: list[Layer]) -> DictConfig:
    """The structured schema of a task and a model with `layers` set (never changed: _merged sets a copy), built
    on a copy of the same with all but the last layer set: a file loaded with different overrides is set once."""
    key = repr((task, model, layers))
    if key not in _applied_layers:
        if layers:
            cfg = copy.deepcopy(_applied(task, model, layers[:-1]))
            _apply(cfg, layers[-1])
        else:
            cfg = OmegaConf.structured(Config(task=TASKS[task].config(), model=MODELS[model].config()))
        if len(_applied_layers) >= 64:  # a process sees a few bases and their prefixes; never grow without bound
            _applied_layers.clear()
        _applied_layers[key] = cfg
    return _applied_layers[key]


def _written_for(layers: list[Layer], key: str, registry, final: str) -> list[Layer]:
    """The layers, with what a layer says for another task or model than the `final` one cut to the keys the final
    one also has: a config file written for the transformer, switched by `model.name=base_conv` (an override, a sweep
    point), keeps its shared keys (d_model, n_layers) and drops the transformer's own (n_heads, positional). Which
    name a layer was written for: its own `<key>.name`, else the one in force from the layers before it."""
    shared = {f.name for f in dataclasses.fields(registry[final].config)}
    current, out = registry.default, []
    for layer in layers:
        current = next((value for k, value in reversed(layer) if k == f"{key}.name" and value), current)
        if current != final:
            layer = [(k, v) for k, v in layer if not k.startswith(f"{key}.") or _head(k[len(key) + 1:]) in shared]
        out.append(layer)
    return out


def _apply(cfg: DictConfig, layer: Layer) -> None:
    """Set a layer's pairs with OmegaConf.update, which indexes lists (`search.slices.1.values`) and converts each
    value to its field's type, with what it refuses or would get wrong (an index out of range, a value for a section)
    a ConfigError naming the key."""
    for key, value in layer:
        if isinstance(value, str) and value == "???":  # as OmegaConf.merge: a missing value leaves what is set
            continue
        node, parts = cfg, [part.replace("\\.", ".") for part in re.split(r"(?<!\\)\.", key)]  # an escaped dot kept
        for depth, part in enumerate(parts):
            if isinstance(node, ListConfig):
                _require_index(node, ".".join(parts[:depth]), part)
            elif depth and node is not None and not isinstance(node, DictConfig):  # update would replace it by {}
                raise ConfigError(".".join(parts[:depth]), f"is a value ({node!r}), not a section with a key {part}")
            node = _child(node, part)
        can_be_section = value is None or isinstance(value, Mapping) or (isinstance(value, str) and "${" in value)
        if isinstance(node, DictConfig) and not can_be_section:  # a plain value or list for a section
            raise ConfigError(key, f"is a section ({', '.join(map(str, node.keys()))}), not a value: set one of its "
                                   f"keys, e.g. {key}.{next(iter(node.keys()), 'KEY')}=...")
        try:
            OmegaConf.update(cfg, key, value)
        except oc_errors.OmegaConfBaseException as e:
            full_key, problem = str(e.full_key or ""), str(e).splitlines()[0]
            if not full_key.startswith(_head(key)):  # it names no key, or one inside the value (a whole list)
                raise ConfigError(key, problem) from None
            if isinstance(e, (oc_errors.ConfigKeyError, oc_errors.ConfigAttributeError)):
                unknown = re.sub(r"\[(\d+)\]", r".\1", full_key)  # as an override names it: search.slices.0.x
                raise ConfigError(unknown, f"unknown key{_closest(cfg, unknown)}") from None
            raise ConfigError(full_key, problem) from None


def _require_index(items: ListConfig, key: str, part: str) -> None:
    """`part` of a dotted key must name an element of the list at `key`: OmegaConf.update would add a key to it,
    fail with an IndexError, or fill a new element with defaults."""
    whole = f"give the whole list ('{key}=[...]')"
    if not part.isdigit():
        raise ConfigError(f"{key}.{part}", f"{key} is a list: name an element by its index ({key}.0.{part}=...), "
                                           f"or {whole}")
    if int(part) >= len(items):
        held = f"elements 0 to {len(items) - 1}" if len(items) else "no elements"
        raise ConfigError(f"{key}.{part}", f"index out of range: {key} has {held}; to add one, {whole}")


def _child(parent: Any, name: str) -> Any:
    """parent[name], or None where there is nothing there (absent, missing or unresolvable)."""
    try:
        if isinstance(parent, ListConfig):
            return parent[int(name)]
        return parent[name] if isinstance(parent, DictConfig) and name in parent else None
    except oc_errors.OmegaConfBaseException:
        return None


def _name(layers: list[Layer], key: str, registry) -> str:
    """The `<key>.name` the last layer that sets one gives (the registry's default when none does); the plugin it
    names is imported and checked here, so a bad one is refused before anything else."""
    for layer in reversed(layers):
        name = next((value for k, value in reversed(layer) if k == f"{key}.name" and value is not None), None)
        if name is not None:
            registry[name]  # raises ConfigError naming `<key>.name` and what is wrong
            return name
    return registry.default


def forget_derived() -> None:
    """Drop the schemas built so far: a task or model registered anew under a name may have another config
    dataclass (trainables/plugins.py)."""
    _applied_layers.clear()
    _merged_configs.clear()


def _closest(cfg: DictConfig, key: str) -> str:
    parent_path, _, name = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_path, default=None) if parent_path else cfg
    options = list(map(str, parent.keys())) if isinstance(parent, DictConfig) else []
    match = difflib.get_close_matches(name, options, n=1)
    return f" (did you mean {(parent_path + '.' if parent_path else '') + match[0]}?)" if match else ""


def to_yaml(cfg: Config, **sections) -> str:
    """The resolved config as YAML, followed by any orchestration sections (sweep=..., search=...): exactly
    OmegaConf.to_yaml's text, dumped from the dataclasses directly (every packed member writes its config.yaml, and
    building a structured DictConfig first cost more than training a one-step member)."""
    return _dump(dataclasses.asdict(cfg), sections)


def to_yaml_as_written_before(cfg: Config, **sections) -> list[str]:
    """to_yaml as each earlier version wrote it, without the ADDED_KEYS of the versions after it that hold their
    defaults (the same experiment), so an output directory written before they existed resumes (a key set otherwise
    stays: another experiment). Newest version first."""
    data = dataclasses.asdict(cfg)
    return [_dump(without_added_defaults(data, since), sections) for since in reversed(range(len(ADDED_KEYS)))]


def _dump(data: dict, sections: dict) -> str:
    dump = lambda data: yaml.dump(data, default_flow_style=False, allow_unicode=True, sort_keys=False,
                                  Dumper=get_omega_conf_dumper())
    return dump(data) + "".join(dump({name: section if isinstance(section, dict) else dataclasses.asdict(section)})
                                for name, section in sections.items())


# Keys added after configs were first written into output directories and Optuna studies, with the default that
# means what a config without them meant, one dict per version that added some (oldest first): resuming compares
# config.yaml's text and the studies' fingerprint of the training config, and a config at these defaults is the
# same experiment as one written before they existed.
ADDED_KEYS = [
    {"model.n_ctx": 0},
    {"optim.schedule": "constant", "optim.warmup_steps": 0, "optim.min_lr": 0.0, "optim.clip_norm": 0.0},
]


def without_added_defaults(data: dict, since: int = 0) -> dict:
    """A config as a plain dict (dataclasses.asdict, to_dict) without the keys that the versions from ADDED_KEYS[since]
    on added, where they hold their defaults (since=0: every added key)."""
    data = copy.deepcopy(data)
    for dotted, default in (item for added in ADDED_KEYS[since:] for item in added.items()):
        section, key = dotted.split(".")
        if isinstance(data.get(section), dict) and data[section].get(key, default) == default:
            data[section].pop(key, None)
    return data


def to_dict(cfg: Config) -> dict:
    """A plain nested dict (what Ray's param_space and W&B configs take): OmegaConf.to_container of the structured
    config, read off the dataclasses directly (a validated Config holds its fields' types already, resolved): building
    the DictConfig took 10-40 ms a config, and sweeps and searches call this per point."""
    return _containers(dataclasses.asdict(cfg))


def _containers(value: Any) -> Any:
    """Tuples as lists, as OmegaConf gives them back."""
    if isinstance(value, dict):
        return {key: _containers(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_containers(item) for item in value]
    return value


MISSING = object()


def select(cfg: Config, dotted_key: str) -> Any:
    """The value at a dotted key, or MISSING if the config has no such key."""
    node = cfg
    for part in dotted_key.split("."):
        if not hasattr(node, part):
            return MISSING
        node = getattr(node, part)
    return node


def _require_matching_inputs(cfg: Config, task, spec) -> None:
    """A token task's model reads token ids, a continuous task's its real-valued inputs (Task.input_width,
    ModelSpec.reads); the key named is the one that picks what the model reads (model.embedding where it has one)."""
    reads, continuous = spec.reads(cfg.model), is_continuous(task)
    key = "model.embedding" if hasattr(cfg.model, "embedding") else "model.name"
    what = f"{cfg.model.embedding} ({spec.name})" if key == "model.embedding" else spec.name
    require(
        (key, reads == "inputs" or not continuous,
         f"{what} reads token ids, but {task.name} gives real-valued inputs"
         + (" (set model.embedding=linear)" if key == "model.embedding" else "")),
        (key, reads == "tokens" or continuous, f"{what} reads real-valued inputs, but {task.name} gives token ids"),
    )


def _needs_query(name: str) -> bool:
    """Whether the model registered as `name` reads one query position only (a plugin that cannot load: yes, so it
    is never suggested)."""
    try:
        return MODELS[name].needs_query
    except ConfigError:
        return True


def validate(cfg: Config, check_device: bool = True) -> None:
    """Reject, before any work, what cannot run or would silently mean something else (each part validates itself).
    Raises ConfigError. check_device=False skips the "is there a GPU here" and memory checks, for a driver that
    schedules trials onto other machines."""
    task, spec = task_of(cfg), MODELS[cfg.model.name]
    require(
        ("seed", cfg.seed >= 0, "must be >= 0"),
        ("device", cfg.device in DEVICES, f"must be one of {', '.join(DEVICES)}"),
        ("device", not check_device or cfg.device != "cuda" or torch.cuda.is_available(),
         "cuda asked for, but this machine has no GPU"),
    )
    task.validate(cfg.task)
    _require_matching_inputs(cfg, task, spec)
    if spec.needs_query and not task.query_only(cfg.task):
        readers = sorted(name for name in MODELS.sources() if name != spec.name and not _needs_query(name))
        suggestion = f"; a model that reads every position: model.name={' or '.join(readers)}" if readers else ""
        raise ConfigError("model.name", f"{spec.name} reads one query position per sequence, but {task.name} scores "
                                        f"several (as configured){suggestion}")
    spec.validate(cfg.model, *task.dims(cfg.task))
    if spec.uses_optim:
        cfg.optim.validate()
        require(("optim.compile", cfg.optim.compile != "reduce-overhead" or cfg.device == "cuda",
                 "reduce-overhead replays the step as CUDA graphs and needs device=cuda (use always on the CPU)"))
    cfg.eval.validate()
    problem = threshold_problem(task.success_metric, cfg.eval.threshold, task.success_above)
    require(("eval.threshold", problem is None, problem))
    cfg.logging.validate()
    dry_run.check(cfg)  # once per task and model in a process: a plugin that breaks its contract stops here
    if check_device:  # a driver scheduling onto other machines checks the population it packs (sweep/tuner.py)
        memory.check(cfg)
