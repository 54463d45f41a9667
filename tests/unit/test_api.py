"""`import headsweep as hs` (issue [api]): each public name's contract, in process. hs.train trains for real (a few
dozen steps); hs.grid and hs.search run on the unit tier's fake executor (no Ray: tests/unit/conftest.py), through
the same functions the CLI calls, so a directory the CLI wrote and one Python wrote read the same. hs.register's
shipping to real Ray workers: tests/integration/test_api_on_ray.py."""
import os
import pickle
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna
import pandas as pd
import pytest
import torch
from matplotlib.figure import Figure

import headsweep as hs
import trainables.cache
import trainables.errors
import trainables.models
import trainables.streams
import trainables.tasks
from dashboards import search_wandb
from headsweep import api
import sweep.grid
import sweep.search
from sweep import cli, cluster, packing, preflight, shipping, tuner
from tests.conftest import CONFIGS
from tests.plugins.repeat import Repeat, RepeatConfig
from sweep.space import point_id
from trainables import config, plugins
from trainables.io import write_json
from trainables.models import MODELS
from trainables.tasks import TASKS, task_of

TINY_TRAIN = ["optim.max_steps=40", "eval.every=20"]


# --- the contract: names and types -----------------------------------------------------------------------------------

def test_all_names_the_verbs_their_results_and_the_plugin_api():
    assert set(hs.__all__) == {
        "config", "train", "grid", "search", "load", "register",
        "Experiment", "TrainResult", "GridResult", "SearchResult",
        "Task", "Batch", "PAD_LABEL", "GeneratorDraws", "TaskView", "Panel", "PanelSection", "view_of",
        "ModelSpec", "patterns", "pattern_at", "require", "ConfigError"}
    assert all(hasattr(hs, name) for name in hs.__all__)


def test_the_plugin_names_are_the_stable_ones_not_copies():
    """A plugin written against trainables.* (docs/EXTENDING.md) and one written against hs.* are the same plugin."""
    assert hs.Task is trainables.tasks.Task and hs.Batch is trainables.tasks.Batch
    assert hs.ModelSpec is trainables.models.ModelSpec and hs.GeneratorDraws is trainables.streams.GeneratorDraws
    assert hs.require is trainables.errors.require and hs.ConfigError is trainables.errors.ConfigError
    assert hs.patterns is trainables.cache.patterns and hs.PAD_LABEL == trainables.tasks.PAD_LABEL


def test_importing_headsweep_starts_no_ray_and_no_optuna():
    code = "import sys, headsweep; print('ray' in sys.modules, 'optuna' in sys.modules)"
    root = Path(hs.__file__).parents[1]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert done.stdout.split() == ["False", "False"], done.stderr[-2000:]


# --- hs.config --------------------------------------------------------------------------------------------------------

def test_config_from_a_path_with_overrides_is_the_typed_trial_config():
    cfg = hs.config(CONFIGS / "debug.yaml", "seed=3", "optim.max_steps=100")
    assert isinstance(cfg, hs.Experiment) and cfg.sweep is None and cfg.search is None
    assert (cfg.seed, cfg.optim.max_steps, cfg.model.n_layers) == (3, 100, 2)  # the trial config's fields, reached
    assert cfg.base.seed == 3 and "seed: 3" in repr(cfg)


def test_config_from_a_dict_equals_the_same_keys_from_a_file(tmp_path):
    import yaml

    keys = yaml.safe_load((CONFIGS / "debug_grid.yaml").read_text())
    from_dict, from_file = hs.config(keys, "sweep.seeds=[0]"), hs.config(CONFIGS / "debug_grid.yaml", "sweep.seeds=[0]")
    assert from_dict.to_yaml() == from_file.to_yaml() and from_dict.points == from_file.points
    keys["seed"] = 5  # the config keeps its own copy
    assert from_dict.seed == 0


def test_a_loaded_config_takes_more_overrides():
    cfg = hs.config(hs.config(CONFIGS / "debug.yaml", "seed=1"), "seed=2", "eval.every=10")
    assert (cfg.seed, cfg.eval.every) == (2, 10) and cfg.overrides == ("seed=1", "seed=2", "eval.every=10")


def test_the_sections_a_config_holds_are_loaded_as_their_verbs_load_them():
    grid = hs.config(CONFIGS / "debug_grid.yaml", "sweep.seeds=[0]")
    assert [a.key for a in grid.sweep.axes] == ["task.lengths.low", "task.lengths.high"] and len(grid.points) == 4
    search = hs.config(CONFIGS / "debug_search.yaml", "search.budget.trainings=6")
    assert search.search.budget.trainings == 6 and search.search.success.direction == ">="  # resolved as the CLI does


@pytest.mark.parametrize("verb, config_file, overrides", [
    ("train", "debug.yaml", ["optim.nope=1"]),
    ("train", "debug.yaml", ["model.n_layers=0"]),
    ("train", "debug.yaml", ["task.name=nope"]),
    ("grid", "debug_grid.yaml", ["seed=3"]),
    ("grid", "debug_grid.yaml", ["sweep.axes.1.key=task.nope"]),
    ("grid", "debug.yaml", []),  # no sweep section
    ("search", "debug_search.yaml", ["search.success.rate=2"]),
    ("search", "debug.yaml", []),  # no search section
])
def test_bad_input_raises_the_line_the_cli_prints_and_writes_nothing(tmp_path, capsys, monkeypatch, verb,
                                                                     config_file, overrides):
    monkeypatch.setattr(cluster, "connect", lambda address: pytest.fail("got as far as starting Ray"))
    assert cli.main([verb, str(CONFIGS / config_file), *overrides, "--out", str(tmp_path / "cli")]) == 2
    line = capsys.readouterr().err.removeprefix("headsweep: error: ").rstrip("\n")
    with pytest.raises(hs.ConfigError) as raised:
        getattr(hs, verb)(hs.config(CONFIGS / config_file, *overrides) if verb == "train" or overrides else
                          CONFIGS / config_file, out=tmp_path / "py")
    assert str(raised.value) == line
    assert not (tmp_path / "cli").exists() and not (tmp_path / "py").exists()


def test_config_refuses_what_is_no_config():
    with pytest.raises(hs.ConfigError, match="CONFIG: must be a YAML file's path, a dict"):
        hs.config(42)
    with pytest.raises(hs.ConfigError, match="an override must be a string"):
        hs.config(CONFIGS / "debug.yaml", ("seed", 1))
    with pytest.raises(hs.ConfigError, match="CONFIG: no such file"):
        hs.config("configs/nope.yaml")


# --- hs.train ---------------------------------------------------------------------------------------------------------

def test_train_returns_metrics_history_arrays_and_its_directory(tmp_path):
    run = hs.train(hs.config(CONFIGS / "debug.yaml", *TINY_TRAIN), out=tmp_path / "run")
    assert isinstance(run, hs.TrainResult) and run.out == tmp_path / "run"
    assert run.metrics["status"] == "completed" and run.metrics["steps"] == 40
    assert isinstance(run.metrics["ood/acc"], float)
    assert isinstance(run.history, pd.DataFrame) and run.history["step"].tolist() == [20, 40]
    assert {"train/loss", "ood/acc"} <= set(run.history.columns)
    assert run.arrays and all(isinstance(a, np.ndarray) for a in run.arrays.values())
    assert "ood/acc" in repr(run) and "completed" in repr(run) and "<table" in run._repr_html_()
    again = hs.load(run.out)
    assert again.metrics == run.metrics and again.history.equals(run.history) and run.config["seed"] == 0


def test_train_into_no_out_uses_a_fresh_directory_and_the_cli_dir_reads_the_same(tmp_path, capsys):
    run = hs.train(hs.config(CONFIGS / "debug.yaml", *TINY_TRAIN))
    assert run.out.is_dir() and (run.out / "report.html").exists()
    assert cli.main(["train", str(CONFIGS / "debug.yaml"), *TINY_TRAIN, "--out", str(tmp_path / "cli")]) == 0
    by_cli = hs.load(tmp_path / "cli")
    assert (by_cli.out / "config.yaml").read_text() == (run.out / "config.yaml").read_text()
    seconds = lambda m: {k: v for k, v in m.items() if k != "seconds"}
    assert seconds(by_cli.metrics) == seconds(run.metrics)
    # the same out again: finished, nothing trained (the CLI says so in its line)
    assert hs.train(hs.config(CONFIGS / "debug.yaml", *TINY_TRAIN), out=tmp_path / "cli").metrics == by_cli.metrics
    capsys.readouterr()
    assert cli.main(["train", str(CONFIGS / "debug.yaml"), *TINY_TRAIN, "--out", str(run.out)]) == 0
    assert capsys.readouterr().out.startswith("already finished: ood/acc=")


# --- hs.grid (fake executor) -----------------------------------------------------------------------------------------

@pytest.fixture
def no_ray(monkeypatch):
    """The verbs with their Ray calls left out (the fakes below train)."""
    monkeypatch.setattr(cluster, "connect", lambda address: None)
    monkeypatch.setattr(cluster, "check_resources", lambda resources, section="sweep": None)
    monkeypatch.setattr(cluster, "disconnect_while", lambda work: work())
    monkeypatch.setattr(preflight, "check_storage", lambda out: None)
    monkeypatch.setattr(search_wandb, "log_search", lambda out: None)


@pytest.fixture
def stop_order(monkeypatch):
    """What a stopped verb does, in order: leaving Ray ("left"), then counting what finished ("counted"). A trial that
    finished between the two was on disk but missing from the table the driver printed."""
    events = []
    monkeypatch.setattr(cluster, "leave", lambda: events.append("left"))
    for module, name in ((sweep.grid, "write_results"), (sweep.search, "_write_tables_and_report")):
        monkeypatch.setattr(module, name, lambda *a, count=getattr(module, name): events.append("counted") or count(*a))
    return events


@pytest.fixture
def fake_grid(monkeypatch, no_ray):
    """tuner's grid: one pack of every member; each member gets a metrics.jsonl and a result.json, its ood/acc 1.0
    from l_min 5 on, and (failing) a member of seed 1 at l_min 2, l_max 8 fails with an error."""
    calls = []

    def grid_plan(base, sweep, points, out, job_type="grid", verdict=None):
        return {"pack": packing.members(points, out, job_type)}

    def run(base, sweep, packs, out, summary=None):
        calls.append(packs)
        errors = {}
        for member in packs["pack"]:
            point, where = member["point"], Path(member["dir"])
            if point == {"task.lengths.low": 2, "task.lengths.high": 8, "seed": 1}:
                errors[point_id(point)] = "RuntimeError: boom"
                continue
            cfg = config.with_point(config.to_dict(base), point)
            metrics = task_of(cfg).diversity(cfg.task) | {"ood/acc": 1.0 if point["task.lengths.low"] >= 5 else 0.1,
                                                          "id/acc": 1.0}
            where.mkdir(parents=True, exist_ok=True)
            (where / "metrics.jsonl").write_text("".join(f'{{"step": {s}, "ood/acc": {metrics["ood/acc"]}}}\n'
                                                         for s in (0, 10)))
            write_json(where / "result.json", metrics | {"status": "completed", "steps": 10, "seconds": 0.5})
        return errors

    monkeypatch.setattr(tuner, "grid_plan", grid_plan)
    monkeypatch.setattr(tuner, "run", run)
    return calls


def test_grid_returns_one_row_per_member_with_its_point_status_and_metrics(tmp_path, fake_grid):
    found = hs.grid(hs.config(CONFIGS / "debug_grid.yaml"), out=tmp_path / "grid")
    assert isinstance(found, hs.GridResult) and found.out == tmp_path / "grid"
    keys = ["task.lengths.low", "task.lengths.high", "seed"]
    assert list(found.df.columns[:5]) == keys + ["member", "status"] and len(found.df) == 8
    assert {"ood/acc", "data/max_sum_ratio", "seconds", "error"} <= set(found.df.columns)
    assert found.failed[keys].to_dict("records") == [{"task.lengths.low": 2, "task.lengths.high": 8, "seed": 1}]
    assert found.failed["status"].tolist() == ["error"] and found.failed["error"].tolist() == ["RuntimeError: boom"]
    assert found.history(found.df.iloc[0])["step"].tolist() == [0, 10]
    assert found.history(found.df.iloc[0]["member"]).equals(found.history(found.df.iloc[0]))
    with pytest.raises(KeyError, match="no member"):
        found.history("nope")
    assert isinstance(found.phase_diagram(), Figure)
    assert "low  high  seed" in repr(found) and repr(found).endswith("8 members: 7 completed, 1 error")
    assert hs.load(tmp_path / "grid").df.equals(found.df)


def test_the_cli_grid_prints_what_it_printed_and_its_dir_reads_as_pythons(tmp_path, fake_grid, capsys):
    found = hs.grid(hs.config(CONFIGS / "debug_grid.yaml"), out=tmp_path / "py")
    assert cli.main(["grid", str(CONFIGS / "debug_grid.yaml"), "--out", str(tmp_path / "cli")]) == 1  # a failure
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split() == ["low", "high", "seed", "ood/acc", "id/acc", "data/max_sum_ratio", "status"]
    assert printed[-1] == (f"8 members: 7 completed, 1 error  [{tmp_path / 'cli'}/results.csv, "
                           f"{tmp_path / 'cli'}/report.html]")
    by_cli = hs.load(tmp_path / "cli")
    assert by_cli.df.drop(columns="seconds").equals(found.df.drop(columns="seconds"))
    assert (tmp_path / "cli" / "config.yaml").read_text() == (tmp_path / "py" / "config.yaml").read_text()


def test_from_python_tune_logs_no_traceback_for_a_failed_member_and_a_users_setting_is_kept(tmp_path, fake_grid,
                                                                                          monkeypatch):
    """A failed member is a row of .failed with its error; Tune's traceback of each try would be a wall in a cell."""
    seen, fake_run = [], tuner.run

    def run(*args, **kwargs):
        seen.append(os.environ.get(api.TRIAL_ERRORS_VAR))  # what Tune reads as its run starts
        return fake_run(*args, **kwargs)

    monkeypatch.setattr(tuner, "run", run)
    monkeypatch.delenv(api.TRIAL_ERRORS_VAR, raising=False)
    found = hs.grid(hs.config(CONFIGS / "debug_grid.yaml"), out=tmp_path / "grid")
    assert seen == ["0"] and api.TRIAL_ERRORS_VAR not in os.environ  # put back after the call
    assert found.failed["error"].tolist() == ["RuntimeError: boom"]
    monkeypatch.setenv(api.TRIAL_ERRORS_VAR, "1")
    hs.grid(hs.config(CONFIGS / "debug_grid.yaml"), out=tmp_path / "again")
    assert seen == ["0", "1"]


def test_an_interrupted_grid_writes_what_finished_raises_and_resumes_when_called_again(tmp_path, fake_grid, stop_order,
                                                                                        monkeypatch, capsys):
    fake_run = tuner.run

    def interrupted(base, sweep, packs, out, summary=None):
        fake_run(base, sweep, {"pack": packs["pack"][:3]}, out)
        raise KeyboardInterrupt

    monkeypatch.setattr(tuner, "run", interrupted)
    cfg = hs.config(CONFIGS / "debug_grid.yaml")
    with pytest.raises(KeyboardInterrupt):
        hs.grid(cfg, out=tmp_path / "grid")
    assert stop_order == ["left", "counted"]
    assert hs.load(tmp_path / "grid").df["status"].value_counts().to_dict() == {"unfinished": 5, "completed": 3}
    shown = capsys.readouterr().out  # the table so far, as a notebook cell shows it before the interrupt
    assert "stopped: the table so far" in shown and "8 members: 5 unfinished, 3 completed" in shown
    monkeypatch.setattr(tuner, "run", fake_run)
    assert len(hs.grid(cfg, out=tmp_path / "grid").df.query("status == 'completed'")) == 7


# --- hs.search (fake executor) ---------------------------------------------------------------------------------------

SMALL_SEARCH = ["search.budget.trainings=6"]


def test_search_returns_its_table_members_curve_and_studies(tmp_path, no_ray, fake_width_tune):
    found = hs.search(hs.config(CONFIGS / "debug_search.yaml", *SMALL_SEARCH), out=tmp_path / "search")
    assert isinstance(found, hs.SearchResult) and found.out == tmp_path / "search"
    assert found.table["task.lengths.low"].tolist() == [2, 4]
    assert {"study", "diversity_star", "diversity_star_low", "diversity_star_high", "seeds"} <= set(found.table.columns)
    assert len(found.members) == found.table["seeds"].sum() == sum(map(len, fake_width_tune))  # one row per training
    assert {"study", "member", "seed", "task.lengths.width", "ood/acc", "status", "optuna_trial"} <= set(found.members)
    assert {"study", "task.lengths.width", "trained", "passed", "p", "p_low", "p_high"} <= set(found.curve.columns)
    assert list(found.studies) == found.table["study"].tolist()
    assert all(isinstance(s, optuna.Study) for s in found.studies.values())
    with pytest.raises(KeyError):  # the fake executor writes no curves
        found.history(found.members.iloc[0])
    assert isinstance(found.success_curves(), Figure)
    assert "K*_q [interval]" in repr(found) and "seeds" in repr(found)
    loaded = hs.load(tmp_path / "search")
    assert loaded.table.equals(found.table) and loaded.members.equals(found.members) and \
        loaded.curve.equals(found.curve)
    with pytest.warns(DeprecationWarning, match="SearchResult.members"):  # its name before: a public name moved
        assert found.trials is found.members


def test_the_cli_search_dir_reads_as_pythons(tmp_path, no_ray, fake_width_tune, capsys):
    found = hs.search(hs.config(CONFIGS / "debug_search.yaml", *SMALL_SEARCH), out=tmp_path / "py")
    assert cli.main(["search", str(CONFIGS / "debug_search.yaml"), *SMALL_SEARCH, "--out", str(tmp_path / "cli")]) == 0
    printed = capsys.readouterr().out
    assert "K*_q: the smallest task.lengths.width at which a seed passes (ood/acc >= 0.9)" in printed
    assert printed.rstrip().endswith(f"[{tmp_path / 'cli'}/min_diversity.csv, {tmp_path / 'cli'}/report.html]")
    by_cli = hs.load(tmp_path / "cli")
    assert by_cli.table.equals(found.table) and by_cli.curve.equals(found.curve)
    assert by_cli.members.drop(columns="member").equals(found.members.drop(columns="member"))


def test_an_interrupted_search_writes_its_tables_raises_and_resumes_when_called_again(tmp_path, no_ray, monkeypatch,
                                                                                      fake_width_tune, stop_order,
                                                                                      capsys):
    fake_run_rounds = tuner.run_rounds

    def interrupted(base, search, rounds, out, summary=None, job_type="search", **packing):
        def first_round_only(rounds):
            yield next(rounds)
            raise KeyboardInterrupt
        fake_run_rounds(base, search, first_round_only(rounds), out)

    monkeypatch.setattr(tuner, "run_rounds", interrupted)
    cfg = hs.config(CONFIGS / "debug_search.yaml", *SMALL_SEARCH)
    with pytest.raises(KeyboardInterrupt):
        hs.search(cfg, out=tmp_path / "search")
    assert stop_order == ["left", "counted"]
    first = hs.load(tmp_path / "search")
    assert 0 < len(first.members) < 12 and (tmp_path / "search" / "report.html").exists()
    shown = capsys.readouterr().out
    assert "stopped: the table so far" in shown and "K*_q [interval]" in shown and "no (open)" in shown
    monkeypatch.setattr(tuner, "run_rounds", fake_run_rounds)
    resumed = hs.search(cfg, out=tmp_path / "search")
    assert len(resumed.members) == resumed.table["seeds"].sum() > len(first.members)
    assert set(first.members["member"]) <= set(resumed.members["member"])  # kept, not trained again


def test_a_task_one_step_cannot_read_names_the_models_that_can(registries):
    """The hs.register example of docs/API.md names a task only: the default model, one_step, reads one query per
    sequence; the refusal names the models that read every position."""
    @dataclass
    class EveryConfig:
        name: str = "every_position_api_test"

    class Every(hs.Task):
        name, config = "every_position_api_test", EveryConfig

        def validate(self, cfg):
            pass

        def dims(self, cfg):
            return 5, 6

        def sample(self, cfg, n, generator, split="train"):
            tokens = torch.randint(1, 5, (n, 6), generator=generator)
            mask = torch.ones(n, 6, dtype=torch.bool)
            return hs.Batch(tokens, tokens, mask, labels=mask.long())

        def eval_splits(self, cfg):
            return {"id": "train", "ood": "train"}

    hs.register(Every())
    with pytest.raises(hs.ConfigError) as error:
        hs.config({"task": {"name": "every_position_api_test"}})
    assert error.value.key == "model.name" and "a model that reads every position: model.name=" in str(error.value)
    assert "transformer" in str(error.value).rpartition("model.name=")[2]


# --- hs.load ----------------------------------------------------------------------------------------------------------

def test_load_refuses_a_directory_without_headsweep_output(tmp_path):
    with pytest.raises(hs.ConfigError, match="holds no headsweep output"):
        hs.load(tmp_path)


# --- in Jupyter -------------------------------------------------------------------------------------------------------

def test_a_figure_a_cell_returns_is_drawn_as_png_unless_the_user_chose_a_format(monkeypatch):
    """Our figures are made without pyplot, which is what turns IPython's drawing of a returned Figure on. A fake
    kernel with IPython's real formatters; tests/e2e/test_notebook.py runs a real one."""
    formatters = pytest.importorskip("IPython.core.formatters")
    from headsweep import results

    real = pytest.importorskip("IPython")  # its version, which matplotlib reads from the module at a first canvas
    for chosen in (None, "image/svg+xml"):
        shell = types.SimpleNamespace(display_formatter=formatters.DisplayFormatter())
        monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell,
                                                                          version_info=real.version_info))
        if chosen:
            shell.display_formatter.formatters[chosen].for_type(Figure, lambda figure: "<svg/>")
        figure = Figure()
        figure.add_subplot().plot([0, 1], [1, 0])
        assert results._drawn_in_ipython(figure) is figure
        shown, _ = shell.display_formatter.format(figure)
        assert ("image/png" in shown) == (chosen is None) and (chosen is None or shown[chosen] == "<svg/>")
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: None,  # a plain python
                                                                      version_info=real.version_info))
    assert results._drawn_in_ipython(figure) is figure


# --- hs.register ------------------------------------------------------------------------------------------------------

@dataclass
class EchoConfig(RepeatConfig):
    name: str = "echo_api_unit"


class Echo(Repeat):
    """Repeat under another name, defined in this test module: importable by no worker."""

    name = "echo_api_unit"
    config = EchoConfig


ECHO = {"task": {"name": "echo_api_unit", "n_train_strings": 8},
        "model": {"name": "transformer", "n_layers": 1, "n_heads": 1, "d_model": 16, "embedding": "learned",
                  "positional": "learned_abs"},
        "optim": {"max_steps": 20, "batch_size": 16}, "eval": {"every": 10, "n_id": 32, "n_ood": 32},
        "logging": {"wandb": False}}


@pytest.fixture
def registries():
    """Whatever a test registers is gone after it."""
    saved = [(r, dict(r._registered), dict(r._loaded)) for r in (TASKS, MODELS)]
    yield
    for registry, registered, loaded in saved:
        registry._registered, registry._loaded = registered, loaded


def test_a_registered_task_is_what_its_name_picks_and_trains(tmp_path, registries):
    with pytest.raises(hs.ConfigError, match="unknown task 'echo_api_unit'"):
        hs.config(ECHO)
    assert hs.register(Echo()).name == "echo_api_unit"
    assert TASKS.sources()["echo_api_unit"][0].origin == "registered in this process"
    run = hs.train(hs.config(ECHO), out=tmp_path / "echo")
    assert run.metrics["status"] == "completed" and "data/n_train_strings" in run.metrics


def test_a_name_a_built_in_holds_is_refused_and_so_is_what_is_no_plugin(registries):
    class Impostor(Echo):
        name = TASKS.default

    with pytest.raises(hs.ConfigError, match=f"task.name: '{TASKS.default}' is already the built-in task"):
        hs.register(Impostor())
    with pytest.raises(hs.ConfigError, match="register: takes a Task or ModelSpec instance"):
        hs.register(object())
    with pytest.raises(hs.ConfigError, match="is the class Echo; register an instance"):
        hs.register(Echo)


def test_registering_a_name_again_replaces_it_and_checks_it_again(registries):
    hs.register(Echo())
    hs.config(ECHO)  # passes its dry run

    class Broken(Echo):
        def dims(self, cfg):
            return 2, 2  # too short a context for its own sequences

    hs.register(Broken())
    with pytest.raises(hs.ConfigError, match="task.name: echo_api_unit: sample"):
        hs.config(ECHO)


def test_a_worker_adopts_what_was_shipped_once(registries, monkeypatch):
    echo = hs.register(Echo())
    shipped = pickle.loads(pickle.dumps(plugins.registered()))
    forgotten = []
    monkeypatch.setattr(plugins.dry_run, "forget", forgotten.append)
    plugins.adopt(shipped)  # an equal instance of the same class: kept, its dry runs too
    assert TASKS["echo_api_unit"] is echo and forgotten == []
    other = type("Other", (Echo,), {})()  # another class: registered, what was derived from the old one forgotten
    plugins.adopt([other])
    assert TASKS["echo_api_unit"] is other and forgotten == ["echo_api_unit"]


def test_shipping_pickles_a_registered_task_by_value_for_workers_that_cannot_import_its_module(registries, tmp_path):
    """What Ray's workers do with a trial's parameters, in a process where this test module cannot be imported."""
    from ray import cloudpickle

    hs.register(Echo())
    payload = cloudpickle.dumps(shipping.shipped())
    code = ("import pickle, sys; [task] = pickle.loads(sys.stdin.buffer.read()); "
            "print(type(task).__module__, task.name, task.dims(task.config()))")
    done = subprocess.run([sys.executable, "-c", code], input=payload, capture_output=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().split()[1:] == ["echo_api_unit", "(17,", "12)"]
    assert not shipping.users_own(sys.modules["trainables.tasks"]) and not shipping.users_own(pytest)
