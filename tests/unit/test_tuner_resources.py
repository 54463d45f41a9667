"""check_resources: a trial that no node could ever run is refused before anything starts (it would pend forever)."""
import pytest

from sweep import tuner
from sweep.space import ResourcesConfig
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
