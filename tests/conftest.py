"""Shared test helpers: the repo's configs by path, a tiny config loader, and metrics compared across runs; every test
marked with its tier by the folder it lives in (TIERS: `pytest -m unit` is `make check`)."""
import math
import os
from pathlib import Path

import pytest

os.environ["WANDB_MODE"] = "offline"  # a developer logged in to W&B must not send test runs online
# How a driver in this process reaches the test Ray heads (token auth, loopback only), set before anything imports
# ray: Ray reads both when it is imported, so a test that joins a head in process (tests/integration/test_api_on_ray.py)
# after another test imported ray would otherwise connect without its token and wait for the head forever.
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# One torch thread here and in every process a test starts (CLI drivers training in process, kernels; Ray gives its
# workers one already): test files run side by side on 2 cores (make test: pytest-xdist), where two processes' thread
# pools fight over the cores (a unit test of the transformer took 20.7 s beside another, 1.5 s alone; a debug run up
# to 14x slower). Set before torch is imported, which reads it then.
os.environ["OMP_NUM_THREADS"] = "1"

import torch  # noqa: E402
from torch._inductor.runtime.cache_dir_utils import cache_dir  # noqa: E402

# torch sets TORCHINDUCTOR_CACHE_DIR in os.environ to its default when torch._dynamo is first imported (torch.optim
# imports it: any training in a test's own process) and reads it then. Set here, before tests/warm_cli.py copies the
# environment its fork server starts with, so that no later import changes it (it did, and every later command of
# that xdist worker started cold).
cache_dir()

from tests.postgres_server import postgres  # noqa: F401,E402 (one PostgreSQL per run, for every tier)
from trainables import config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
# folder -> tier. unit: in-process, seconds in all (the CLI's bad-input paths included: sweep.cli.main called in
# process); integration: real Ray, Optuna storages, W&B offline, the CLI as a subprocess; e2e: clusters, Ray jobs,
# browsers, Slurm, buckets. The example plugin's own tests are in-process.
TIERS = {"tests/unit": "unit", "tests/integration": "integration", "tests/e2e": "e2e",
         "examples/headsweep-zoology/tests": "unit"}


def pytest_collection_modifyitems(config, items):
    for item in items:
        folder = item.path.relative_to(ROOT).parent.as_posix()
        tier = TIERS.get(folder)
        if tier is None:
            raise pytest.UsageError(f"{item.nodeid}: a test outside the tiers' folders ({', '.join(TIERS)})")
        item.add_marker(tier)


@pytest.fixture
def load_config():
    """load_config("debug.yaml", "seed=1", ...) -> validated Config."""
    return lambda name, *overrides: config.load(CONFIGS / name, list(overrides))


def assert_same_metrics(got: dict, expected: dict, rel: float = 1e-5) -> None:
    """Two runs' final metrics agree (to float tolerance), a packed, resumed or retried run against one that ran alone
    and uninterrupted; what only says how the run went (wall-clock seconds, the step it resumed from) aside. A
    result.json writes a non-finite value as null. `rel`: wider where the two ran in different processes."""
    bookkeeping = {"seconds", "resumed_from_step"}
    assert set(got) - bookkeeping == set(expected) - bookkeeping
    for key, value in expected.items():
        if key in bookkeeping:
            continue
        if isinstance(value, float) and math.isfinite(value):
            assert got[key] == pytest.approx(value, rel=rel, abs=1e-5), key
        elif isinstance(value, float):
            assert got[key] is None or not math.isfinite(got[key]), key
        else:
            assert got[key] == value, key
