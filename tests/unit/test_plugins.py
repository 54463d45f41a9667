"""Tasks and models from outside headsweep: entry points of installed packages, module paths, and what is refused.

The installed plugins here are real distributions on sys.path (a dist-info folder with entry_points.txt, what pip
writes), found through importlib.metadata exactly as an installed package's are; the module-path plugins are
tests/plugins/, written only against the public API."""
import importlib
import re
import sys
import textwrap

import numpy as np
import pytest
import torch

from tests.unit.test_registries import load as small
from trainables import config, readouts, registry
from trainables.errors import ConfigError
from trainables.models import MODELS
from trainables.tasks import TASKS, Batch, Task, is_continuous, view_of
from trainables.train import train

REPEAT, MIXER = "tests.plugins.repeat:TASK", "tests.plugins.mean_mixer:SPEC"
FAST = ["optim.max_steps=4", "eval.every=2", "eval.n_id=16", "eval.n_ood=16", "eval.n_examples=2",
        "logging.wandb=false"]


def load(*overrides: str) -> config.Config:
    return config.load(None, FAST + list(overrides))


@pytest.fixture
def site(tmp_path, monkeypatch):
    """install(dist, {group: {name: target}}, {module: source}): a package installed into a site folder on sys.path,
    its entry points visible to the registries (their per-process discovery cache cleared around the test)."""
    folder = tmp_path / "site"
    folder.mkdir()
    monkeypatch.syspath_prepend(str(folder))

    def install(dist: str, entry_points: dict[str, dict[str, str]], modules: dict[str, str] = {}) -> None:
        info = folder / f"{dist}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text("".join(
            f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in names.items())
            for group, names in entry_points.items()))
        for module, source in modules.items():
            (folder / f"{module}.py").write_text(textwrap.dedent(source))
        registry._entry_points.cache_clear()
        importlib.invalidate_caches()

    yield install
    registry._entry_points.cache_clear()
    for name in (TASKS, MODELS):
        name._loaded.clear()


def reason(error: pytest.ExceptionInfo) -> str:
    return str(error.value)


# --- discovery -------------------------------------------------------------------------------------------------------

def test_an_installed_plugin_is_found_by_its_entry_point_name_and_trains(site):
    site("my-tasks", {"headsweep.tasks": {"again": REPEAT}, "headsweep.models": {"mixer": MIXER}})
    assert "again" in list(TASKS) and "mixer" in list(MODELS)
    assert TASKS.source("again").origin == "package my-tasks 1.0"
    result = train(load("task.name=again", "model.name=mixer"))
    assert result.metrics["status"] == "completed" and 0 <= result.metrics["ood/acc"] <= 1


def test_a_module_path_names_a_plugin_that_is_not_installed():
    cfg = load(f"task.name={REPEAT}", f"model.name={MIXER}", "task.length=4")
    assert cfg.task.name == REPEAT and cfg.task.length == 4 and TASKS[REPEAT].name == "repeat"
    assert TASKS.source(REPEAT).origin == "module path"


def test_a_module_path_resolves_under_the_working_directory(tmp_path, monkeypatch):
    """A file next to the config, named by its module path from the directory headsweep runs in."""
    folder = tmp_path / "experiment"
    folder.mkdir()
    (folder / "my_copy_task.py").write_text("from tests.plugins.repeat import Repeat\nTASK = Repeat()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    assert TASKS["experiment.my_copy_task:TASK"].name == "repeat"


def test_only_the_named_plugin_is_imported_so_a_broken_one_spoils_nothing_else(site):
    site("broken-plugin", {"headsweep.tasks": {"broken": "tests.plugins.import_error:TASK", "again": REPEAT}})
    assert train(load("task.name=again", f"model.name={MIXER}")).metrics["status"] == "completed"
    assert load().task.name == "trigger_copy"  # the built-ins are untouched
    with pytest.raises(ConfigError, match=r"task\.name: task 'broken' \(package broken-plugin 1\.0, "
                                          r"tests\.plugins\.import_error:TASK\) cannot be imported: "
                                          r"ModuleNotFoundError: No module named 'a_dependency_nobody_installed'"):
        load("task.name=broken")


@pytest.mark.parametrize("name", ["trigger_copy", "again"])
def test_a_name_claimed_twice_is_refused_naming_both(site, name):
    site("first-plugin", {"headsweep.tasks": {"again": REPEAT}})
    site("second-plugin", {"headsweep.tasks": {"trigger_copy": REPEAT, "again": REPEAT + "2"}})
    with pytest.raises(ConfigError) as error:
        load(f"task.name={name}")
    first = "built-in (trainables.tasks.trigger_copy:TASK)" if name == "trigger_copy" else \
        f"package first-plugin 1.0 ({REPEAT})"
    assert reason(error).startswith(f"task.name: '{name}' is claimed by {first} and package second-plugin 1.0")


def test_an_unknown_name_lists_what_is_available_closest_first(site):
    site("my-tasks", {"headsweep.tasks": {"again": REPEAT}})
    with pytest.raises(ConfigError) as error:
        load("task.name=bigram_triger")
    assert reason(error).startswith("task.name: unknown task 'bigram_triger'; available: bigram_trigger, ")
    assert "again" in reason(error) and "module path" in reason(error)
    with pytest.raises(ConfigError, match=r"^model\.name: unknown model 'transformr'; available: transformer, "):
        load("model.name=transformr")


# --- what is refused before any work ---------------------------------------------------------------------------------

@pytest.mark.parametrize("task, model, expected", [
    ("tests.plugins.nowhere:TASK", MIXER, r"task\.name: .* cannot be imported: ModuleNotFoundError: No module named "
                                          r"'tests\.plugins\.nowhere'"),
    ("tests.plugins.repeat:NOPE", MIXER, r"task\.name: .*: module tests\.plugins\.repeat has no attribute NOPE"),
    ("tests.plugins.broken:NOT_A_TASK", MIXER, r"task\.name: .* is a object, not a trainables\.tasks\.Task"),
    ("tests.plugins.repeat:Repeat", MIXER, r"task\.name: .* is the class Repeat; name an instance of it"),
    ("tests.plugins.broken:NO_SAMPLE", MIXER, r"task\.name: .*: does not implement batch_sampler$"),
    ("tests.plugins.broken:FLOAT_TOKENS", MIXER, r"task\.name: repeat: sample\(split='train'\): tokens must be a "
                                                 r"\(B, T\) torch\.long tensor, got \(3, 12\) torch\.float32"),
    ("tests.plugins.broken:TOO_LONG", MIXER, r"task\.name: repeat: sample\(split='train'\): 12 positions, but dims\(\) "
                                             r"says at most n_ctx = 6"),
    ("tests.plugins.broken:NO_OOD", MIXER, r"task\.name: repeat: eval_splits\(\) must map the prefixes 'id' and 'ood'"),
    ("tests.plugins.broken:RAISES", MIXER, r"task\.name: repeat: sample\(split='train'\) raised RuntimeError: the "
                                           r"generator's table is missing"),
    ("tests.plugins.broken:PACKED_TOGETHER", MIXER, r"task\.name: repeat: batch_sampler\(\): a member's batch "
     r"depends on the members drawn with it"),
    (REPEAT, "tests.plugins.broken:WRONG_LOGITS", r"model\.name: mean_mixer: run_with_cache\(\) must return float "
                                                  r"logits of shape \(3, 12, 17\)"),
    (REPEAT, "tests.plugins.repeat:TASK", r"model\.name: .* is a Repeat, not a trainables\.models\.ModelSpec"),
    (REPEAT, "tests.plugins.broken:NO_FORWARD", r"model\.name: mean_mixer: forward\(\) raised NotImplementedError"),
])
def test_a_broken_plugin_is_one_line_naming_the_key(task, model, expected):
    with pytest.raises(ConfigError, match=expected) as error:
        load(f"task.name={task}", f"model.name={model}")
    assert "\n" not in reason(error)


def test_a_query_only_batch_without_its_query_is_refused():
    from trainables import dry_run

    cfg = load()
    batch = TASKS["trigger_copy"].sample(cfg.task, 3, torch.Generator().manual_seed(0), "train")
    batch.query = None  # the one-step-style task scores one query per sequence: it must say which
    with pytest.raises(ConfigError, match="query_only\\(\\) is true, so query must be a \\(3,\\) torch.long tensor"):
        dry_run.check_batch(batch, "trigger_copy: sample", *TASKS["trigger_copy"].dims(cfg.task), True)


# --- defaults: a task with only the required hooks, a model without attention ------------------------------------

def test_a_task_with_only_the_required_hooks_gets_working_defaults():
    task = TASKS[REPEAT]
    cfg = load(f"task.name={REPEAT}", f"model.name={MIXER}")
    assert task.diversity_axis == "data/n_train_strings" and not task.small_is_diverse
    assert task.diversity(cfg.task) == {"data/n_train_strings": 64.0}
    view = view_of(task)  # no view of its own: the defaults, drawn from its success metric and diversity axis
    assert view.headline == ("ood/acc", "id/acc", "data/n_train_strings") == view.table_columns
    metrics = {m for section in view.dashboard for panel in section.panels for m in panel.metrics}
    assert {"ood/acc", "id/acc", "data/n_train_strings", "train/loss"} <= metrics
    assert view.figures({}) == {} and view.images({}) == {} and view.figure_note  # nothing to draw without attention
    patterns = {"patterns": np.full((1, 2, 1, 4, 4), 0.25)}  # (k, n_layers, H, T, T)
    assert set(view.figures(patterns)) == set(view.images(patterns)) == {"attention/pattern_L0H0",
                                                                         "attention/pattern_L1H0"}
    assert Task.diversity(task, cfg.task) == task.diversity(cfg.task)


@pytest.mark.parametrize("task", [t for t in TASKS.builtins if not is_continuous(TASKS[t])] + [REPEAT])
def test_a_model_without_attention_trains_and_reads_out_on_every_task(task):
    """The tasks' attention probes are absent, not a crash; so are the attention arrays and figures (every token task:
    the mixer reads token ids)."""
    cfg = small(task, MIXER, *FAST, "optim.batch_size=8")
    result = train(cfg)
    assert result.metrics["status"] == "completed"
    assert not [m for m in result.metrics if m.startswith("mech/induction") or m.startswith("attn/")]
    assert not {"patterns", "query_attention", "lag_profile", "prev_token_by_position"} & set(result.arrays)
    assert not [k for k in readouts.trial_figures(cfg, result.arrays) if k.startswith("attention/")]
    readouts.member_images(cfg, result.arrays)


def test_the_builtin_tasks_still_report_their_attention_probes_with_attention():
    result = train(small("trigger_copy", "transformer", *FAST))
    assert "mech/induction_score" in result.metrics and "patterns" in result.arrays


def test_a_plugin_batch_is_a_public_batch_drawn_from_its_generator():
    cfg = load(f"task.name={REPEAT}", f"model.name={MIXER}", "task.n_train_strings=3")
    draw = lambda split, seed: TASKS[REPEAT].sample(cfg.task, 50, torch.Generator().manual_seed(seed), split)
    train_batch, fresh = draw("train", 1), draw("fresh", 1)
    assert isinstance(train_batch, Batch) and torch.equal(train_batch.tokens, draw("train", 1).tokens)
    assert len(train_batch.tokens.unique(dim=0)) <= 3 < len(fresh.tokens.unique(dim=0))


def test_the_public_api_keeps_its_import_paths():
    """docs/EXTENDING.md promises these paths to plugin authors: moving one breaks every plugin."""
    from trainables.cache import pattern_at, patterns  # noqa: F401
    from trainables.errors import ConfigError, require  # noqa: F401
    from trainables.models import ModelSpec  # noqa: F401
    from trainables.tasks import PAD_LABEL, Batch, Panel, PanelSection, Task, TaskView, view_of  # noqa: F401


def test_list_shows_every_source_and_a_broken_plugin_on_its_own_line(site, capsys):
    from sweep import cli

    site("my-tasks", {"headsweep.tasks": {"again": REPEAT, "broken": "tests.plugins.import_error:TASK"},
                      "headsweep.models": {"mixer": MIXER}})
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    width = len("linear_regression")  # the longest name: one column for every name, its facts indented past it
    row = lambda name, origin, first_fact="": f"\n  {name:<{width}} {origin}\n" + (
        f"  {'':<{width}}   {first_fact}" if first_fact else "")
    assert row("again", "package my-tasks 1.0", "Say it again") in out
    assert "diversity knobs: task.n_train_strings; axis: data/n_train_strings" in out
    assert re.search(r"\n  broken +package my-tasks 1\.0\n +not usable: task 'broken' .* cannot be imported: "
                     r"ModuleNotFoundError", out)
    assert row("mixer", "package my-tasks 1.0", "A causal running mean") in out
    assert all(row(name, "built-in") in out for name in ("trigger_copy", "transformer", "linear_regression"))
