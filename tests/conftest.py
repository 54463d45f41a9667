"""Shared test helpers: the repo's configs by path, and a tiny config loader."""
from pathlib import Path

import pytest

from trainables import config

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"


@pytest.fixture
def load_config():
    """load_config("debug.yaml", "seed=1", ...) -> validated Config."""
    return lambda name, *overrides: config.load(CONFIGS / name, list(overrides))
