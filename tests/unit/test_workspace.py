"""The W&B workspace and report of every task, built offline from the task's plain-data panels."""
import pytest

from dashboards import workspace
from sweep import cli
from trainables.tasks import TASKS, view_of


@pytest.mark.parametrize("name", list(TASKS))  # (a Registry: pytest 10 takes collections only)
def test_every_task_has_a_workspace_and_report_with_its_sections(name):
    task = TASKS[name]
    dashboard = (*view_of(task).dashboard, workspace.LEARNING_RATE)  # every task's, after its own
    spec = workspace.specs(task, "team", "headsweep", group="g")
    sections = spec["workspace"]["spec"]["section"]["panelBankConfig"]["sections"]
    assert [s["name"] for s in sections] == [section.name for section in dashboard]
    assert sum(len(s["panels"]) for s in sections) == sum(len(section.panels) for section in dashboard)
    assert sum(b["type"] == "panel-grid" for b in spec["report"]["spec"]["blocks"]) == len(dashboard)


def test_an_unknown_task_is_one_line_exit_2(tmp_path, capsys):
    code = cli.main(["dashboard", "--entity", "team", "--project", "p", "--task", "nope", "--out", str(tmp_path / "d")])
    assert code == 2 and "--task" in capsys.readouterr().err and not (tmp_path / "d").exists()
