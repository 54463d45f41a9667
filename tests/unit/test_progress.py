"""The progress view shows itself as the process it runs in allows (sweep/progress.py): a line rewritten in place on a
terminal, tqdm's notebook bar in a Jupyter kernel (the line rewritten in place in the cell where ipywidgets is
missing), a line at a time in a log. The kernel is faked here; tests/e2e/test_notebook.py runs a real one."""
import pickle
import sys
import types

import pytest

from sweep import progress
from sweep.progress import ProgressView


class FakeShell:
    """What IPython's get_ipython() returns: a kernel's shell is a ZMQInteractiveShell, a terminal's is not."""


class KernelShell(FakeShell):
    pass


def fake_ipython(monkeypatch, shell) -> None:
    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=lambda: shell))
    monkeypatch.setitem(sys.modules, "ipykernel.zmqshell", types.SimpleNamespace(ZMQInteractiveShell=KernelShell))


class FakeStdout:
    def __init__(self, tty: bool):
        self.tty, self.text = tty, ""

    def isatty(self) -> bool:
        return self.tty

    def write(self, text: str) -> None:
        self.text += text

    def flush(self) -> None:
        pass


@pytest.fixture
def no_ipython(monkeypatch):
    monkeypatch.delitem(sys.modules, "IPython", raising=False)
    monkeypatch.delitem(sys.modules, "ipykernel.zmqshell", raising=False)


@pytest.mark.parametrize("tty, kind", [(True, "tty"), (False, "log")])
def test_outside_jupyter_a_terminal_gets_the_line_in_place_and_anything_else_a_log(monkeypatch, no_ipython, tty,
                                                                                  kind):
    monkeypatch.setattr(sys, "stdout", FakeStdout(tty))
    assert not progress.in_jupyter() and progress.display_kind() == kind


def test_an_ipython_terminal_is_no_notebook(monkeypatch):
    fake_ipython(monkeypatch, FakeShell())
    monkeypatch.setattr(sys, "stdout", FakeStdout(True))
    assert not progress.in_jupyter() and progress.display_kind() == "tty"
    fake_ipython(monkeypatch, None)  # IPython imported, but no shell running
    assert not progress.in_jupyter()


@pytest.mark.parametrize("widgets, kind", [(True, "notebook"), (False, "cell")])
def test_a_jupyter_kernel_gets_the_notebook_bar_where_ipywidgets_can_draw_it(monkeypatch, widgets, kind):
    fake_ipython(monkeypatch, KernelShell())
    monkeypatch.setattr(sys, "stdout", FakeStdout(False))  # a kernel's stdout is no terminal
    monkeypatch.setattr(progress, "_has_widgets", lambda: widgets)
    assert progress.in_jupyter() and progress.display_kind() == kind


class FakeBar:
    """tqdm.notebook.tqdm's part the view uses."""
    made: list["FakeBar"] = []

    def __init__(self, total=None, **kwargs):
        self.total, self.kwargs, self.n, self.desc, self.closed = total, kwargs, 0, "", False
        FakeBar.made.append(self)

    def set_description_str(self, desc: str) -> None:
        self.desc = desc

    def close(self) -> None:
        self.closed = True


def finished(out, *names: str) -> None:
    for name in names:
        (out / "trials" / name).mkdir(parents=True)
        (out / "trials" / name / "result.json").write_text("{}")


def test_in_a_notebook_the_view_is_one_bar_of_members_trained_with_the_line_beside_it(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "display_kind", lambda: "notebook")
    monkeypatch.setitem(sys.modules, "tqdm.notebook", types.SimpleNamespace(tqdm=FakeBar))
    monkeypatch.setattr(FakeBar, "made", [])
    stdout = FakeStdout(False)
    monkeypatch.setattr(sys, "stdout", stdout)
    view = ProgressView("grid", tmp_path, total=3, summary=lambda: "1 generalize OOD")
    finished(tmp_path, "a")
    view.report([types.SimpleNamespace(status="RUNNING")], done=False)
    [bar] = FakeBar.made
    assert bar.total == 3 and bar.n == 1 and bar.desc.startswith("grid  1/3 trained  1 running  0 failed")
    assert bar.desc.endswith("1 generalize OOD") and not bar.closed
    assert pickle.loads(pickle.dumps(view)).bar is None  # Tune pickles its reporter (tuner.pkl); a widget stays here

    finished(tmp_path, "b", "c")
    view.report([types.SimpleNamespace(status="TERMINATED")], done=True)
    assert FakeBar.made == [bar] and bar.n == 3 and bar.closed and "3/3 trained  0 running" in bar.desc
    assert stdout.text == ""  # nothing printed beside the bar


def test_in_a_kernel_without_ipywidgets_the_line_is_rewritten_in_place_without_terminal_escapes(tmp_path,
                                                                                               monkeypatch):
    monkeypatch.setattr(progress, "display_kind", lambda: "cell")
    stdout = FakeStdout(False)
    monkeypatch.setattr(sys, "stdout", stdout)
    view = ProgressView("search", tmp_path, total=None)
    view.report([types.SimpleNamespace(status="RUNNING")], done=False)
    view.report([types.SimpleNamespace(status="RUNNING")], done=False)  # in place: every report, counts unchanged
    view.report([], done=True)
    updates = stdout.text.split("\r")[1:]
    assert len(updates) == 3 and updates[0].startswith("search  0 trained  1 running") and "\x1b" not in stdout.text
    assert stdout.text.endswith("\n") and stdout.text.count("\n") == 1


def test_on_a_terminal_and_in_a_log_the_line_is_as_before(tmp_path, monkeypatch):
    """The CLI's output, which the integration tests read: in place with an erase on a terminal, else whole lines."""
    for kind, start in (("tty", "\r\x1b[2Kgrid  0/2 trained"), ("log", "grid  0/2 trained")):
        monkeypatch.setattr(progress, "display_kind", lambda: kind)
        stdout = FakeStdout(kind == "tty")
        monkeypatch.setattr(sys, "stdout", stdout)
        view = ProgressView("grid", tmp_path, total=2)
        view.report([types.SimpleNamespace(status="RUNNING")], done=False)
        view.report([types.SimpleNamespace(status="RUNNING")], done=False)  # a log prints only when counts change
        assert stdout.text.startswith(start) and stdout.text.count("grid  0/2") == (2 if kind == "tty" else 1)
        assert stdout.text.count("\n") == (0 if kind == "tty" else 1)  # a terminal's line ends with the sweep
