"""A task and a model written outside headsweep, through the unchanged CLI: named by module path (tests/plugins/,
importable from the directory the tests run in, as a researcher's folder next to their config is), and installed
as a package the way docs/EXTENDING.md says, found through its entry point. Grid (packed, resumed, W&B offline),
the four search samplers, report, compare, dashboard, list, and a plugin that raises inside one trial."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.integration.conftest import JUDGED, assert_report_rebuilds_the_same, headsweep

ROOT = Path(__file__).resolve().parents[2]
EXTENDING = ROOT / "docs" / "EXTENDING.md"
BASE = """
name: {name}
task: {{name: "tests.plugins.repeat:TASK", n_symbols: 8, length: 4, n_train_strings: 4}}
model: {{name: "tests.plugins.mean_mixer:SPEC", d_model: 16}}
optim: {{lr: 0.01, batch_size: 16, max_steps: 20}}
eval: {{every: 10, n_id: 32, n_ood: 32, n_examples: 2}}
logging: {{wandb: {wandb}}}
"""
SEARCH = """
search:
  knob: {{key: task.n_train_strings, values: [2, 8, 32]}}
  sampler: {sampler}
  success: {{threshold: 0.5, seeds: [0]}}
  budget: {{per_slice: 3, trainings: 6}}   # evaluations (bisection, tpe, grid); seed trainings (threshold)
  max_concurrent: 1   # tiny trials: see configs/debug_search.yaml
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def test_a_packed_grid_of_a_module_path_plugin_logs_to_wandb_reports_and_resumes(tmp_path):
    grid = write(tmp_path, "grid", BASE.format(name="plugin_grid", wandb="true") + """
sweep:
  axes: [{key: task.n_train_strings, values: [2, 64]}]
  seeds: [0, 1]
  pack: 2
""")
    out = tmp_path / "grid"
    proc = headsweep("grid", grid, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    frame = pd.read_csv(out / "results.csv")
    assert len(frame) == 4 and set(frame["status"]) == {"completed"}
    assert {"ood/acc", "id/acc", "data/n_train_strings"} <= set(frame.columns)  # the task's default headline
    assert not [c for c in frame.columns if c.startswith("mech/")]  # a model without attention: no attention probes
    assert sorted(frame["data/n_train_strings"]) == [2, 2, 64, 64]
    for trial in (out / "trials").iterdir():
        assert list((trial / "wandb").glob("offline-run-*")), trial  # one W&B run per member, packed or not
    report = (out / "report.html").read_text()
    assert "data/n_train_strings" in report and "<img" in report
    assert_report_rebuilds_the_same(out, tmp_path)

    again = headsweep("grid", grid, "--out", out)  # resumes: everything finished is kept
    assert again.returncode == 0, again.stderr[-3000:]
    assert pd.read_csv(out / "results.csv")["seconds"].tolist() == frame["seconds"].tolist()


@pytest.mark.parametrize("sampler", ["threshold", "bisection", "tpe", "exhaustive"])
def test_every_search_sampler_searches_a_plugins_knob(tmp_path, sampler):
    config = write(tmp_path, "search", BASE.format(name=f"plugin_{sampler}", wandb="false")
                   + SEARCH.format(sampler=sampler))
    out = tmp_path / "search"
    proc = headsweep("search", config, "--out", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    trials = pd.read_csv(out / "trials.csv")
    assert len(trials) >= 1 and set(trials["status"]) <= JUDGED and trials["ood/acc"].notna().all()
    assert set(trials["candidate"]) <= {2, 8, 32}
    assert len(pd.read_csv(out / "min_diversity.csv")) == 1 and (out / "report.html").stat().st_size > 0
    if sampler == "threshold":  # the trace of its one study, and its threshold on the comparison figure
        assert "Search trace over the points it evaluated" in (out / "report.html").read_text()
        compared = headsweep("compare", out, "--out", tmp_path / "compare.png")
        assert compared.returncode == 0, compared.stderr[-2000:]
        assert (tmp_path / "compare.png").stat().st_size > 0 and (tmp_path / "compare.csv").exists()


def test_a_guide_is_refused_where_the_plugin_has_no_such_measure(tmp_path):
    config = write(tmp_path, "search", BASE.format(name="plugin_guided", wandb="false")
                   + SEARCH.format(sampler="threshold") + "  guide: {metric: data/max_sum_ratio}\n")
    proc = headsweep("search", config, "--out", tmp_path / "out")
    assert proc.returncode == 2 and not (tmp_path / "out").exists()
    assert proc.stderr.strip() == ("headsweep: error: search.guide.metric: must be one of data/n_train_strings "
                                   "(known before training)")


def test_a_plugin_that_raises_inside_a_trial_fails_that_trial_only(tmp_path):
    grid = write(tmp_path, "grid", BASE.format(name="plugin_raises", wandb="false").replace(
        "tests.plugins.repeat:TASK", "tests.plugins.broken:RAISES_WHEN_LONG") + """
sweep:
  axes: [{key: task.length, values: [4, 5]}]
  seeds: [0]
  max_failures: 0
""")
    out = tmp_path / "grid"
    proc = headsweep("grid", grid, "--out", out)
    frame = pd.read_csv(out / "results.csv").set_index("task.length")
    assert frame.loc[4, "status"] == "completed"
    assert frame.loc[5, "status"] == "error" and "strings longer than 4 are not supported" in frame.loc[5, "error"]
    assert proc.returncode != 0  # a grid with a failed trial says so


def test_a_broken_plugin_stops_a_grid_before_anything_is_written(tmp_path):
    grid = write(tmp_path, "grid", BASE.format(name="broken", wandb="false").replace(
        "tests.plugins.repeat:TASK", "tests.plugins.broken:FLOAT_TOKENS") + "sweep: {seeds: [0]}\n")
    proc = headsweep("grid", grid, "--out", tmp_path / "out")
    assert proc.returncode == 2 and not (tmp_path / "out").exists()
    assert re.fullmatch(r"headsweep: error: task\.name: repeat: sample\(split='train'\): tokens must be a \(B, T\) "
                        r"torch\.long tensor, got \(3, 8\) torch\.float32\n", proc.stderr)


# --- the tutorial, as a user follows it ------------------------------------------------------------------------------

def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", EXTENDING.read_text(), re.S)


def test_the_tutorials_code_is_the_code_the_tests_run():
    """The tutorial's task and model are shown whole, each exactly the file the tests run (beside them, fragments
    such as a view's sketch)."""
    python = blocks("python")
    assert python.index((ROOT / "tests/plugins/repeat.py").read_text()) < \
        python.index((ROOT / "tests/plugins/mean_mixer.py").read_text())


@pytest.fixture(scope="module")
def tutorial_package(tmp_path_factory) -> dict:
    """The tutorial's package built from the page's own pyproject.toml and code, pip-installed into a folder that
    only the commands of these tests see (PYTHONPATH): the entry point is then found exactly as a user's."""
    root = tmp_path_factory.mktemp("tutorial")
    package, site = root / "package", root / "site"
    (package / "my_tasks").mkdir(parents=True)
    (package / "my_tasks" / "repeat.py").write_text(blocks("python")[0])
    (package / "pyproject.toml").write_text(blocks("toml")[0])
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(site), str(package)], check=True, capture_output=True)
    shutil.rmtree(package)  # installed, not importable from where it was written
    return os.environ | {"PYTHONPATH": str(site)}


def test_the_tutorials_installed_task_is_listed_and_trains_by_its_entry_point_name(tutorial_package, tmp_path):
    listed = headsweep("list", env=tutorial_package)
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"\n  repeat +package my-headsweep-tasks 0\.1\.0\n +Say it again", listed.stdout), listed.stdout
    config = write(tmp_path, "repeat", blocks("yaml")[0].replace('"my_tasks.repeat:TASK"', "repeat"))
    out = tmp_path / "p16"
    proc = headsweep("train", config, "task.n_train_strings=16", "optim.max_steps=20", "eval.every=10", "--out", out,
                     env=tutorial_package)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("ood/acc=") and "data/n_train_strings=16.000 status=completed steps=20" in proc.stdout
    assert json.loads((out / "result.json").read_text())["data/n_train_strings"] == 16
    assert "repeat" not in headsweep("list").stdout  # installed for those commands only


def test_dashboard_builds_a_plugins_panels(tmp_path):
    proc = headsweep("dashboard", "--entity", "me", "--project", "p", "--task", "tests.plugins.repeat:TASK",
                     "--out", tmp_path / "dash")
    assert proc.returncode == 0, proc.stderr
    workspace = (tmp_path / "dash" / "workspace.json").read_text()
    assert "data/n_train_strings" in workspace and "ood/acc" in workspace
    unknown = headsweep("dashboard", "--entity", "me", "--project", "p", "--task", "repeet", "--out", tmp_path / "x")
    assert unknown.returncode == 2 and unknown.stderr.startswith("headsweep: error: --task: unknown task 'repeet'")
