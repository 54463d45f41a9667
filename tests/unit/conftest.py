"""The unit tests' fake Ray Tune executor (real Optuna storage, no Ray): tuner.run_rounds replaced by a loop over the
search's rounds that writes each point's result.json at once, with the config's real data/* measures and an ood/acc
given by a rule. The real Ray path is tested in tests/integration/."""
import pytest

from sweep import space, tuner
from trainables import config
from trainables.io import write_json
from trainables.tasks import task_of

R_NEEDED = 0.3  # fake_r_tune's model generalizes when the max-sum ratio is at most this, whatever l_min (Theorem 5)
WIDTH_NEEDED = 5  # fake_width_tune's model generalizes from width 5 on


def fake_executor(monkeypatch, accuracy, metric: str = "ood/acc") -> list[list[dict]]:
    """Install the fake; accuracy(point, data metrics) -> the value of `metric` (the task's success metric). Returns
    the list of every call's points."""
    calls = []

    def run_rounds(base, search, rounds, out, summary=None, job_type="search", **packing):  # verdict, group_size
        for points in rounds:  # the generator tells each round's results when it is resumed for the next
            calls.append(points)
            for point in points:
                cfg = config.with_point(config.to_dict(base), point)
                metrics = task_of(cfg).diversity(cfg.task)
                write_json(space.member_dir(out.local, point) / "result.json",
                           metrics | {metric: accuracy(point, metrics), "status": "completed"})

    monkeypatch.setattr(tuner, "run_rounds", run_rounds)
    return calls


@pytest.fixture
def fake_r_tune(monkeypatch):
    """ood/acc 1.0 when R <= R_NEEDED, else 0.5."""
    return fake_executor(monkeypatch, lambda point, m: 1.0 if m["data/max_sum_ratio"] <= R_NEEDED else 0.5)


@pytest.fixture
def fake_width_tune(monkeypatch):
    """ood/acc 1.0 from width WIDTH_NEEDED on, else 0.2."""
    return fake_executor(monkeypatch, lambda point, m: 1.0 if point["task.lengths.width"] >= WIDTH_NEEDED else 0.2)
