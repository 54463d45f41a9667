"""Where tasks and models come from: built-ins, installed plugins and module paths, one mechanism for all three.

A name in a config (`task.name`, `model.name`) resolves to a `module:ATTR` target, imported only when that name is
used, so a broken plugin never breaks the others or the built-ins:
- a built-in: `trigger_copy` -> `trainables.tasks.trigger_copy:TASK`, listed below as a package would list it;
- an installed plugin: an entry point of group `headsweep.tasks` (or `headsweep.models`), `name = "module:ATTR"`,
  read with importlib.metadata (the way pytest, Inspect and MLflow find plugins);
- a module path written in the config itself, `task.name: "my_pkg.my_task:TASK"`, for code that is importable but
  not installed: on sys.path, or under the directory headsweep runs in (which Ray also puts on its workers' paths);
- an instance registered in this process (`register`, from Python: `headsweep.register`), defined anywhere, even
  where nothing can import it (a notebook cell); the sweep ships it to its workers by value (trainables/plugins.py).

Anything else than an instance of the protocol's class (Task, ModelSpec) with the required methods is one ConfigError
naming the config key. A plugin written against an earlier API is adapted here, once, where it arrives
(trainables/tasks/legacy.py), so nothing downstream needs to know about earlier APIs.
"""
from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import importlib.metadata
import os
import sys
from dataclasses import dataclass

from trainables.errors import ConfigError, require


@dataclass(frozen=True)
class Source:
    """One way a name is provided: the `module:ATTR` it names and where that comes from."""

    name: str
    target: str  # "module:ATTR"
    origin: str  # "built-in", "package <dist> <version>" or "module path"


class Registry:
    """The tasks (or models) that names can pick. Iterates over the names of the built-ins and installed plugins;
    `registry[name]` also accepts a module path (a name with a colon). Lookups raise ConfigError keyed by `key`
    (e.g. task.name). `adapt(obj) -> obj` brings a plugin written against an earlier API to the protocol."""

    def __init__(self, kind: str, base: type, required: tuple[str, ...], builtins: dict[str, str], adapt=None):
        self.kind, self.base, self.required = kind, base, required
        self.adapt = adapt or (lambda obj: obj)
        self.key, self.group = f"{kind}.name", f"headsweep.{kind}s"
        self.builtins = {name: Source(name, target, "built-in") for name, target in builtins.items()}
        self.default = next(iter(builtins))
        self._loaded: dict[str, object] = {}
        self._registered: dict[str, object] = {}

    # --- discovery (no plugin is imported) --------------------------------------------------------------------
    def sources(self) -> dict[str, list[Source]]:
        """Name -> every source that provides it, built-ins first (more than one: a collision)."""
        found = {name: [source] for name, source in self.builtins.items()}
        for source in _entry_points(self.group):
            found.setdefault(source.name, []).append(source)
        for name, obj in self._registered.items():
            defined = f"{type(obj).__module__}:{type(obj).__qualname__}()"  # its class, read as a target
            found.setdefault(name, []).append(Source(name, defined, REGISTERED))
        return found

    def __iter__(self):
        return iter(self.sources())

    # --- lookup -------------------------------------------------------------------------------------------------
    def __getitem__(self, name: str):
        if name not in self._loaded:
            self._loaded[name] = self._load(self.source(name))
        return self._loaded[name]

    def source(self, name: str) -> Source:
        if not isinstance(name, str) or not name:
            raise ConfigError(self.key, f"must be a {self.kind} name or a module path (module:ATTR), got {name!r}")
        if ":" in name:  # module:ATTR
            return Source(name, name, "module path")
        sources = self.sources()
        if name not in sources:
            close = difflib.get_close_matches(name, list(sources), n=len(sources), cutoff=0.0)
            raise ConfigError(self.key, f"unknown {self.kind} {name!r}; available: {', '.join(close)} (or a module "
                                        f"path, my_package.my_module:ATTR; `headsweep list` shows each)")
        if len(sources[name]) > 1:
            claims = " and ".join(f"{s.origin} ({s.target})" for s in sources[name])
            raise ConfigError(self.key, f"{name!r} is claimed by {claims}; uninstall one or rename its entry point "
                                        f"in group {self.group}")
        return sources[name][0]

    # --- registered in this process ----------------------------------------------------------------------------
    def register(self, obj) -> None:
        """Make `obj` (an instance of the protocol's class) what its `name` picks in this process. Registering the
        same name again replaces it (a notebook cell run again); a name a built-in or an installed plugin holds is
        refused, as is anything that would not load from a module either. Raises ConfigError keyed by `key`."""
        where = f"{self.kind} {getattr(obj, 'name', None)!r} (registered)"
        obj = self._adapted(obj, where, "register an instance of it ({}())")
        if ":" in obj.name:
            raise ConfigError(self.key, f"{where}: its name must not hold a colon (that is a module path)")
        taken = [s for s in self.sources().get(obj.name, []) if s.origin != REGISTERED]
        if taken:
            raise ConfigError(self.key, f"{obj.name!r} is already the {taken[0].origin} {self.kind} "
                                        f"({taken[0].target}); register yours under another name")
        self._registered[obj.name] = self._loaded[obj.name] = obj

    def registered(self) -> dict[str, object]:
        """Name -> the instances registered in this process."""
        return dict(self._registered)

    def _load(self, source: Source):
        detail = source.origin if source.origin == "module path" else f"{source.origin}, {source.target}"
        where = f"{self.kind} {source.name!r} ({detail})"
        module_name, _, attr = source.target.partition(":")
        if source.origin == "module path":
            _with_working_dir_on_path()
        try:
            module = importlib.import_module(module_name)
        except Exception as e:  # ImportError, or whatever the plugin's own import raised
            hint = _how_to_import(e, module_name) if source.origin == "module path" else ""
            raise ConfigError(self.key, f"{where} cannot be imported: {type(e).__name__}: {_first_line(e)}{hint}"
                              ) from None
        try:
            obj = functools.reduce(getattr, attr.split("."), module)
        except AttributeError:
            raise ConfigError(self.key, f"{where}: module {module_name} has no attribute {attr}") from None
        return self._adapted(obj, where, f"name an instance of it ({attr.upper()} = {{}}())")

    def _adapted(self, obj, where: str, how: str):
        """`obj` brought to the protocol (adapt), or ConfigError: not an instance of the protocol's class (for the
        class itself, `how`, its `{}` the class's name, says how to make one), or lacking its name, its config
        dataclass or a required method."""
        if isinstance(obj, type) and issubclass(obj, self.base):
            raise ConfigError(self.key, f"{where} is the class {obj.__name__}; {how.format(obj.__name__)}")
        if not isinstance(obj, self.base):
            raise ConfigError(self.key, f"{where} is a {type(obj).__name__}, not a {self.base.__module__}."
                                        f"{self.base.__name__}")
        obj = self.adapt(obj)
        config = getattr(obj, "config", None)
        missing = [m for m in self.required if m not in vars(obj) and getattr(type(obj), m) is getattr(self.base, m)]
        require((self.key, isinstance(getattr(obj, "name", None), str) and bool(obj.name),
                 f"{where}: has no name (a class attribute `name = \"...\"`)"),
                (self.key, isinstance(config, type) and dataclasses.is_dataclass(config)
                 and "name" in {f.name for f in dataclasses.fields(config)},
                 f"{where}: its `config` must be a dataclass with a `name` field (the section's schema)"),
                (self.key, not missing, f"{where}: does not implement {', '.join(missing)}"))
        return obj


REGISTERED = "registered in this process"


@functools.lru_cache(maxsize=None)
def _entry_points(group: str) -> tuple[Source, ...]:
    """The installed plugins of a group, once per process. The same distribution seen twice on sys.path (an
    editable install and a checkout, say) is one source."""
    sources = []
    for point in importlib.metadata.entry_points(group=group):
        dist = getattr(point, "dist", None)
        origin = f"package {dist.name} {dist.version}" if dist is not None else "an installed package"
        sources.append(Source(point.name, point.value, origin))
    return tuple(dict.fromkeys(sources))  # in order, each once


def _with_working_dir_on_path() -> None:
    """Module paths resolve against the directory headsweep runs in too, as `python -m` would (the console script
    puts its own bin/ there instead). Appended, so it never shadows an installed package; Ray adds the driver's
    working directory to its workers' paths as well, so a trial finds the same module."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.append(cwd)


def _how_to_import(error: Exception, module_name: str) -> str:
    """For a module path that is not found (the module or a package of its path, not a module it imports itself):
    how to make it importable, or where the package that lacks it was found (another one of that name may shadow
    the intended one)."""
    parts = module_name.split(".")
    own = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}  # mytasks, mytasks.copy
    if not isinstance(error, ModuleNotFoundError) or error.name not in own:  # a module the plugin imports, or worse
        return ""
    parent, _, child = error.name.rpartition(".")
    if parent:  # ("'x' is not a package" where x is a module: the message says so)
        found = list(getattr(sys.modules.get(parent), "__path__", []))
        return f"; {parent} was found ({', '.join(found)}) but has no module {child}" if found else ""
    return (f"; to make {error.name} importable, run headsweep from the directory that holds {error.name}/ (or "
            f"{error.name}.py), add that directory to PYTHONPATH, or pip install the package that provides it")


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"
