"""The docs' Python examples run as written: every ```python block of README.md and docs/API.md, in order, in one
Python process started in a fresh working directory that holds the checkout's configs/. The only change to a block is
its elisions (`...`), filled in from the tutorial's plugin (tests/plugins/repeat.py); after each block, what the docs
say its lines return is checked, and that the process's three sweeps ran on the one local Ray the first started
(docs/API.md: kept for the next). W&B is off (WANDB_MODE=disabled): the examples' results, not W&B's, are what is
tested here (tests/integration/test_wandb.py runs W&B offline)."""
from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README, API = ROOT / "README.md", ROOT / "docs" / "API.md"
REPEAT = ROOT / "tests" / "plugins" / "repeat.py"
ELIDED_FIELDS = '    name: str = "repeat"\n    ...\n'
ELIDED_HOOKS = ("    ...                       # validate, dims, batch_sampler, eval_splits: "
                "docs/EXTENDING.md section 2\n")

# What each block's comments promise, checked in the same process right after it.
CHECKS = {
    (API, 0): """
import ray
from matplotlib.figure import Figure
assert len(grid.df) == len(cfg.points) and grid.failed.empty, grid.df
assert len(grid.history(grid.df.iloc[0])) > 0 and isinstance(grid.phase_diagram(), Figure)
first_ray = ray.get_runtime_context().get_node_id()  # the local Ray the grid started, kept for the next sweep
""",
    (API, 1): """
loaded = hs.load("runs/repeat")
assert sorted(loaded.df["task.n_train_strings"]) == [16, 1024] and loaded.failed.empty, loaded.df
""",
    (README, 0): """
from matplotlib.figure import Figure
assert {"diversity_star", "diversity_star_low", "diversity_star_high"} <= set(found.table.columns)
assert found.table["finished"].all() and isinstance(found.success_curves(), Figure)
assert hs.load("runs/quickstart").members.equals(found.members) and found.table["seeds"].sum() == len(found.members)
assert ray.get_runtime_context().get_node_id() == first_ray  # three sweeps, one Ray
""",
}


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", path.read_text(), flags=re.S | re.M)


def filled(block: str) -> str:
    """The hs.register example with the tutorial task's fields and hooks where it writes `...`; the rest as written."""
    if ELIDED_FIELDS not in block:
        return block
    assert ELIDED_HOOKS in block, "the register example's elisions moved: update ELIDED_* here"
    source = REPEAT.read_text()
    classes = {node.name: node for node in ast.parse(source).body if isinstance(node, ast.ClassDef)}
    fields = [ast.get_source_segment(source, n) for n in classes["RepeatConfig"].body if isinstance(n, ast.AnnAssign)]
    hooks = [n for n in classes["Repeat"].body if isinstance(n, ast.FunctionDef)]
    hook_source = "\n".join("    " + ast.get_source_segment(source, n).replace("\n", "\n    ") for n in hooks)
    block = block.replace(ELIDED_FIELDS, "".join(f"    {field}\n" for field in fields))
    attributes = [ast.get_source_segment(source, n) for n in classes["Repeat"].body if isinstance(n, ast.Assign)]
    attributes = [line for line in attributes if not line.startswith(("name", "config"))]  # the example's own
    block = block.replace(ELIDED_HOOKS, "".join(f"    {line}\n" for line in attributes) + hook_source + "\n")
    return "import torch\nfrom headsweep import Batch, require\n" + block


def script() -> str:
    parts = []
    for path in (API, README):
        blocks = python_blocks(path)
        assert blocks, f"{path.name} has no python block"
        for index, block in enumerate(blocks):
            name = f"{path.relative_to(ROOT)} block {index + 1}"
            parts += [f"print({name!r} + ': running', flush=True)", filled(block), CHECKS.get((path, index), ""),
                      f"print({name!r} + ': ok', flush=True)"]
    return "\n".join(parts)


def test_every_python_block_of_the_readme_and_api_md_runs_as_written(tmp_path):
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "RAY_ADDRESS"))} | {
        "WANDB_MODE": "disabled"}
    (tmp_path / "examples.py").write_text(script())
    proc = subprocess.run([sys.executable, "examples.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    done = [line for line in proc.stdout.splitlines() if line.endswith(": ok")]
    assert done == ["docs/API.md block 1: ok", "docs/API.md block 2: ok", "README.md block 1: ok"], proc.stdout


def test_the_register_example_is_filled_in_only_where_it_elides():
    """Every line of the example survives the filling in, and the filled task is the tutorial's."""
    block = next(b for b in python_blocks(API) if "hs.register" in b)
    full = filled(block)
    kept = [line for line in block.splitlines() if line.strip() and not line.strip().startswith("...")]
    assert all(line in full.splitlines() for line in kept)
    assert "def batch_sampler(self, cfgs, device" in full and "n_train_strings: int = 64" in full
    assert 'member_fields = ("n_train_strings",)' in full
    compile(full, "API.md", "exec")
