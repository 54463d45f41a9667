"""The sweep section: axes, ranges, constraints (with sums), seeds, point ids and their errors."""
import pytest

from sweep.space import AxisConfig, SweepConfig, load_sweep, point_id, points
from trainables import config
from trainables.errors import ConfigError
from tests.conftest import CONFIGS

BASE = config.load(CONFIGS / "paper_theory.yaml")


def sweep(*axes, constraints=(), seeds=(0,)) -> SweepConfig:
    return SweepConfig(axes=[AxisConfig(**a) for a in axes], constraints=list(constraints), seeds=list(seeds))


def test_paper_theory_grid_has_the_papers_156_points():
    _, _, grid = load_sweep(CONFIGS / "paper_theory_grid.yaml", [])
    assert len(grid) == 156
    assert all(p["task.lengths.low"] < p["task.lengths.high"] for p in grid)
    assert {p["task.n_triggers"] for p in grid} == {4, 8}
    assert len({point_id(p) for p in grid}) == 156


def test_range_is_inclusive_with_step_and_seeds_multiply():
    grid = points(BASE, sweep({"key": "task.lengths.low", "range": [3, 9, 3]}, seeds=(0, 5)))
    assert [(p["task.lengths.low"], p["seed"]) for p in grid] == [(3, 0), (3, 5), (6, 0), (6, 5), (9, 0), (9, 5)]


def test_constraints_with_sums_and_numbers():
    grid = points(BASE, sweep({"key": "task.lengths.low", "values": [2, 4, 6]},
                              {"key": "task.lengths.width", "values": [1, 5, 9]},
                              constraints=["task.lengths.low + task.lengths.width <= 11", "task.lengths.width > 1"]))
    assert [(p["task.lengths.low"], p["task.lengths.width"]) for p in grid] == [(2, 5), (2, 9), (4, 5), (6, 5)]


def test_width_sets_high_at_load():
    cfg = config.with_point(config.to_dict(BASE), {"task.lengths.low": 4, "task.lengths.width": 3})
    assert (cfg.task.lengths.low, cfg.task.lengths.high) == (4, 6)


@pytest.mark.parametrize("axes, constraints, key", [
    ([{"key": "task.lengths.lo", "values": [1]}], [], "sweep.axes[0].key"),
    ([{"key": "task.lengths.low", "values": [1], "range": [1, 2]}], [], "sweep.axes[0]"),
    ([{"key": "task.lengths.low", "range": [5, 2]}], [], "sweep.axes[0].range"),
    ([{"key": "seed", "values": [1, 2]}], [], "sweep.axes[0].key"),
    ([{"key": "task.lengths.low", "values": [3]}], ["task.lengths.low <"], "sweep.constraints[0]"),
    ([{"key": "task.lengths.low", "values": [3]}], ["task.n_triggers < 3"], "sweep.constraints[0]"),
    ([{"key": "task.lengths.low", "values": [3]}], ["task.lengths.low > 5"], "sweep.constraints"),
    ([{"key": "task.lengths.high", "values": [15, 16]}], [], "task.lengths.high"),  # T = 35 > L - 1 at high = 16
])
def test_bad_sweeps_name_their_key(axes, constraints, key):
    with pytest.raises(ConfigError) as info:
        points(BASE, sweep(*axes, constraints=constraints))
    assert info.value.key == key


def test_unknown_sweep_key_suggests_the_closest(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_sweep(CONFIGS / "debug_grid.yaml", ["sweep.max_concurent=2"])
    assert info.value.key == "sweep.max_concurent" and "sweep.max_concurrent" in info.value.reason


def test_point_ids_use_short_names_unless_they_collide():
    assert point_id({"task.lengths.low": 3, "seed": 0}) == "low=3,seed=0"
    assert point_id({"task.lengths.low": 3, "model.low": 1}) == "task.lengths.low=3,model.low=1"


@pytest.mark.parametrize("key, value, reason", [("pack", -1, "must be >= 0 (0 = auto)"),
                                                ("max_concurrent", -1, "must be >= 0"),
                                                ("max_failures", -1, "must be >= 0"),
                                                ("stop.streak", -1, "must be >= 0")])
def test_a_grid_and_a_search_check_their_run_keys_alike(key, value, reason):
    """resources, pack, max_concurrent, max_failures and stop are one section's keys (space.RunConfig) in both."""
    from sweep.search.config import load_search

    for section, load in (("sweep", lambda o: load_sweep(CONFIGS / "debug_grid.yaml", o)),
                          ("search", lambda o: load_search(CONFIGS / "debug_search.yaml", o))):
        with pytest.raises(ConfigError) as info:
            load([f"{section}.{key}={value}"])
        assert info.value.key == f"{section}.{key}" and reason in info.value.reason
