"""The worked example, examples/headsweep-zoology, installed as a user installs it (`make test` pip-installs it),
through the unchanged CLI: its task and model by their entry-point names (`mqar`, `base_conv`) and by module path,
through train, a packed grid with W&B offline, a search, the report and the W&B dashboard.
(tests/e2e/test_plugin_job.py ships it to a Ray head installed nowhere.)"""
import json
from pathlib import Path

import pandas as pd
import pytest

from tests.integration.conftest import JUDGED, headsweep

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "headsweep-zoology"
CONFIGS = EXAMPLE / "configs"
SHORT = ["optim.max_steps=20", "eval.every=10", "eval.n_id=64", "eval.n_ood=64"]


@pytest.fixture(scope="module", autouse=True)
def installed():
    listed = headsweep("list")
    if "package headsweep-zoology" not in listed.stdout:
        pytest.fail("the example is not installed: `make test` installs it (pip install ./examples/headsweep-zoology)")


@pytest.mark.parametrize("names", [["task.name=mqar", "model.name=base_conv"],
                                   ["task.name=headsweep_zoology.mqar:TASK",
                                    "model.name=headsweep_zoology.base_conv:SPEC"]], ids=["installed", "module_path"])
def test_the_examples_task_and_model_train(tmp_path, names):
    out = tmp_path / "train"
    proc = headsweep("train", CONFIGS / "debug_base_conv.yaml", *names, *SHORT, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["status"] == "completed" and 0 <= result["ood/acc"] <= 1 and "data/n_train_keys" in result
    assert not [k for k in result if k.startswith("mech/") or k.startswith("attn/")]  # the model has no attention
    assert (out / "report.html").stat().st_size > 0


def test_one_packed_grid_compares_both_models_logs_to_wandb_and_builds_the_dashboard(tmp_path):
    """An axis over model.name: the file's transformer keys that base_conv lacks are dropped for its points; members
    of one model pack together (sweep.pack=3), each with its own W&B run."""
    out = tmp_path / "grid"
    proc = headsweep("grid", CONFIGS / "debug_mqar_grid.yaml", "logging.wandb=true", *SHORT, "sweep.seeds=[0]",
                     "sweep.axes=[{key: task.n_train_keys, values: [4, 8, 12]}, "
                     "{key: model.name, values: [transformer, base_conv]}]", "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = pd.read_csv(out / "results.csv")
    assert len(frame) == 6 and set(frame["status"]) == {"completed"}
    assert sorted(frame["model.name"]) == ["base_conv"] * 3 + ["transformer"] * 3
    assert sorted(set(frame["data/n_train_keys"])) == [4, 8, 12]
    assert all(list((trial / "wandb").glob("offline-run-*")) for trial in (out / "trials").iterdir())
    assert "attention/pattern_L0H0" in (out / "report.html").read_text()  # the transformer's patterns, by default

    dash = headsweep("dashboard", "--entity", "me", "--project", "zoo", "--task", "mqar", "--out", tmp_path / "dash")
    assert dash.returncode == 0, dash.stderr
    assert "data/n_train_keys" in (tmp_path / "dash" / "report.json").read_text()


def test_a_search_over_the_examples_knob(tmp_path):
    out = tmp_path / "search"
    proc = headsweep("search", CONFIGS / "debug_mqar_search.yaml", *SHORT, "search.budget.per_slice=2", "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = pd.read_csv(out / "trials.csv")
    assert len(trials) >= 1 and set(trials["status"]) <= JUDGED
    assert trials["task.n_train_keys"].between(4, 12).all()
    assert len(pd.read_csv(out / "min_diversity.csv")) == 1 and (out / "study.journal").exists()

