"""DESIGN's data flow, enforced: tasks and models -> train -> trainable -> sweep -> dashboards.

- trainables/ imports nothing from sweep/ or dashboards/, and no ray, optuna or wandb at module level except
  trainable.py (the Ray entry point); the W&B sink imports wandb lazily, inside the sink.
- trainables/ holds no storage: where members' files live (a directory, a bucket, working copies) is sweep/storage/'s,
  handed to the trainable by the sweep; no module of trainables/ imports a storage client.
- dashboards/ imports nothing from sweep/; nothing imports headsweep/, the public face over the three.
- Nothing in sweep/ or dashboards/ names a task's keys or a model's name: what is task-specific is behind the
  registries (tasks.TASKS, models.MODELS).
- trainables/tasks/ and trainables/models/ import nothing that trains, measures or logs them.
"""
import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Whole words, in any name, string or comment: a task's keys and names, and the one-step model's name.
TASK_OR_MODEL_WORDS = re.compile(r"\b(n_triggers|trigger_copy|one_step|lengths|max_len)\b")
MODEL_NAMES = {"transformer", "one_step"}
# A model's name used as a value in a string: `model.name=transformer`, `name: transformer`, `models.transformer`.
MODEL_IN_STRING = re.compile(r"(name\s*[=:]\s*|\.)(transformer|one_step)\b|\b(transformer|one_step)\.[a-z_]")
IMPORTERS = {"import_module", "__import__"}


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def top_level_imports(path: Path) -> set[str]:
    """Modules imported at module level (not inside functions), as their first dotted part."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def all_imports(path: Path) -> set[str]:
    """Modules imported anywhere in the file, by statement or by importlib.import_module / __import__ of a string."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str) \
                and getattr(node.func, "attr", getattr(node.func, "id", None)) in IMPORTERS:
            names.add(node.args[0].value.split(".")[0])
    return names


@pytest.mark.parametrize("path", modules("trainables"), ids=lambda p: str(p.relative_to(ROOT)))
def test_trainables_import_nothing_downstream_and_no_orchestration_library(path):
    assert not all_imports(path) & {"sweep", "dashboards"}
    heavy = top_level_imports(path) & {"ray", "optuna", "wandb", "wandb_workspaces"}
    assert not heavy or path.name == "trainable.py", f"{path.name} imports {heavy} at module level"


# The clients an output place is reached through (a bucket's, a filesystem's): sweep/storage/ uses pyarrow's.
STORAGE_CLIENTS = {"pyarrow", "fsspec", "s3fs", "boto3", "botocore"}


@pytest.mark.parametrize("path", modules("trainables"), ids=lambda p: str(p.relative_to(ROOT)))
def test_trainables_hold_no_storage(path):
    """A trial opens its members through the opener the sweep passes to run_trial (sweep.storage.copies), never
    through storage of its own: no module of trainables/ reaches a bucket or imports the sweep's storage."""
    found = all_imports(path) & (STORAGE_CLIENTS | {"sweep"})
    assert not found, f"{path.name} imports {found}"


def trainables_imports(path: Path) -> set[str]:
    """The trainables modules a file imports, as `trainables.<module>` (first two dotted parts)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("trainables"):
            parts = node.module.split(".")
            found |= {f"trainables.{a.name}" for a in node.names} if len(parts) == 1 else {".".join(parts[:2])}
        elif isinstance(node, ast.Import):
            found |= {".".join(a.name.split(".")[:2]) for a in node.names if a.name.startswith("trainables.")}
    return found


# What trains, measures and logs (optim.py is not among them: models declare their phases with its Phase).
TRAINING = {"trainables.train", "trainables.population", "trainables.trainable", "trainables.logger",
            "trainables.config", "trainables.readouts", "trainables.memory"}


@pytest.mark.parametrize("path", modules("trainables/tasks") + modules("trainables/models"),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_tasks_and_models_know_nothing_of_training(path):
    """Tasks and models come first in the data flow: what trains them imports them, never the other way."""
    assert not trainables_imports(path) & TRAINING, trainables_imports(path) & TRAINING


@pytest.mark.parametrize("path", modules("trainables") + modules("sweep") + modules("dashboards"),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_imports_headsweep_the_public_face_over_the_rooms(path):
    """headsweep/ (`import headsweep as hs`) is built on trainables, sweep and dashboards; none of them leans on it,
    so the CLI (sweep/cli.py) and hs are two faces of the same functions."""
    assert "headsweep" not in all_imports(path)


@pytest.mark.parametrize("path", modules("dashboards"), ids=lambda p: str(p.relative_to(ROOT)))
def test_dashboards_import_nothing_from_sweep(path):
    assert "sweep" not in all_imports(path)


@pytest.mark.parametrize("path", modules("sweep") + modules("dashboards"), ids=lambda p: str(p.relative_to(ROOT)))
def test_sweep_and_dashboards_name_no_task_key_and_no_model(path):
    for token in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if token.type in (tokenize.NAME, tokenize.STRING, tokenize.COMMENT):
            assert not TASK_OR_MODEL_WORDS.search(token.string), f"line {token.start[0]}: {token.string}"
        if token.type == tokenize.STRING:
            assert token.string.strip("\"'") not in MODEL_NAMES, f"line {token.start[0]}: {token.string}"
            assert not MODEL_IN_STRING.search(token.string), f"line {token.start[0]}: {token.string}"
        if token.type == tokenize.NAME:
            assert token.string not in MODEL_NAMES, f"line {token.start[0]}: {token.string}"


@pytest.mark.parametrize("leak", [
    "x = cfg.task.n_triggers\n",  # a task key in code
    'x = cfg["task"]["lengths"]["low"]\n',  # ... as a string
    "x = 1  # the lengths decide\n",  # ... in a comment
    'if name == "transformer":\n    pass\n',  # a model's name as a string
    'run(["model.name=transformer"])\n',  # ... inside an override
    "from trainables.models import transformer\n",  # ... as a name
])
def test_the_name_scan_would_catch_each_kind_of_leak(tmp_path, leak):
    leaky = tmp_path / "leaky.py"
    leaky.write_text(leak)
    with pytest.raises(AssertionError):
        test_sweep_and_dashboards_name_no_task_key_and_no_model(leaky)


@pytest.mark.parametrize("leak", ["from sweep.storage import copies\n", "import pyarrow.fs\n"])
def test_the_storage_scan_would_catch_each_kind_of_import(tmp_path, leak):
    leaky = tmp_path / "leaky.py"
    leaky.write_text(leak)
    with pytest.raises(AssertionError):
        test_trainables_hold_no_storage(leaky)


@pytest.mark.parametrize("leak", ["from sweep import grid\n", "import sweep.grid\n",
                                  'grid = importlib.import_module("sweep.grid")\n', 'grid = __import__("sweep")\n'])
def test_the_import_scan_would_catch_each_kind_of_import(tmp_path, leak):
    leaky = tmp_path / "leaky.py"
    leaky.write_text(leak)
    with pytest.raises(AssertionError):
        test_dashboards_import_nothing_from_sweep(leaky)
    with pytest.raises(AssertionError):
        test_trainables_import_nothing_downstream_and_no_orchestration_library(leaky)


def test_a_prose_mention_of_a_transformer_is_not_a_leak(tmp_path):
    prose = tmp_path / "prose.py"
    prose.write_text('TITLE = "When does a transformer learn an induction head?"\n')
    test_sweep_and_dashboards_name_no_task_key_and_no_model(prose)


@pytest.mark.parametrize("path", modules("trainables/tasks") + [ROOT / "trainables/readouts.py"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_tasks_read_the_cache_through_trainables_cache_not_a_model(path):
    """Data knows no model: the cache helpers tasks use (patterns, pattern_at) live in trainables/cache.py."""
    imported = trainables_imports(path)
    assert "trainables.models" not in imported or path.name == "readouts.py", imported
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "trainables.models":
            assert not {a.name for a in node.names} & {"patterns", "pattern_at"}
