"""Shared test helpers: the repo's configs by path, and a tiny config loader."""
import os
from pathlib import Path

import pytest

os.environ["WANDB_MODE"] = "offline"  # a developer logged in to W&B must not send test runs online

from trainables import config

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


@pytest.fixture
def load_config():
    """load_config("debug.yaml", "seed=1", ...) -> validated Config."""
    return lambda name, *overrides: config.load(CONFIGS / name, list(overrides))
