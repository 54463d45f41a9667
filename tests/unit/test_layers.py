"""DESIGN's data flow, enforced: tasks and models -> train -> trainable -> sweep -> dashboards.

- trainables/ imports nothing from sweep/ or dashboards/, and no ray, optuna or wandb at module level except
  trainable.py (the Ray entry point); the W&B sink imports wandb lazily, inside the sink.
- dashboards/ imports nothing from sweep/.
- Nothing in sweep/ or dashboards/ names a task's keys or a model's name: what is task-specific is behind the
  registries (tasks.TASKS, models.MODELS).
"""
import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TASK_OR_MODEL_WORDS = re.compile(r"n_triggers|trigger_copy|one_step|task\.lengths|\bmax_len\b")
MODEL_NAMES = {"transformer", "one_step"}


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
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", modules("trainables"), ids=lambda p: str(p.relative_to(ROOT)))
def test_trainables_import_nothing_downstream_and_no_orchestration_library(path):
    assert not all_imports(path) & {"sweep", "dashboards"}
    heavy = top_level_imports(path) & {"ray", "optuna", "wandb", "wandb_workspaces"}
    assert not heavy or path.name == "trainable.py", f"{path.name} imports {heavy} at module level"


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
        if token.type == tokenize.NAME:
            assert token.string not in MODEL_NAMES, f"line {token.start[0]}: {token.string}"


def test_the_checks_would_catch_a_leak(tmp_path):
    """The token scan is not vacuous: it flags a task key in code and a model's name as a string."""
    leaky = tmp_path / "leaky.py"
    leaky.write_text('x = cfg.task.n_triggers\nif name == "transformer":\n    pass\n')
    with pytest.raises(AssertionError):
        test_sweep_and_dashboards_name_no_task_key_and_no_model(leaky)
