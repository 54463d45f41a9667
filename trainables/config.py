"""The config schema, `load()` (YAML file + dotlist overrides -> typed Config) and `validate()`.

Each part's dataclass lives next to its code; this module only assembles them. `task.name` and `model.name` choose
which dataclass types the `task` and `model` sections, so an override like `model.n_layers=3` is checked against the
transformer's schema and rejected (with the closest valid key) against the one-step model's.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf import errors as oc_errors

from trainables import models, tasks
from trainables.errors import ConfigError
from trainables.logger import WANDB_MODES, LoggingConfig
from trainables.models.transformer import EMBEDDINGS, POSITIONAL, head_width, residual_width
from trainables.tasks.lengths import distribution
from trainables.tasks.trigger_copy import OOD_SPLITS
from trainables.train import OPTIMIZERS, EvalConfig, OptimConfig

DEVICES = ("cpu", "cuda")


@dataclass
class Config:
    """One trial: what data, which model, how it is trained and measured."""

    name: str = "headsweep"  # experiment name: progress bars, W&B group, Optuna study prefix
    seed: int = 0  # the one seed: initialisation, training data and evaluation data all derive from it
    device: str = "cpu"  # cpu | cuda
    task: Any = field(default_factory=tasks.TriggerCopyConfig)  # typed by task.name (see tasks.CONFIGS)
    model: Any = field(default_factory=models.OneStepConfig)  # typed by model.name (see models.CONFIGS)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)


# Top-level sections that belong to the orchestration layer (sweep/): a single trial ignores them.
ORCHESTRATION_SECTIONS = ("sweep", "search")


def load(path: str | Path | None = None, overrides: list[str] = (), check_device: bool = True) -> Config:
    """Schema defaults <- YAML file <- `key=value` overrides, then validate(). Raises ConfigError on bad input.

    `sweep:` and `search:` sections are dropped here (sweep/ reads them with read_layers + merge_checked), so a grid
    or search config also trains its base point with `headsweep train`.
    """
    layers = [_without(layer, ORCHESTRATION_SECTIONS) for layer in read_layers(path, overrides)]
    return from_layers(layers, check_device)


def read_layers(path: str | Path | None, overrides: list[str]) -> list[DictConfig]:
    """The YAML file and each override as separate OmegaConf layers, syntax-checked."""
    layers = []
    if path is not None:
        try:
            layers.append(OmegaConf.load(path))
        except FileNotFoundError:
            raise ConfigError("CONFIG", f"no such file: {path}") from None
        except yaml.YAMLError as e:
            raise ConfigError("CONFIG", f"{path} is not valid YAML ({str(e).splitlines()[0]})") from None
    for item in overrides:
        key, equals, _ = item.partition("=")
        if not equals or not key:
            raise ConfigError(item, "an override must look like key=value (e.g. task.lengths.low=3)")
        try:
            layers.append(OmegaConf.from_dotlist([item]))
        except oc_errors.OmegaConfBaseException as e:
            raise ConfigError(key, f"cannot parse override ({e})") from None
    return layers


def from_layers(layers: list[DictConfig], check_device: bool = True) -> Config:
    """Merge layers (files, overrides, plain dicts) onto the schema their task/model names pick, then validate."""
    raw = OmegaConf.merge(*layers) if layers else OmegaConf.create()
    schema = Config(task=_section(raw, "task", tasks.CONFIGS), model=_section(raw, "model", models.CONFIGS))
    cfg = OmegaConf.to_object(merge_checked(schema, layers))
    lengths = getattr(cfg.task, "lengths", None)
    if lengths is not None and lengths.width:  # resolved here so config.yaml shows the high actually used
        if lengths.width < 0:
            raise ConfigError("task.lengths.width", f"must be >= 0 (0 keeps task.lengths.high), got {lengths.width}")
        lengths.high = lengths.low + lengths.width - 1
    validate(cfg, check_device)
    return cfg


def with_point(base: dict, point: dict[str, Any], check_device: bool = True) -> Config:
    """The validated config of one sweep trial: a base config dict with the point's dotted keys set."""
    layer = OmegaConf.create()
    for key, value in point.items():
        OmegaConf.update(layer, key, value, force_add=True)
    return from_layers([OmegaConf.create(base), layer], check_device)


def merge_checked(schema: Any, layers: list[DictConfig], prefix: str = "") -> DictConfig:
    """OmegaConf.merge onto a structured schema, with its errors turned into ConfigError naming the full key."""
    structured = OmegaConf.structured(schema)
    try:
        return OmegaConf.merge(structured, *layers)
    except oc_errors.ConfigKeyError as e:
        raise ConfigError(prefix + e.full_key, f"unknown key{_closest(structured, e.full_key, prefix)}") from None
    except oc_errors.ValidationError as e:
        raise ConfigError(prefix + e.full_key, str(e).splitlines()[0]) from None


def _without(layer: DictConfig, keys: tuple[str, ...]) -> DictConfig:
    return OmegaConf.create({k: v for k, v in layer.items() if k not in keys}) if any(k in layer for k in keys) else layer


def _section(raw: DictConfig, key: str, registry: dict) -> Any:
    name = OmegaConf.select(raw, f"{key}.name", default=None)
    if name is None:
        return registry[next(iter(registry))]()
    if name not in registry:
        raise ConfigError(f"{key}.name", f"must be one of {', '.join(registry)}, got {name!r}")
    return registry[name]()


def _closest(schema: DictConfig, full_key: str, prefix: str = "") -> str:
    parent_path, _, key = full_key.rpartition(".")
    parent = OmegaConf.select(schema, parent_path) if parent_path else schema
    options = list(parent.keys()) if isinstance(parent, DictConfig) else []
    match = difflib.get_close_matches(key, options, n=1)
    return f" (did you mean {prefix}{(parent_path + '.' if parent_path else '') + match[0]}?)" if match else ""


def to_yaml(cfg: Config) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))


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


def validate(cfg: Config, check_device: bool = True) -> None:
    """Reject, before any work, what cannot run or would silently mean something else. Raises ConfigError.

    check_device=False skips the "is there a GPU here" check, for a driver that schedules trials onto other machines.
    """
    task, model, optim, ev = cfg.task, cfg.model, cfg.optim, cfg.eval
    _require(
        ("seed", cfg.seed >= 0, "must be >= 0"),
        ("device", cfg.device in DEVICES, f"must be one of {', '.join(DEVICES)}"),
        ("device", not check_device or cfg.device != "cuda" or torch.cuda.is_available(),
         "cuda asked for, but this machine has no GPU"),
        ("task.n_triggers", task.n_triggers >= 1, "must be >= 1"),
        ("task.vocab_size", task.vocab_size > task.n_triggers, "must exceed task.n_triggers (outputs and fillers need tokens)"),
        ("task.max_len", task.max_len >= 6, "must be >= 6 (the shortest sequence has T = 5 <= L - 1)"),
        ("task.ood_split", task.ood_split in OOD_SPLITS, f"must be one of {', '.join(OOD_SPLITS)}"),
    )
    try:
        q = distribution(task.lengths, task.n_triggers)
    except ConfigError as e:
        raise ConfigError(f"task.lengths.{e.key}", e.reason) from None
    length_key = {"weights": "weights", "optimal": "optimal_n"}.get(task.lengths.family, "high")
    longest = max(q)
    _require(
        (f"task.lengths.{length_key}", 2 * longest + 3 <= task.max_len - 1,
         f"l = {longest} gives T = 2l + 3 = {2 * longest + 3}, which exceeds task.max_len - 1 = {task.max_len - 1}"),
        ("task.lengths", task.ood_split != "displaced" or len(q) > 1 or longest >= 2,
         "the displaced OOD split needs a length >= 2 (with l = 1 the trigger cannot move)"),
    )
    if model.name == "one_step":
        _require(*((f"model.{k}", getattr(model, k) > 0, "must be > 0") for k in ("eta_V", "eta_KQ", "n_samples_V", "n_samples_KQ")))
    else:
        _validate_transformer(model, task)
        _require(
            ("optim.name", optim.name in OPTIMIZERS, f"must be one of {', '.join(OPTIMIZERS)}"),
            ("optim.lr", optim.lr > 0, "must be > 0"),
            ("optim.weight_decay", optim.weight_decay >= 0, "must be >= 0"),
            ("optim.batch_size", optim.batch_size >= 1, "must be >= 1"),
            ("optim.max_steps", optim.max_steps >= 1, "must be >= 1"),
        )
    _require(
        *((f"eval.{k}", getattr(ev, k) >= 1, "must be >= 1") for k in ("every", "n_id", "n_ood", "n_pairs_per_cell", "n_examples")),
        ("eval.patience", ev.patience >= 0, "must be >= 0 (0 never stops early)"),
        ("logging.media_every", cfg.logging.media_every >= 0, "must be >= 0 (0 logs media only at the end)"),
        ("logging.mode", cfg.logging.mode in WANDB_MODES, f"must be one of {', '.join(WANDB_MODES)}"),
        ("logging.project", bool(cfg.logging.project.strip()), "must not be empty"),
        ("eval.threshold", 0 < ev.threshold <= 1, "must be in (0, 1]"),
    )


def _validate_transformer(model, task) -> None:
    _require(
        ("model.n_layers", model.n_layers >= 1, "must be >= 1"),
        ("model.n_heads", model.n_heads >= 1, "must be >= 1"),
        ("model.embedding", model.embedding in EMBEDDINGS, f"must be one of {', '.join(EMBEDDINGS)}"),
        ("model.positional", model.positional in POSITIONAL, f"must be one of {', '.join(POSITIONAL)}"),
        ("model.positional", model.positional != "onehot_abs" or model.embedding == "onehot",
         "onehot_abs concatenates a one-hot position and needs model.embedding=onehot (use learned_abs)"),
        ("model.d_model", model.embedding == "onehot" or model.d_model >= 1, "must be >= 1"),
        ("model.d_head", model.d_head >= 0, "must be >= 0 (0 means d_model // n_heads)"),
        ("model.init_std", model.init_std > 0, "must be > 0"),
    )
    d_model = residual_width(model, task.vocab_size, task.max_len)
    d_head = head_width(model, d_model)
    d_key = d_model if model.tied_kq else d_head
    _require(
        ("model.n_heads", d_head >= 1, f"d_model = {d_model} leaves no width per head; set model.d_head"),
        ("model.positional", model.positional != "rotary" or d_key % 2 == 0,
         f"rotary needs an even key width, got {d_key} (change model.d_head or model.d_model)"),
    )


def _require(*checks: tuple[str, bool, str]) -> None:
    for key, ok, reason in checks:
        if not ok:
            raise ConfigError(key, reason)
