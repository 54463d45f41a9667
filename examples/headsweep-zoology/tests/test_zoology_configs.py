"""Every config of the example loads and validates as the verb its first line names would load it, and that line is
the exact command with its measured runtime."""
import re
from pathlib import Path

import pytest

from sweep.search.config import load_search
from sweep.space import load_sweep
from trainables import config

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
COMMAND = re.compile(r"^# headsweep (train|grid|search) examples/headsweep-zoology/configs/(\S+\.yaml) --out (\S+)"
                     r"\s+\((.+)\)$")


def test_every_config_is_here():
    assert {p.name for p in CONFIGS} >= {"debug_mqar.yaml", "debug_mqar_grid.yaml", "debug_mqar_search.yaml",
                                        "debug_base_conv.yaml", "mqar_grid.yaml", "mqar_search.yaml"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_a_config_loads_as_its_command_says_and_names_its_runtime(path):
    match = COMMAND.match(path.read_text().splitlines()[0])
    assert match, "the first line: # headsweep VERB examples/headsweep-zoology/configs/NAME --out DIR   (runtime)"
    verb, name, _, runtime = match.groups()
    assert name == path.name and "TIME" not in runtime
    if verb == "train":
        cfg = config.load(path)
    elif verb == "grid":
        cfg, _, points = load_sweep(path, [])
        assert len(points) >= 2
    else:
        cfg, search = load_search(path, [])
        assert search.knob.key == "task.n_train_keys"
    assert cfg.task.name == "mqar" and cfg.logging.wandb is False
