"""Tasks and models registered from Python (trainables/plugins.py) travel to the Ray workers by value, with every
trial: a class defined in a notebook cell, a script's `__main__` or a test module is nowhere a worker could import it
by name, on this machine or on a cluster's other nodes.

Ray pickles a trial's parameters with cloudpickle, which already pickles what `__main__` defines by value; any other
module of the user's own is marked to travel so too. Headsweep's own modules and installed packages stay by reference
(every worker imports them), so a registered instance of an installed class is still that class on the workers.
"""
from __future__ import annotations

import functools
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

from ray import cloudpickle

from trainables import plugins

OWN_PACKAGES = ("trainables", "sweep", "dashboards", "headsweep")


def shipped() -> tuple:
    """The instances registered in this process, their modules marked to be pickled by value where a worker could
    not import them: what tuner.py passes every trial."""
    objs = plugins.registered()
    for obj in objs:
        for module in _defining_modules(obj):
            if users_own(module):
                cloudpickle.register_pickle_by_value(module)
    return objs


def _defining_modules(obj) -> set[ModuleType]:
    """The modules of its class, its config dataclass and its view, and of the classes they derive from: a subclass of
    a class from another file of the user's needs that file too."""
    classes = [cls for part in (type(obj), getattr(obj, "config", None), getattr(obj, "view", None))
               if isinstance(part, type) for cls in part.__mro__]
    return {sys.modules[cls.__module__] for cls in classes if cls.__module__ in sys.modules}


def users_own(module: ModuleType) -> bool:
    """A module of the user's own: a file outside the standard library and the installed packages, and none of
    headsweep's (`__main__` too: cloudpickle ships it by value anyway)."""
    file = getattr(module, "__file__", None)
    if not file or module.__name__ == "__main__" or module.__name__.split(".")[0] in OWN_PACKAGES:
        return False
    return not any(Path(file).resolve().is_relative_to(root) for root in _installed_roots())


@functools.lru_cache(maxsize=1)
def _installed_roots() -> tuple[Path, ...]:
    """Where the standard library and installed packages live (a venv's and its base interpreter's)."""
    paths = sysconfig.get_paths()
    return tuple({Path(paths[key]).resolve() for key in ("stdlib", "platstdlib", "purelib", "platlib")})
