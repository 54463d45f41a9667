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
import functools
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

import torch
import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf import errors as oc_errors
from omegaconf._utils import get_omega_conf_dumper

from trainables import dry_run, memory
from trainables.errors import ConfigError, require
from trainables.logger import LoggingConfig
from trainables.models import MODELS
from trainables.optim import OptimConfig
from trainables.tasks import TASKS, task_of, threshold_problem
from trainables.train import EvalConfig

DEVICES = ("cpu", "cuda")


@dataclass
class Config:
    """One trial: what data, which model, how it is trained and measured."""

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
        if key.partition(".")[0] in ORCHESTRATION_SECTIONS:
            raise ConfigError(key, f"this verb does not read a {key.partition('.')[0]}: section (headsweep grid reads "
                                   "sweep.*, headsweep search reads search.*)")
    layers = [_without(layer, ORCHESTRATION_SECTIONS) for layer in read_layers(path, overrides)]
    return from_layers(layers, check_device)


def read_layers(path: str | Path | Mapping | None, overrides: list[str]) -> list[DictConfig]:
    """The YAML file (or a dict holding what one would: from Python, headsweep.config) and each override as separate
    OmegaConf layers, syntax-checked."""
    layers = []
    if isinstance(path, Mapping):
        try:
            layers.append(OmegaConf.create(dict(path)))
        except oc_errors.OmegaConfBaseException as e:
            raise ConfigError("CONFIG", f"the dict is not a config ({str(e).splitlines()[0]})") from None
    elif path is not None:
        try:
            layers.append(OmegaConf.load(path))
        except FileNotFoundError:
            raise ConfigError("CONFIG", f"no such file: {path}") from None
        except yaml.YAMLError as e:
            raise ConfigError("CONFIG", f"{path} is not valid YAML ({str(e).splitlines()[0]})") from None
    for item in overrides:
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise ConfigError(item, "an override must look like key=value (e.g. task.lengths.low=3); " + _QUOTE_IT)
        try:
            layers.append(OmegaConf.from_dotlist([item]))
        except oc_errors.OmegaConfBaseException as e:
            raise ConfigError(key, f"cannot parse override ({e})") from None
        except yaml.YAMLError as e:  # most often an unquoted list or mapping, cut at its spaces by the shell
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise ConfigError(key, f"the value {value} is not valid YAML ({problem}); {_QUOTE_IT}: "
                                   f"'{item} ...'") from None
    return layers


# The shell splits an unquoted override at each space: `search.slices=[{key: a, values: [1]}]` arrives as 4 words.
_QUOTE_IT = "if the shell split an override at its spaces, put single quotes around the whole override"


def from_layers(layers: list[DictConfig], check_device: bool = True) -> Config:
    """Merge layers (files, overrides, plain dicts) onto the schema their task/model names pick, then validate."""
    cfg = _merged(layers)
    task_of(cfg).resolve(cfg.task)  # derived fields, so config.yaml shows what is actually used
    validate(cfg, check_device)
    return cfg


def load_section(path: str | Path | Mapping, overrides: list[str], name: str, schema: type) -> tuple[Config, Any]:
    """The base trial config and an orchestration section (`sweep:`, `search:`) typed by `schema`: `<name>.*`
    overrides go to the section, the others to the base config."""
    layers = read_layers(path, overrides)
    base = load(path, [o for o in overrides if o.partition("=")[0].partition(".")[0] != name], check_device=False)
    sections = [OmegaConf.create(layer[name]) for layer in layers if name in layer]
    return base, OmegaConf.to_object(merge_checked(schema(), sections, prefix=f"{name}."))


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
            if swept.startswith(key + ".") and _sets(item, swept):
                raise ConfigError(key, f"it sets {swept}, which {reason.replace('{value}', '...')}")


def _sets(override: str, key: str) -> bool:
    """Whether a mapping override (`task.lengths={low: 3}`) sets `key` (task.lengths.low)."""
    layer = OmegaConf.from_dotlist([override])  # parsed before, by read_layers
    try:
        return OmegaConf.select(layer, key, default=_ABSENT) is not _ABSENT
    except oc_errors.OmegaConfBaseException:  # a plain value where key needs a section: refused by the merge
        return False


_ABSENT = object()


def with_point(base: dict, point: dict[str, Any], check_device: bool = True) -> Config:
    """The validated config of one sweep trial: a base config dict with the point's dotted keys set.

    A sweep builds thousands of these (the driver to plan, each trial for its members), and OmegaConf's merge of a
    whole config cost more than training a one-step member. So the base is merged once per process and each point's
    values are set on a copy of it, where every key names a field and every value already has its field's type;
    anything else (a new task or model name, a list, a string for a number, an unknown key) goes through OmegaConf,
    which converts it or names what is wrong. Either way the result is resolved and validated."""
    cfg = _assigned(_merged_base(base), point)
    if cfg is None:
        layer = OmegaConf.create()
        for key, value in point.items():
            OmegaConf.update(layer, key, value, force_add=True)
        return from_layers([OmegaConf.create(base), layer], check_device)
    task_of(cfg).resolve(cfg.task)
    validate(cfg, check_device)
    return cfg


_merged_bases: dict[str, Config] = {}  # repr(base dict) -> it merged onto its schema, unresolved and unvalidated


def _merged_base(base: dict) -> Config:
    key = repr(base)
    if key not in _merged_bases:
        if len(_merged_bases) >= 16:  # a process sees one or two bases; never let the cache grow without bound
            _merged_bases.clear()
        _merged_bases[key] = _merged([OmegaConf.create(base)])
    return _merged_bases[key]


def _merged(layers: list[DictConfig]) -> Config:
    """The layers merged onto the schema their task and model names pick, not yet resolved or validated."""
    task, model = _name(layers, "task", TASKS), _name(layers, "model", MODELS)
    layers = _written_for(_written_for(layers, "task", TASKS, task), "model", MODELS, model)
    return OmegaConf.to_object(merge_checked(_schema(task, model), layers))


def _written_for(layers: list[DictConfig], key: str, registry, final: str) -> list[DictConfig]:
    """The layers, with what a section says for another task or model than the `final` one cut to the keys the final
    one also has: a config file written for the transformer, switched by `model.name=base_conv` (an override, a sweep
    point), keeps its shared keys (d_model, n_layers) and drops the transformer's own (n_heads, positional). Which
    name a layer was written for: its own `<key>.name`, else the one in force from the layers before it."""
    shared = {f.name for f in dataclasses.fields(registry[final].config)}
    current, out = registry.default, []
    for layer in layers:
        section = layer.get(key)
        if isinstance(section, Mapping):
            current = section.get("name") or current
            if current != final:
                layer = OmegaConf.merge(_without(layer, (key,)),
                                        {key: {k: v for k, v in section.items() if k in shared}})
        out.append(layer)
    return out


def _assigned(base: Config, point: dict[str, Any]) -> Config | None:
    """A copy of `base` with the point's values set, or None where one of them needs OmegaConf (see with_point)."""
    if "task.name" in point or "model.name" in point:  # these choose the sections' schemas
        return None
    cfg = copy.deepcopy(base)
    for key, value in point.items():
        *path, leaf = key.split(".")
        parent = cfg
        for part in path:
            parent = getattr(parent, part, None)
        kind = _field_types(type(parent)).get(leaf) if dataclasses.is_dataclass(parent) else None
        if not (type(value) is kind or (kind is float and type(value) is int)):
            return None
        setattr(parent, leaf, kind(value))  # an int for a float field becomes a float, as OmegaConf makes it
    return cfg


@functools.lru_cache(maxsize=None)
def _field_types(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def merge_checked(schema: Any, layers: list[DictConfig], prefix: str = "") -> DictConfig:
    """OmegaConf.merge onto a structured schema (a dataclass or its DictConfig), with its errors turned into
    ConfigError naming the full key."""
    structured = schema if isinstance(schema, DictConfig) else OmegaConf.structured(schema)
    try:
        return _merge(structured, layers, prefix)
    except oc_errors.ConfigKeyError as e:
        raise ConfigError(prefix + e.full_key, f"unknown key{_closest(structured, e.full_key, prefix)}") from None
    except oc_errors.ValidationError as e:
        raise ConfigError(prefix + (e.full_key or "CONFIG"), str(e).splitlines()[0]) from None


def _merge(structured: DictConfig, layers: list[DictConfig], prefix: str) -> DictConfig:
    """OmegaConf.merge, or where it fails without naming a key, layer by layer through _shaped, which names it.

    That happens for an override that indexes a list, `search.slices.1.values=[1,3]`: from_dotlist reads it as the
    mapping {search: {slices: {"1": {values: [1, 3]}}}}, which OmegaConf cannot merge onto a list (TypeError). The
    slow path turns it into the whole list merged so far with element 1 changed, as OmegaConf users expect. The fast
    path stays first: a sweep merges once per point."""
    try:
        return OmegaConf.merge(structured, *layers)
    except (TypeError, oc_errors.ValidationError) as e:
        if getattr(e, "full_key", None):  # OmegaConf named the key: merge_checked reports it
            raise
    merged = structured
    for layer in layers:
        merged = OmegaConf.merge(merged, _shaped(layer, merged, prefix))
    return merged


def _shaped(node: Any, target: Any, path: str) -> Any:
    """`node` (a layer or part of one, at dotted `path`) as OmegaConf can merge it onto `target` (what is merged so
    far there): a mapping of indices onto a list becomes that whole list with those elements changed. Any other
    mismatch of shape is a ConfigError naming the key."""
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node)  # unresolved: interpolations stay as written
    key = path[:-1]
    if isinstance(target, ListConfig) and isinstance(node, Mapping):
        return _list_with(node, target, path)
    if isinstance(target, DictConfig) and _is_value(node):
        raise ConfigError(key, f"is a section ({', '.join(map(str, target.keys()))}), not a value: set one of its "
                               f"keys, e.g. {path}{next(iter(target.keys()), 'KEY')}=...")
    if not (isinstance(target, DictConfig) and isinstance(node, Mapping)):
        return node
    typed, known = dataclasses.is_dataclass(OmegaConf.get_type(target)), list(target.keys())
    for name in node:
        if typed and name not in known:
            match = difflib.get_close_matches(str(name), list(map(str, known)), n=1)
            raise ConfigError(f"{path}{name}", "unknown key" + (f" (did you mean {path}{match[0]}?)" if match else ""))
    return {name: _shaped(value, _child(target, name), f"{path}{name}.") for name, value in node.items()}


def _list_with(indexed: Mapping, target: ListConfig, path: str) -> list:
    """The list `target` with the elements `indexed` names ({"1": {values: [1, 3]}}) changed."""
    key, items = path[:-1], OmegaConf.to_container(target)
    whole = f"give the whole list ('{key}=[...]')"
    for index, value in indexed.items():
        if not str(index).isdigit():
            raise ConfigError(f"{path}{index}", f"{key} is a list: name an element by its index "
                                                f"({path}0.{index}=...), or {whole}")
        if int(index) >= len(items):
            held = f"elements 0 to {len(items) - 1}" if items else "no elements"
            raise ConfigError(f"{path}{index}", f"index out of range: {key} has {held}; to add one, {whole}")
        element = _shaped(value, target[int(index)], f"{path}{index}.")
        items[int(index)] = _updated(items[int(index)], element)
    return items


def _updated(old: Any, new: Any) -> Any:
    """`old` with `new` merged in as OmegaConf merges: mappings key by key, anything else replaced whole."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        return {**old, **{name: _updated(old.get(name), value) for name, value in new.items()}}
    return new


def _is_value(node: Any) -> bool:
    """A plain value or list, which cannot stand for a section (None, ??? and interpolations can)."""
    if node is None or isinstance(node, Mapping):
        return False
    return not (isinstance(node, str) and (node == "???" or "${" in node))


def _child(parent: DictConfig, name: Any) -> Any:
    """parent[name], or None where there is nothing to merge onto (an absent, missing or unresolvable value)."""
    try:
        return parent[name] if name in parent else None
    except oc_errors.OmegaConfBaseException:
        return None


def _without(layer: DictConfig, keys: tuple[str, ...]) -> DictConfig:
    return OmegaConf.create({k: v for k, v in layer.items() if k not in keys}) if any(k in layer for k in keys) else layer


def _name(layers: list[DictConfig], key: str, registry) -> str:
    """The `<key>.name` the last layer that sets one gives (the registry's default when none does); the plugin it
    names is imported and checked here, so a bad one is refused before anything else."""
    for layer in reversed(layers):  # DictConfigs or plain dicts
        section = layer.get(key)
        name = section.get("name") if isinstance(section, Mapping) else None
        if name is not None:
            registry[name]  # raises ConfigError naming `<key>.name` and what is wrong
            return name
    return registry.default


def forget_derived() -> None:
    """Drop the schemas and merged bases built so far: a task or model registered anew under a name may have another
    config dataclass (trainables/plugins.py)."""
    _schema.cache_clear()
    _merged_bases.clear()


@functools.lru_cache(maxsize=None)
def _schema(task: str, model: str) -> DictConfig:
    """The structured schema of a task and a model, built once per process (a sweep validates every point with it;
    OmegaConf.merge copies it, never changes it)."""
    return OmegaConf.structured(Config(task=TASKS[task].config(), model=MODELS[model].config()))


def _closest(schema: DictConfig, full_key: str, prefix: str = "") -> str:
    parent_path, _, key = full_key.rpartition(".")
    parent = OmegaConf.select(schema, parent_path) if parent_path else schema
    options = list(parent.keys()) if isinstance(parent, DictConfig) else []
    match = difflib.get_close_matches(key, options, n=1)
    return f" (did you mean {prefix}{(parent_path + '.' if parent_path else '') + match[0]}?)" if match else ""


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
    return dump(data) + "".join(dump({name: dataclasses.asdict(section)}) for name, section in sections.items())


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
    """A plain nested dict (what Ray's param_space and W&B configs take)."""
    return OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)


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
    reads, continuous = spec.reads(cfg.model), task.input_width(cfg.task) is not None
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
    """Reject, before any work, what cannot run or would silently mean something else. Raises ConfigError.

    Each part validates itself: the task its data model, the model itself against the task's vocabulary and context,
    `optim` when the model trains by it, `eval` and `logging`. check_device=False skips the "is there a GPU here"
    and memory checks, for a driver that schedules trials onto other machines.
    """
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
        raise ConfigError("model.name", f"{spec.name} reads one query position per sequence, but {task.name} scores "
                                        "several (as configured)" + (f"; a model that reads every position: "
                                                                     f"model.name={' or '.join(readers)}" if readers else ""))
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
