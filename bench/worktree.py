"""An older revision of the project checked out beside this one, for benchmarks that compare the two in one run."""
from __future__ import annotations

import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def checked_out(revision: str) -> Iterator[Path]:
    """The revision in a temporary git worktree, removed after. Its code runs with PYTHONPATH set to the tree (this
    checkout's venv installs the project in editable mode, pointing at this tree)."""
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "old"
        subprocess.run(["git", "worktree", "add", "--detach", str(tree), revision], cwd=ROOT, check=True,
                       capture_output=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
