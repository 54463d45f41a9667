"""tests/warm_cli.py: a command forked from the warm server ends as the `headsweep` executable does, with the same
exit code, stdout and stderr (a listing, one line for bad input, argparse's usage), from the caller's directory."""
import os
import subprocess

import pytest

from tests import warm_cli
from tests.integration.conftest import CONFIGS


@pytest.mark.parametrize("args", [
    ["list"],
    ["grid", str(CONFIGS / "debug_grid.yaml"), "sweep.seeds=x", "--out", "never"],  # refused at its config: exit 2
    ["grid"],  # argparse: usage and exit 2
])
def test_a_warm_command_ends_as_the_executable_does(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths resolve against the caller's directory
    env = dict(os.environ)
    cold = subprocess.run([warm_cli.HEADSWEEP, *args], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=120)
    warm = warm_cli.run(args, env, timeout=120)
    assert (warm.returncode, warm.stdout, warm.stderr) == (cold.returncode, cold.stdout, cold.stderr)
    assert cold.stdout or cold.stderr
    assert not (tmp_path / "never").exists()


def test_a_command_is_forked_after_a_driver_or_torch_dynamo_in_this_process_set_their_variables():
    """What a test's own Ray driver or torch._dynamo's import leaves in os.environ (PYTHONBREAKPOINT, read at each
    breakpoint() only; TORCHINDUCTOR_CACHE_DIR, set once for the whole run by tests/conftest.py) must not turn later
    commands cold; PYTHONPATH, read when the interpreter starts, must."""
    import torch._dynamo  # noqa: F401 (sets TORCHINDUCTOR_CACHE_DIR where it is unset)

    before = warm_cli.forked
    env = warm_cli.SERVER_ENV | {"PYTHONBREAKPOINT": "ray.util.rpdb._driver_set_trace",  # as ray.init sets it
                                 "TORCHINDUCTOR_CACHE_DIR": os.environ["TORCHINDUCTOR_CACHE_DIR"]}
    assert warm_cli.run(["list"], env, timeout=120).returncode == 0
    assert warm_cli.forked == before + 1
    with pytest.warns(UserWarning, match="started cold: PYTHONPATH differ"):
        assert warm_cli.run(["list"], env | {"PYTHONPATH": "/nowhere"}, timeout=120).returncode == 0
    assert warm_cli.forked == before + 1
