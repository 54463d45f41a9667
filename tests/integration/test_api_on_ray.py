"""`import headsweep as hs` on real Ray (issue [api]): hs.train, hs.grid, hs.search and hs.load in this process, its
driver joined to the session's shared Ray head; a directory the CLI wrote reads as the one Python wrote; and a task
defined in this module, registered with hs.register, trained by Ray's workers, which cannot import it by name: it
reaches them by value (sweep/shipping.py). The contracts in process: tests/unit/test_api.py."""
import json
import os
from dataclasses import dataclass

import optuna
import pytest
from matplotlib.figure import Figure

import headsweep as hs
from tests.conftest import CONFIGS, assert_same_metrics
from tests.integration.conftest import SHARED_RAY_VAR, headsweep
from tests.plugins.repeat import Repeat, RepeatConfig
from trainables.models import MODELS
from trainables.tasks import TASKS

TINY_GRID = [CONFIGS / "debug_grid.yaml", "sweep.seeds=[0]"]


@pytest.fixture(autouse=True)
def on_the_shared_ray(monkeypatch):
    """This process's driver joins the session's Ray head, as the CLI's runs do (through RAY_ADDRESS and its token)."""
    for key, value in json.loads(os.environ[SHARED_RAY_VAR]).items():
        monkeypatch.setenv(key, value)


def without_seconds(row: dict) -> dict:
    return {k: v for k, v in row.items() if k != "seconds"}


def test_train_then_load(tmp_path):
    run = hs.train(hs.config(CONFIGS / "debug.yaml", "optim.max_steps=60", "eval.every=30"), out=tmp_path / "run")
    assert run.metrics["status"] == "completed" and run.history["step"].tolist() == [30, 60] and run.arrays
    assert hs.load(tmp_path / "run").metrics == run.metrics


def test_a_grid_from_python_reads_as_the_same_grid_from_the_cli(tmp_path):
    found = hs.grid(hs.config(*TINY_GRID), out=tmp_path / "py")
    assert isinstance(found, hs.GridResult) and found.failed.empty and len(found.df) == 4
    assert set(found.df["status"]) <= {"completed", "early_stopped", "succeeded"}
    assert isinstance(found.phase_diagram(), Figure) and (tmp_path / "py" / "report.html").exists()
    assert len(found.history(found.df.iloc[0])) >= 1

    proc = headsweep("grid", *TINY_GRID, "--out", tmp_path / "cli")
    assert proc.returncode == 0, proc.stderr[-3000:]
    by_cli = hs.load(tmp_path / "cli")
    assert (tmp_path / "cli" / "config.yaml").read_text() == (tmp_path / "py" / "config.yaml").read_text()
    assert by_cli.df["member"].tolist() == found.df["member"].tolist()
    for got, expected in zip(by_cli.df.to_dict("records"), found.df.to_dict("records")):
        assert_same_metrics(without_seconds(got), without_seconds(expected), rel=1e-4)
    # The table the CLI printed is the one repr shows (the progress lines above it, the paths after it)
    table = repr(by_cli).splitlines()[1:-1]
    printed = proc.stdout.splitlines()
    assert printed[-len(table) - 1:-1] == table

    again = hs.grid(hs.config(*TINY_GRID), out=tmp_path / "cli")  # the CLI's directory resumes from Python: finished
    assert again.df["seconds"].tolist() == by_cli.df["seconds"].tolist()


def test_a_search_from_python_returns_its_answer_trials_curve_and_studies(tmp_path):
    found = hs.search(hs.config(CONFIGS / "debug_search.yaml", "search.budget.trainings=6"), out=tmp_path / "search")
    assert isinstance(found, hs.SearchResult) and found.table["task.lengths.low"].tolist() == [2, 4]
    assert len(found.members) == found.table["seeds"].sum() == found.curve["trained"].sum() > 0
    assert all(isinstance(study, optuna.Study) and study.trials for study in found.studies.values())
    assert isinstance(found.success_curves(), Figure) and "K*_q [interval]" in repr(found)
    loaded = hs.load(tmp_path / "search")
    assert loaded.table.equals(found.table) and loaded.members.equals(found.members)


@dataclass
class EchoConfig(RepeatConfig):
    name: str = "echo_api"


class Echo(Repeat):
    """Repeat under a name no entry point or module path provides: it exists only where this module registers it."""

    name = "echo_api"
    config = EchoConfig


@pytest.fixture
def registered_echo():
    saved = [(r, dict(r._registered), dict(r._loaded)) for r in (TASKS, MODELS)]
    yield hs.register(Echo())
    for registry, registered, loaded in saved:
        registry._registered, registry._loaded = registered, loaded


def test_a_task_registered_here_is_swept_by_ray_workers_packed_and_resumed(tmp_path, registered_echo):
    cfg = hs.config({
        "name": "echo_grid",
        "task": {"name": "echo_api", "length": 4},
        "model": {"name": "transformer", "n_layers": 1, "n_heads": 1, "d_model": 16, "embedding": "learned",
                  "positional": "learned_abs"},
        "optim": {"max_steps": 30, "batch_size": 16}, "eval": {"every": 15, "n_id": 32, "n_ood": 32},
        "logging": {"wandb": False},
        "sweep": {"axes": [{"key": "task.n_train_strings", "values": [4, 64]}], "seeds": [0, 1], "pack": 2}})
    found = hs.grid(cfg, out=tmp_path / "echo")
    assert found.failed.empty, found.failed[["member", "status", "error"]].to_string()
    assert sorted(found.df["task.n_train_strings"].tolist()) == [4, 4, 64, 64]
    assert found.df["data/n_train_strings"].notna().all() and (tmp_path / "echo" / "report.html").exists()
    again = hs.grid(cfg, out=tmp_path / "echo")
    assert again.df["seconds"].tolist() == found.df["seconds"].tolist()  # nothing trained twice
