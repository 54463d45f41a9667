"""The storage check's driver side, without Ray: an --out the driver itself cannot write is one ConfigError, and it
leaves nothing behind. (Nodes that cannot read or write it: tests/e2e/test_two_nodes.py, with real nodes.)"""
import subprocess
import sys

import pytest

from sweep import preflight
from trainables.errors import ConfigError


def test_an_out_the_driver_cannot_create_is_refused_and_nothing_is_left(tmp_path):
    (tmp_path / "a_file").write_text("not a directory")
    out = tmp_path / "a_file" / "runs" / "grid"
    with pytest.raises(ConfigError) as info:
        preflight.check_shared_storage(out)
    assert info.value.key == "--out" and "the driver cannot write" in info.value.reason
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_missing_ancestors_are_listed_deepest_first(tmp_path):
    out = tmp_path / "a" / "b"
    assert preflight._missing_ancestors(out) == [out, tmp_path / "a"]
    out.mkdir(parents=True)
    assert preflight._missing_ancestors(out) == []


def test_what_runs_on_each_node_imports_nothing_heavy():
    """The probes' module is what a node's worker imports to run them (by reference, as Ray ships a module's
    function); no trial reuses that worker, so Tune, torch or pandas imported there would be seconds of CPU wasted on
    every grid and search."""
    code = ("import sys; import sweep.storage.probes; "
            "print(sorted(m for m in ('torch', 'pandas', 'ray.tune', 'optuna', 'scipy', 'matplotlib') "
            "if m in sys.modules))")
    heavy = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert heavy == "[]"
    assert preflight.on_node.directory_probe._function.__module__ == "sweep.storage.probes"
