"""Before anything starts: a trial that no node could ever run (it would pend forever), or that could only fail, is
refused."""
from pathlib import Path

import pytest

from sweep import tuner
from sweep.out_dir import OutDir
from sweep.space import ResourcesConfig, load_sweep
from tests.conftest import CONFIGS
from trainables import config
from trainables.errors import ConfigError


@pytest.fixture
def cluster(monkeypatch):
    """Fake ray.nodes(): set the nodes' resources per test."""
    nodes = []
    monkeypatch.setattr(tuner.ray, "nodes", lambda: nodes)
    return nodes


def test_fractional_gpus_fit_on_a_gpu_node(cluster):
    cluster += [{"Alive": True, "Resources": {"CPU": 2.0}}, {"Alive": True, "Resources": {"CPU": 16.0, "GPU": 1.0}}]
    tuner.check_resources(ResourcesConfig(cpu=1, gpu=0.25))


def test_gpus_asked_where_there_are_none(cluster):
    cluster += [{"Alive": True, "Resources": {"CPU": 2.0}}, {"Alive": False, "Resources": {"CPU": 8.0, "GPU": 4.0}}]
    with pytest.raises(ConfigError) as info:
        tuner.check_resources(ResourcesConfig(cpu=1, gpu=0.5))
    assert info.value.key == "sweep.resources.gpu" and "0 GPU" in info.value.reason


def test_more_cpus_than_any_node_has(cluster):
    cluster += [{"Alive": True, "Resources": {"CPU": 2.0}}]
    with pytest.raises(ConfigError) as info:
        tuner.check_resources(ResourcesConfig(cpu=4, gpu=0))
    assert info.value.key == "sweep.resources.cpu"


def test_a_dashboard_url_is_not_a_cluster_address():
    with pytest.raises(ConfigError) as info:
        tuner.connect("http://127.0.0.1:8265")
    assert info.value.key == "--address"


def test_a_local_ray_without_token_authentication_is_refused(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with pytest.raises(ConfigError) as info:
        tuner.connect(None)
    assert info.value.key == "RAY_AUTH_MODE" and "token" in info.value.reason


@pytest.mark.parametrize("gpu, refused", [(0, True), (0.5, False)])
def test_cuda_trials_that_ask_for_no_gpu_are_refused_before_anything_runs(cluster, gpu, refused):
    """Ray hides the GPUs from a trial that asks for none: such a trial could only fail, on every try."""
    cluster += [{"Alive": True, "Resources": {"CPU": 2.0, "GPU": 1.0, "memory": 2.0 ** 34}}]
    base, sweep, points = load_sweep(CONFIGS / "debug_grid.yaml", ["sweep.axes=[{key: device, values: [cpu, cuda]}]"])
    members = tuner.members(points, OutDir(Path("/nonexistent")))
    if refused:
        with pytest.raises(ConfigError, match="cuda needs sweep.resources.gpu > 0") as info:
            tuner.plan(config.to_dict(base), members, 1, gpu)
        assert info.value.key == "device"
    else:
        assert len(tuner.plan(config.to_dict(base), members, 1, gpu)) == len(points)


def test_the_work_done_while_leaving_ray_returns_or_raises_in_the_caller_with_the_collector_back_on():
    """disconnect_while runs the results and the report in a thread while Ray is left: what that work returns or raises
    comes back to the caller, and the garbage collector it paused runs again after."""
    import gc

    assert tuner.disconnect_while(lambda: "table") == "table"
    with pytest.raises(KeyError, match="report"):
        tuner.disconnect_while(lambda: {}["report"])
    assert gc.isenabled()


def test_a_candidates_seeds_share_a_trial_so_that_they_can_stop_each_other(cluster):
    """Chunks of `pack` members never split one verdict group (a candidate's seeds, consecutive) unless it alone is
    larger than `pack`; members without a group chunk as before."""
    cluster += [{"Alive": True, "Resources": {"CPU": 2.0, "memory": 2.0 ** 34}}]
    base, sweep, points = load_sweep(CONFIGS / "debug_grid.yaml", ["sweep.seeds=[0,1]"])  # 4 cells x 2 seeds
    grouped = lambda point: {"group": f"{point['task.lengths.low']},{point['task.lengths.high']}"}
    sizes = lambda members, pack: [len(c) for c in tuner.plan(config.to_dict(base), members, pack, 0).values()]
    with_groups = tuner.members(points, OutDir(Path("/nonexistent")), verdict=grouped)
    assert sizes(with_groups, 3) == [2, 2, 2, 2]  # 3 would split a candidate: 2 a trial
    assert sizes(with_groups, 4) == [4, 4] and sizes(with_groups, 1) == [1] * 8
    for chunk in tuner.plan(config.to_dict(base), with_groups, 3, 0).values():
        assert len({m["verdict"]["group"] for m in chunk}) == 1
    assert sizes(tuner.members(points, OutDir(Path("/nonexistent"))), 3) == [3, 3, 2]


def test_auto_packing_rounds_up_to_whole_candidates(monkeypatch):
    monkeypatch.setattr(tuner.ray, "cluster_resources", lambda: {"CPU": 2.0})
    sweep_section = load_sweep(CONFIGS / "debug_grid.yaml", [])[1]
    assert sweep_section.pack == 0
    assert tuner.members_per_trial(sweep_section, 4) == 1  # 4 members over 2 slots x 4 trials: 1 a trial
    assert tuner.members_per_trial(sweep_section, 4, group_size=3) == 3
    assert tuner.members_per_trial(sweep_section, 40, group_size=2) == 6  # 5, rounded up to whole pairs
