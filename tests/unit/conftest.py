"""A fake Ray Tune executor for the search loop's unit tests (real Optuna storage, no Ray)."""
import json

import pytest

from sweep import tuner
from sweep.space import point_id
from trainables import config
from trainables.tasks.lengths import distribution, diversity_metrics

R_NEEDED = 0.3  # the fake model generalizes when the max-sum ratio is at most this, whatever l_min is (Theorem 5)


@pytest.fixture
def fake_r_tune(monkeypatch):
    """tuner.run that writes each point's result.json at once: its real data/* metrics, and ood/acc 1.0 when
    R <= R_NEEDED, else 0.5. Records the points of every call."""
    calls = []

    def run(base, search, points, out, experiment, restore, job_type):
        calls.append(points)
        for point in points:
            task = config.with_point(config.to_dict(base), point).task
            metrics = diversity_metrics(distribution(task.lengths, task.n_triggers))
            acc = 1.0 if metrics["data/max_sum_ratio"] <= R_NEEDED else 0.5
            trial = out / "trials" / point_id(point)
            trial.mkdir(parents=True, exist_ok=True)
            (trial / "result.json").write_text(json.dumps(metrics | {"ood/acc": acc, "status": "completed"}))

    monkeypatch.setattr(tuner, "run", run)
    return calls
