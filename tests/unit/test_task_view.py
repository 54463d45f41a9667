"""How a task is shown (trainables/tasks/view.py), apart from what it is: the defaults a task without a view gets,
the views of the built-ins in their own folders, and every place that shows a task (the one-line summary, the report,
the W&B media) asking view_of. A plugin that still sets its presentation on its Task class:
tests/unit/test_legacy_plugins.py."""
import numpy as np
import pytest

from tests.plugins.repeat import Repeat
from tests.plugins.shown import SHOWN, ShownView
from trainables import readouts
from trainables.tasks import TASKS, Task, TaskView, view_of
from trainables.tasks.legacy import PRESENTATION


def test_a_task_without_a_view_is_shown_from_its_success_metric_and_diversity_axis():
    class Gap(Repeat):
        success_metric, success_above = "ood/loss", False

    class NoKnob(Repeat):
        knobs = ()

    gap, no_knob = view_of(Gap()), view_of(NoKnob())
    assert type(gap) is TaskView and gap.headline == ("ood/loss", "id/acc", "data/n_train_strings") == gap.table_columns
    generalization = gap.dashboard[0].panels
    assert [p.metrics for p in generalization] == [("ood/loss",), ("id/acc",), ("data/n_train_strings", "ood/loss")]
    assert all(p.group_by == "data/n_train_strings" for p in generalization if p.kind == "line")
    assert no_knob.headline == ("ood/acc", "id/acc") and no_knob.dashboard[0].panels[-1].kind == "line"  # no axis
    assert gap.short_names == {} and gap.diversity_label == "" and "train/loss" in gap.curve_metrics


def test_the_core_task_says_nothing_of_how_it_is_shown():
    assert not [name for name in PRESENTATION if hasattr(Task, name)]


@pytest.mark.parametrize("name", list(TASKS.builtins))
def test_a_builtin_task_finds_its_view_in_its_own_folder(name):
    view = view_of(TASKS[name])
    assert type(view).__module__ == f"trainables.tasks.{name}.view" and view.task is TASKS[name]
    assert view.figures_module == f"trainables.tasks.{name}.figures" and view.figure_note


def test_a_view_of_its_own_wins_and_reads_its_task():
    view = view_of(SHOWN)
    assert isinstance(view, ShownView) and view.task is SHOWN and view.headline == ("ood/acc", "id/loss")
    assert [p.metrics for p in view.dashboard[0].panels][:2] == [("ood/acc",), ("id/loss",)]  # default, its headline


def test_the_wandb_workspace_pins_the_views_headline_and_shows_its_dashboard():
    from dashboards import workspace

    pinned = workspace.workspace(SHOWN, "team", "p").runset_settings.pinned_columns
    assert pinned == ["run:displayName", "summary:ood/acc", "summary:id/loss", "summary:status"]
    legacy = TASKS["tests.plugins.legacy:SHOWN_ON_ITS_TASK"]  # its presentation set on its Task class, adapted
    assert [name for name, _, _ in workspace.sections(legacy)] == ["Only this", "Learning rate"]  # and every task's


def test_the_summary_line_the_report_and_the_wandb_media_show_what_the_view_says(tmp_path, capsys):
    """The training side (W&B media: readouts.member_images) and the report both reach the view through view_of."""
    from dashboards.report import build
    from sweep import cli

    (tmp_path / "shown.yaml").write_text(
        'name: shown\ntask: {name: "tests.plugins.shown:SHOWN", n_symbols: 6, length: 3, n_train_strings: 4}\n'
        "model: {name: transformer, n_layers: 2, embedding: learned, d_model: 16, positional: learned_abs}\n"
        "optim: {max_steps: 4, batch_size: 8}\neval: {every: 2, n_id: 16, n_ood: 16, n_examples: 2}\n"
        "logging: {wandb: false}\n")
    out = tmp_path / "run"
    assert cli.main(["train", str(tmp_path / "shown.yaml"), "--out", str(out)]) == 0
    summary = capsys.readouterr().out.split()  # the one-line summary: the view's headline, then status and steps
    assert [field.split("=")[0] for field in summary[:4]] == ["ood/acc", "id/loss", "status", "steps"], summary
    page = build(out).read_text()
    result_table = page[page.index("<h2>Result</h2>"):]
    header = result_table[:result_table.index("</thead>")]
    assert header.index("<th>ood/acc</th>") < header.index("<th>id/loss</th>") < header.index("<th>steps</th>")
    assert "<th>id/acc</th>" not in header  # the view's columns, not the defaults
    assert "<p>Drawn by the view of the repeat task.</p>" in page  # the gallery's note
    with np.load(out / "attention.npz") as npz:
        arrays = dict(npz)
    cfg = {"task": {"name": "tests.plugins.shown:SHOWN"}, "model": {"name": "transformer"}}
    assert {"shown/mark", "attention/pattern_L0H0"} <= set(readouts.member_images(cfg, arrays))
