"""Overrides on the command line: an index into a list sets that element; every plausible mistake (an index out of
range, YAML the shell cut at its spaces, a key the sweep sets anyway, a module path that does not import) is one line
naming the key, exit code 2, and nothing written; so is every value a train or search config refuses. In process
(sweep.cli.main): no Ray starts. The installed command's exit code and stderr: tests/integration/test_train_cli.py."""
import sys

import pytest
import torch

from sweep import cli, cluster
from sweep.search import studies
from sweep.search.config import load_search
from sweep.space import load_sweep
from tests.conftest import CONFIGS


@pytest.fixture(autouse=True)
def no_ray(monkeypatch):
    """Each command here must stop before Ray starts; should one not, it fails at once instead of running a sweep."""
    def start(address):
        raise AssertionError("the command got as far as starting Ray")
    monkeypatch.setattr(cluster, "connect", start)


def refused(capsys, tmp_path, verb: str, config_file: str, *overrides: str) -> str:
    """The one line `headsweep <verb>` answers with, having checked exit code 2 and that nothing was written."""
    out = tmp_path / "out"
    assert cli.main([verb, str(CONFIGS / config_file), *overrides, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("headsweep: error: ") and err.count("\n") == 1, err
    assert not out.exists()
    return err.removeprefix("headsweep: error: ").rstrip("\n")


# --- an index into a list -------------------------------------------------------------------------------------------

def test_an_indexed_override_sets_that_element_of_a_search_list():
    base, search = load_search(CONFIGS / "quickstart.yaml", ["search.slices.1.values=[1,3]"])
    assert [(axis.key, axis.values) for axis in search.slices] == [("task.lengths.low", [3, 5, 7, 9]),
                                                                   ("task.n_triggers", [1, 3])]
    assert {sl.point["task.n_triggers"] for sl in studies.slices(base, search, "x")} == {1, 3}  # validated as usual


def test_an_indexed_override_sets_that_element_of_a_grid_axis_and_of_a_list_in_it():
    _, sweep, points = load_sweep(CONFIGS / "debug_grid.yaml", ["sweep.axes.0.values=[2,3]", "sweep.axes.1.values.0=7"])
    assert [axis.values for axis in sweep.axes] == [[2, 3], [7, 8]]
    assert {(p["task.lengths.low"], p["task.lengths.high"]) for p in points} == {(2, 7), (2, 8), (3, 7), (3, 8)}


def test_an_index_into_a_list_the_file_leaves_at_its_default():
    _, search = load_search(CONFIGS / "debug_search.yaml", ["search.sampler=bisection", "search.success.seeds.0=5"])
    assert search.success.seeds == [5]


@pytest.mark.parametrize("verb, config_file, override, line", [
    ("search", "quickstart.yaml", "search.slices.1.values=[0,3]",
     "task.n_triggers: must be >= 1 (at low=3,n_triggers=0,width=2)"),
    ("grid", "debug_grid.yaml", "sweep.axes.1.key=task.nope", "sweep.axes[1].key: task.nope is not a key of the "
                                                              "trial config"),
])
def test_an_indexed_override_is_validated_as_usual(capsys, tmp_path, verb, config_file, override, line):
    assert refused(capsys, tmp_path, verb, config_file, override) == line


@pytest.mark.parametrize("verb, config_file, override, line", [
    ("search", "quickstart.yaml", "search.slices.5.values=[1,3]",
     "search.slices.5: index out of range: search.slices has elements 0 to 1; to add one, give the whole list "
     "('search.slices=[...]')"),
    ("grid", "debug_grid.yaml", "sweep.axes.2.values=[1]",
     "sweep.axes.2: index out of range: sweep.axes has elements 0 to 1; to add one, give the whole list "
     "('sweep.axes=[...]')"),
    ("search", "debug_search.yaml", "search.constraints.1=task.lengths.low<=3",
     "search.constraints.1: index out of range: search.constraints has elements 0 to 0; to add one, give the whole "
     "list ('search.constraints=[...]')"),
    ("search", "debug_search.yaml", "search.slices.key=task.n_triggers",
     "search.slices.key: search.slices is a list: name an element by its index (search.slices.0.key=...), or give "
     "the whole list ('search.slices=[...]')"),
    ("search", "debug_search.yaml", "search.slices.0.valuez=[1]",
     "search.slices.0.valuez: unknown key (did you mean search.slices.0.values?)"),
    ("search", "debug_search.yaml", "search.knob=[1,2]",
     "search.knob: is a section (key, low, high, values), not a value: set one of its keys, e.g. search.knob.key=..."),
    ("train", "debug.yaml", "task=3", "task: is a section (name, vocab_size, max_len, n_triggers, lengths, ood_split, "
                                      "n_pairs_per_cell), not a value: set one of its keys, e.g. task.name=..."),
])
def test_a_list_or_section_given_the_wrong_shape_is_one_line(capsys, tmp_path, verb, config_file, override, line):
    """Each was a traceback: TypeError: Cannot merge incompatible container types, or (a list for a section)
    TypeError: can only concatenate str (not "NoneType") to str."""
    assert refused(capsys, tmp_path, verb, config_file, override) == line


# --- YAML the shell cut at its spaces -------------------------------------------------------------------------------

@pytest.mark.parametrize("words, line", [
    (["search.slices=[{key:", "task.n_triggers,", "values:", "[1,3]}]"],
     "search.slices: the value [{key: is not valid YAML (did not find expected node content); if the shell split an "
     "override at its spaces, put single quotes around the whole override: 'search.slices=[{key: ...'"),
    (["a.b=[1,", "2]"], "a.b: the value [1, is not valid YAML (did not find expected node content); if the shell "
                        "split an override at its spaces, put single quotes around the whole override: 'a.b=[1, ...'"),
    (["name=my", "run"], "run: an override must look like key=value (e.g. task.lengths.low=3); if the shell split an "
                         "override at its spaces, put single quotes around the whole override"),
])
def test_an_override_the_shell_split_says_to_quote_it(capsys, tmp_path, words, line):
    assert refused(capsys, tmp_path, "search", "quickstart.yaml", *words) == line


# --- a key the sweep sets at each point -----------------------------------------------------------------------------

IGNORED = "so this override would be ignored"


@pytest.mark.parametrize("verb, config_file, override, line", [
    ("search", "debug_search.yaml", "task.lengths.low=3",
     f"task.lengths.low: is set in each slice by search.slices[0], {IGNORED}; to search one value, override the "
     "slice: 'search.slices.0.values=[3]'"),
    ("search", "debug_search.yaml", "task.lengths={low: 3}",
     f"task.lengths: it sets task.lengths.low, which is set in each slice by search.slices[0], {IGNORED}; to search "
     "one value, override the slice: 'search.slices.0.values=[...]'"),

    ("search", "debug_search.yaml", "task.lengths.width=3",
     f"task.lengths.width: is set at each candidate by the search's knob, {IGNORED}; to search one value, override "
     "the knob: 'search.knob.values=[3]'"),
    ("grid", "debug_grid.yaml", "task.lengths.high=7",
     f"task.lengths.high: is set at each point by sweep.axes[1], {IGNORED}; to run one value, override the axis: "
     "'sweep.axes.1.values=[7]'"),
    ("grid", "debug_grid.yaml", "seed=4",
     f"seed: is set at each point by sweep.seeds, {IGNORED}; override the seeds instead: 'sweep.seeds=[4]'"),
])
def test_an_override_of_a_key_the_sweep_sets_is_refused(capsys, tmp_path, verb, config_file, override, line):
    """Each was accepted and silently lost: every trial set the key from the slices, knob, axes or seeds."""
    assert refused(capsys, tmp_path, verb, config_file, override) == line


def test_an_override_of_part_of_a_key_the_sweep_sets_is_refused(capsys, tmp_path):
    assert refused(capsys, tmp_path, "search", "debug_search.yaml", "task.lengths.low=3",
                   "search.slices=[{key: task.lengths, values: [{low: 2}, {low: 4}]}]") == (
        f"task.lengths.low: it sets part of task.lengths, which is set in each slice by search.slices[0], {IGNORED}; "
        "to search one value, override the slice: 'search.slices.0.values=[...]'")


def test_an_override_of_a_key_a_tpe_param_sets_is_refused(capsys, tmp_path):
    assert refused(capsys, tmp_path, "search", "debug_search.yaml", "search.sampler=tpe", "search.knob.key=''",
                   "search.tpe.params=[{key: task.n_triggers, type: int, low: 1, high: 3}]", "task.n_triggers=3") == (
        f"task.n_triggers: is set at each candidate by search.tpe.params[0], {IGNORED}; to narrow it, override "
        "search.tpe.params.0.low and search.tpe.params.0.high")


# --- a module path that does not import -----------------------------------------------------------------------------

@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    """Run from an empty directory (module paths also resolve against it), sys.path and sys.modules restored."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("headsweep_test_"):
            del sys.modules[name]


@pytest.mark.parametrize("key", ["task.name", "model.name"])
def test_a_module_path_that_is_not_found_says_how_to_make_it_importable(capsys, elsewhere, key):
    line = refused(capsys, elsewhere, "train", "debug.yaml", f"{key}=headsweep_test_mytasks.copy:TASK")
    assert line.startswith(f"{key}: ") and line.endswith(
        "cannot be imported: ModuleNotFoundError: No module named 'headsweep_test_mytasks'; to make "
        "headsweep_test_mytasks importable, run headsweep from the directory that holds headsweep_test_mytasks/ (or "
        "headsweep_test_mytasks.py), add that directory to PYTHONPATH, or pip install the package that provides it")


def test_a_module_path_whose_package_lacks_the_module_says_where_the_package_was_found(capsys, elsewhere):
    (elsewhere / "headsweep_test_tasks").mkdir()
    line = refused(capsys, elsewhere, "train", "debug.yaml", "task.name=headsweep_test_tasks.copy:TASK")
    assert line.endswith("No module named 'headsweep_test_tasks.copy'; headsweep_test_tasks was found "
                         f"({elsewhere / 'headsweep_test_tasks'}) but has no module copy"), line


# --- values a train or a search config refuses ---------------------------------------------------------------------

@pytest.mark.parametrize("args, key", [
    (["task.lenghts.low=3"], "task.lengths"),  # unknown key: the suggestion names the valid one
    (["task.lengths.low=abc"], "task.lengths.low"),
    (["task.lengths.high=20"], "task.lengths.high"),  # T = 43 > L - 1
    (["task.lengths.low=9", "task.lengths.high=4"], "task.lengths.high"),  # empty support
    (["optim.lr=-1"], "optim.lr"),
    (["model.n_layers=0"], "model.n_layers"),
    pytest.param(["device=cuda"], "device", marks=pytest.mark.skipif(torch.cuda.is_available(),
                                                                     reason="a GPU is there")),
    (["optim.batch_size=100000000"], "optim.batch_size"),  # estimated before anything runs, not OOM-killed
    (["eval.n_ood=100000000"], "eval.n_ood"),
    (["eval.threshold=1.5"], "eval.threshold"),  # ood/acc lies in [0, 1]
])
def test_bad_train_input_is_one_line_exit_2_and_writes_nothing(capsys, tmp_path, args, key):
    assert key in refused(capsys, tmp_path, "train", "debug.yaml", *args)


@pytest.mark.parametrize("args, key", [
    (["search.sampler=annealing"], "search.sampler"),
    (["search.knob.key=task.lengths.wide"], "search.knob.key"),
    (["search.sampler=bisection", "search.success.min_seeds=2"], "search.success.min_seeds"),
    (["search.success.seeds=[0,1]"], "search.success.seeds"),  # the threshold sampler draws its own seeds
    (["search.success.rate=1"], "search.success.rate"),
    (["search.success.confidence=0"], "search.success.confidence"),
    (["search.budget.trainings=0"], "search.budget.trainings"),
    (["search.budget.trainings=4"], "search.budget.trainings"),  # too few to rule a value in or out at q = 1/2
    (["search.success.rate=0.95"], "search.budget.trainings"),  # 16 trainings cannot show p >= 0.95
    (["search.threshold.resolution=0"], "search.threshold.resolution"),
    (["search.threshold.batch=0"], "search.threshold.batch"),
    (["search.success.threshold=2"], "search.success.threshold"),  # ood/acc lies in [0, 1]
    (["search.success.metric=ood/accc"], "search.success.metric"),  # no trial reports it: a dry run says so
    (["search.stop.streak=-1"], "search.stop.streak"),
    (["search.sampler=bisection", "search.success.seeds=[-1]"], "search.success.seeds"),  # re-check blocks: >= 0
    (["--extend", "-1"], "--extend"),
    (["--storage", "postgresql://nobody@127.0.0.1:9/none"], "--storage"),  # nothing listens on port 9
])
def test_bad_search_input_is_one_line_exit_2_and_writes_nothing(capsys, tmp_path, args, key):
    assert key in refused(capsys, tmp_path, "search", "debug_search.yaml", *args)


# --- a continuous task ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("verb, config_file, override, line", [
    ("train", "debug_linear_regression.yaml", "task.dim=0", "task.dim: must be >= 1 (x and w live in R^dim)"),
    ("train", "debug_linear_regression.yaml", "task.n_points=0",
     "task.n_points: must be >= 1 (the (x, y) pairs of a sequence)"),
    ("grid", "regression_diversity.yaml", "sweep.axes.0.values=[0,4]",
     "task.n_tasks: must be >= 1 (the size of the training pool of task vectors) (at sweep point n_tasks=0,seed=0)"),
    ("train", "debug_linear_regression.yaml", "task.noise=-1",
     "task.noise: must be a finite number >= 0 (the variance sigma^2 of the label noise)"),
    ("train", "debug_linear_regression.yaml", "model.n_ctx=8",
     "model.n_ctx: is 8, but the task's sequences are up to 15 positions long"),
    ("train", "debug_linear_regression.yaml", "model.embedding=learned",
     "model.embedding: learned (transformer) reads token ids, but linear_regression gives real-valued inputs "
     "(set model.embedding=linear)"),
    ("train", "debug_linear_regression.yaml", "model.name=one_step",
     "model.name: one_step reads token ids, but linear_regression gives real-valued inputs"),
    ("train", "debug.yaml", "model.embedding=linear",
     "model.embedding: linear (transformer) reads real-valued inputs, but trigger_copy gives token ids"),
])
def test_a_continuous_task_or_its_model_refused_in_one_line(capsys, tmp_path, verb, config_file, override, line):
    assert refused(capsys, tmp_path, verb, config_file, override) == line
