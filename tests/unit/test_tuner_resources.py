"""The cluster (sweep/cluster.py): a trial that no node could ever run (it would pend forever) is refused before
anything starts; an address that is no cluster's, a local Ray without token auth; leaving Ray while work goes on, and
when a local Ray is kept for the next run (the Python API)."""

from types import SimpleNamespace

import pytest

from sweep import cluster as ray_cluster
from sweep.space import ResourcesConfig
from trainables.errors import ConfigError


@pytest.fixture
def cluster(monkeypatch):
    """Fake ray.nodes(): set the nodes' resources per test."""
    nodes = []
    monkeypatch.setattr(ray_cluster.ray, "nodes", lambda: nodes)
    return nodes


def test_fractional_gpus_fit_on_a_gpu_node(cluster):
    cluster += [{"Alive": True, "Resources": {"CPU": 2.0}}, {"Alive": True, "Resources": {"CPU": 16.0, "GPU": 1.0}}]
    ray_cluster.check_resources(ResourcesConfig(cpu=1, gpu=0.25))


def test_gpus_asked_where_there_are_none(cluster):
    cluster += [{"Alive": True, "Resources": {"CPU": 2.0}}, {"Alive": False, "Resources": {"CPU": 8.0, "GPU": 4.0}}]
    with pytest.raises(ConfigError) as info:
        ray_cluster.check_resources(ResourcesConfig(cpu=1, gpu=0.5))
    assert info.value.key == "sweep.resources.gpu" and "0 GPU" in info.value.reason


def test_a_search_names_its_own_section(cluster):
    cluster += [{"Alive": True, "Resources": {"CPU": 2.0}}]
    with pytest.raises(ConfigError) as info:
        ray_cluster.check_resources(ResourcesConfig(cpu=1, gpu=0.25), "search")
    assert info.value.key == "search.resources.gpu"


def test_gpus_on_a_machine_without_any_are_refused_before_a_local_ray_starts(monkeypatch):
    """Without an address the trials would run here: torch's word is enough, before Ray's seconds of start-up; with
    one (or RAY_ADDRESS) the cluster is asked once joined (above)."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    with pytest.raises(ConfigError) as info:
        ray_cluster.refuse_gpus_a_local_ray_lacks(ResourcesConfig(cpu=1, gpu=0.25), None, "search")
    assert info.value.key == "search.resources.gpu" and "has none" in info.value.reason
    ray_cluster.refuse_gpus_a_local_ray_lacks(ResourcesConfig(cpu=1, gpu=0.25), "10.0.0.1:6379", "search")
    ray_cluster.refuse_gpus_a_local_ray_lacks(ResourcesConfig(cpu=1, gpu=0), None, "search")
    monkeypatch.setattr("torch.cuda.is_available", lambda: True)
    ray_cluster.refuse_gpus_a_local_ray_lacks(ResourcesConfig(cpu=1, gpu=0.25), None, "search")


def test_more_cpus_than_any_node_has(cluster):
    cluster += [{"Alive": True, "Resources": {"CPU": 2.0}}]
    with pytest.raises(ConfigError) as info:
        ray_cluster.check_resources(ResourcesConfig(cpu=4, gpu=0))
    assert info.value.key == "sweep.resources.cpu"


def test_a_dashboard_url_is_not_a_cluster_address():
    with pytest.raises(ConfigError) as info:
        ray_cluster.connect("http://127.0.0.1:8265")
    assert info.value.key == "--address"


def test_a_local_ray_without_token_authentication_is_refused(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    with pytest.raises(ConfigError) as info:
        ray_cluster.connect(None)
    assert info.value.key == "RAY_AUTH_MODE" and "token" in info.value.reason


def test_the_work_done_while_leaving_ray_returns_or_raises_in_the_caller_with_the_collector_back_on():
    """disconnect_while runs the results and the report in a thread while Ray is left: what that work returns or raises
    comes back to the caller, and the garbage collector it paused runs again after."""
    import gc

    assert ray_cluster.disconnect_while(lambda: "table") == "table"
    with pytest.raises(KeyError, match="report"):
        ray_cluster.disconnect_while(lambda: {}["report"])
    assert gc.isenabled()


class FakeRay:
    """Records what sweep.cluster asks of Ray: ("local",), ("join", address), ("shutdown",)."""

    def __init__(self):
        self.calls, self.up = [], False

    def is_initialized(self):
        return self.up

    def init(self, address=None, **_):
        self.calls.append(("join", address) if address else ("local",))
        self.up = True

    def shutdown(self):
        self.calls.append(("shutdown",))
        self.up = False

    def get_runtime_context(self):
        return SimpleNamespace(get_node_id=lambda: "the local node")


@pytest.fixture
def fake_ray(monkeypatch):
    ray = FakeRay()
    monkeypatch.setattr(ray_cluster, "ray", ray)
    monkeypatch.setattr(ray_cluster.stopping, "on_sigterm", lambda: None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr(ray_cluster, "_keep_local", False)
    monkeypatch.setattr(ray_cluster, "_kept", False)
    monkeypatch.setattr(ray_cluster, "_own_node", None)
    return ray


def test_a_command_leaves_its_local_ray_after_every_run(fake_ray):
    for _ in range(2):
        ray_cluster.connect(None)
        assert ray_cluster.finish(lambda: "tables") == "tables"
    assert fake_ray.calls == [("local",), ("shutdown",)] * 2


def test_the_python_api_keeps_its_local_ray_for_the_next_run_but_not_after_a_stop_or_for_a_cluster(fake_ray):
    ray_cluster.keep_local_between_runs()
    ray_cluster.connect(None)
    ray_cluster.finish(lambda: None)
    ray_cluster.connect(None)  # the next cell: the same Ray
    ray_cluster.finish(lambda: None)
    assert fake_ray.calls == [("local",)] and fake_ray.up
    assert ray_cluster.own_node() == "the local node"  # the storage check asks nothing of it
    ray_cluster.connect("10.0.0.1:6379")  # a run for a cluster leaves the kept local Ray first
    assert ray_cluster.own_node() is None  # every node of a cluster is asked
    ray_cluster.finish(lambda: None)  # and leaves the cluster when it ends
    ray_cluster.connect(None)
    ray_cluster.leave()  # a stopped run: Ray goes, kept or not
    ray_cluster.connect(None)
    assert fake_ray.calls == [("local",), ("shutdown",), ("join", "10.0.0.1:6379"), ("shutdown",), ("local",),
                              ("shutdown",), ("local",)]


def test_a_ray_the_users_code_joined_is_used_as_it_is(fake_ray):
    fake_ray.up = True  # ray.init() in the user's own code
    ray_cluster.keep_local_between_runs()
    ray_cluster.connect("10.0.0.1:6379")
    assert fake_ray.calls == []


def test_a_fit_copies_no_aws_credential_into_the_trials_and_leaves_tunes_own_set_as_it_was():
    """Inside sweep.tuner's fits Tune finds no AWS variable to copy into the trials' runtime environment (which Ray
    prints into its logs: tests/integration/test_security.py); after them, the process's other Tune runs get Tune's
    set back."""
    from ray.tune.execution import class_cache

    from sweep import tuner

    during = []

    class Tuner:
        def fit(self):
            during.append(set(class_cache.ENV_VARS_TO_PROPAGATE))
            return "results"

    before = set(class_cache.ENV_VARS_TO_PROPAGATE)
    assert tuner._fit(Tuner()) == "results"
    assert "AWS_SECRET_ACCESS_KEY" in before and during == [before - tuner.AWS_CREDENTIALS]
    assert class_cache.ENV_VARS_TO_PROPAGATE == before
