"""Tasks and models registered from Python (`headsweep.register`): defined anywhere, a notebook cell or a script's
`__main__`, where no worker could import them by name.

A cell run again with a changed task is checked again (`register` forgets what was derived from the earlier one). A
sweep ships `registered()` to its Ray workers by value with every trial (sweep/tuner.py), and the trainable `adopt`s
them before it resolves a name: in the workers they are then what the names pick, as in the driver.
"""
from __future__ import annotations

from trainables import config, dry_run
from trainables.errors import ConfigError
from trainables.models import MODELS, ModelSpec
from trainables.tasks import TASKS, Task


def register(obj):
    """Make a Task or ModelSpec instance available under its `name` in this process; returns it. Raises ConfigError
    (task.name or model.name) for a name a built-in or an installed plugin holds, or an object that breaks the
    protocol (no name, no config dataclass, a required method missing)."""
    registry = TASKS if isinstance(obj, Task) or (isinstance(obj, type) and issubclass(obj, Task)) else \
        MODELS if isinstance(obj, ModelSpec) or (isinstance(obj, type) and issubclass(obj, ModelSpec)) else None
    if registry is None:
        raise ConfigError("register", f"takes a Task or ModelSpec instance (trainables.tasks.Task, "
                                      f"trainables.models.ModelSpec), got {type(obj).__name__}")
    registry.register(obj)
    config.forget_derived()  # what this process derived from an earlier one of that name: schemas, dry runs
    dry_run.forget(obj.name)
    return obj


def registered() -> tuple:
    """Every instance registered in this process, tasks first: what a sweep ships to its workers."""
    return (*TASKS.registered().values(), *MODELS.registered().values())


def adopt(objs) -> None:
    """In a worker: register what the driver shipped, unless the same is registered already (a reused worker's
    earlier trial), so that its derived schemas and dry runs are kept."""
    for obj in objs:
        registry = TASKS if isinstance(obj, Task) else MODELS
        if not _same(registry.registered().get(obj.name), obj):
            register(obj)


def _same(a, b) -> bool:
    """Equal instances of one class (a class shipped by value is rebuilt once per process, so it stays one class)."""
    try:
        return a is b or (type(a) is type(b) and vars(a) == vars(b))
    except Exception:  # noqa: BLE001 (attributes whose == is not a bool, e.g. tensors)
        return False
