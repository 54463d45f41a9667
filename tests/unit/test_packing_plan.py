"""The packing planner (sweep/packing.py), without Ray: which members share a Tune trial, and the trials refused before
anything runs because they could only fail."""
from pathlib import Path

import pytest

from sweep import packing
from sweep.space import load_sweep
from sweep.storage.out_dir import OutDir
from tests.conftest import CONFIGS
from trainables import config, memory
from trainables.errors import ConfigError

ROOM = 2 ** 34  # bytes the largest node gives packs: room for every debug member


@pytest.mark.parametrize("gpu, refused", [(0, True), (0.5, False)])
def test_cuda_trials_that_ask_for_no_gpu_are_refused_before_anything_runs(gpu, refused):
    """Ray hides the GPUs from a trial that asks for none: such a trial could only fail, on every try."""
    base, sweep, points = load_sweep(CONFIGS / "debug_grid.yaml", ["sweep.axes=[{key: device, values: [cpu, cuda]}]"])
    members = packing.members(points, OutDir(Path("/nonexistent")))
    if refused:
        with pytest.raises(ConfigError, match="cuda needs sweep.resources.gpu > 0") as info:
            packing.plan(config.to_dict(base), members, 1, gpu, ROOM)
        assert info.value.key == "device"
    else:
        assert len(packing.plan(config.to_dict(base), members, 1, gpu, ROOM)) == len(points)


def test_a_candidates_seeds_share_a_trial_so_that_they_can_stop_each_other():
    """Chunks of `pack` members never split one verdict group (a candidate's seeds, consecutive) unless it alone is
    larger than `pack`; members without a group chunk as before."""
    base, sweep, points = load_sweep(CONFIGS / "debug_grid.yaml", ["sweep.seeds=[0,1]"])  # 4 cells x 2 seeds
    grouped = lambda point: {"group": f"{point['task.lengths.low']},{point['task.lengths.high']}"}
    sizes = lambda members, pack: [len(c) for c in packing.plan(config.to_dict(base), members, pack, 0, ROOM).values()]
    with_groups = packing.members(points, OutDir(Path("/nonexistent")), verdict=grouped)
    assert sizes(with_groups, 3) == [2, 2, 2, 2]  # 3 would split a candidate: 2 a trial
    assert sizes(with_groups, 4) == [4, 4] and sizes(with_groups, 1) == [1] * 8
    for chunk in packing.plan(config.to_dict(base), with_groups, 3, 0, ROOM).values():
        assert len({m["verdict"]["group"] for m in chunk}) == 1
    assert sizes(packing.members(points, OutDir(Path("/nonexistent"))), 3) == [3, 3, 2]


def test_auto_packing_rounds_up_to_whole_candidates():
    sweep_section = load_sweep(CONFIGS / "debug_grid.yaml", [])[1]
    assert sweep_section.pack == 0
    assert packing.members_per_pack(sweep_section, 4, slots=2) == 1  # 4 members over 2 slots x 4 packs: 1 a pack
    assert packing.members_per_pack(sweep_section, 4, slots=2, group_size=3) == 3
    assert packing.members_per_pack(sweep_section, 40, slots=2, group_size=2) == 6  # 5, rounded up to whole pairs


@pytest.mark.parametrize("name, vectorized", [("debug.yaml", True), ("debug_grid.yaml", False)])
def test_a_population_larger_than_the_largest_node_holds_is_refused_naming_the_pack_setting(name, vectorized):
    """A transformer's pack trains as one population: 4 members need what memory.needs(cfg, 4) says (every member's
    step at once, one member's evaluation at a time). The one-step model's members run one after another in their
    trial: any pack fits where one member does."""
    base_dict = config.to_dict(config.load(CONFIGS / name, []))
    members = packing.members([{"seed": seed} for seed in range(4)], OutDir(Path("/nonexistent")))
    cfg = config.with_point(base_dict, {"seed": 0})
    peak = lambda count: max(memory.needs(cfg, count).values())  # bytes at the peak of `count` members as one
    assert len(packing.plan(base_dict, members, 4, 0, room=peak(4))) == 1
    if not vectorized:
        assert len(packing.plan(base_dict, members, 4, 0, room=peak(1))) == 1
        return
    assert peak(1) < peak(3) < peak(4) < 4 * peak(1)  # the evaluation's peak is one member's
    with pytest.raises(ConfigError, match="set it to at most 3") as info:
        packing.plan(base_dict, members, 4, 0, room=peak(3), pack_setting="search.pack")
    assert info.value.key == "search.pack"
