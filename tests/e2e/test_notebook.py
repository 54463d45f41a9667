"""examples/notebook/headsweep_from_python.ipynb executed end to end by a real Jupyter kernel (nbclient, ipykernel;
issue [api] items 4 and 5): a task and a model defined in its cells, registered, trained in the kernel, gridded and
searched on a Ray the kernel starts, plotted, read back. Every cell runs without error; the sweeps' cells show the
progress bar and their result's table and no line of Ray's or W&B's; the plots are images; the directories read back
in this process. Then, in the same kernel, a search is stopped as the notebook's stop button stops it.

The kernel runs this interpreter with this checkout first on its path (so do the Ray workers it starts), its Jupyter
and IPython files in a temporary directory: nothing is written to the user's home but Ray's own token file."""
import os
import re
import time
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest
from ipykernel.kernelspec import install
from jupyter_client import KernelManager
from nbclient import NotebookClient

import headsweep as hs
from tests.e2e.conftest import FOREIGN_RAY_VARS

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "notebook" / "headsweep_from_python.ipynb"
KERNEL = "headsweep-tests"
CELL_TIMEOUT_S = 300
# A line Ray or W&B print: a worker's forwarded output, a log record's time stamp or level, W&B's prefix.
LOG_LINE = re.compile(r"^\s*(\(pid=|\(\w+ pid=|\x1b\[3\dm\(|\d{4}-\d\d-\d\d|\[\d{4}-|INFO|WARNING|wandb:|Tune )",
                      re.MULTILINE)
WIDGET = "application/vnd.jupyter.widget-view+json"


@contextmanager
def jupyter_home(home: Path):
    """This interpreter installed as the kernel KERNEL under `home`, and Jupyter's files there while the block runs."""
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "IPYTHONDIR": str(home / "ipython"), "OMP_NUM_THREADS": "1"}
    install(kernel_name=KERNEL, prefix=str(home), env=env)  # home/share/jupyter/kernels/KERNEL: this interpreter
    with pytest.MonkeyPatch.context() as mp:
        for key in FOREIGN_RAY_VARS:  # a Ray of the kernel's own, as on a laptop
            mp.delenv(key, raising=False)
        for key, folder in (("JUPYTER_PATH", "share/jupyter"), ("JUPYTER_DATA_DIR", "data"),
                            ("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTER_CONFIG_DIR", "config")):
            mp.setenv(key, str(home / folder))
        yield


@pytest.fixture(scope="module")
def kernel_run(tmp_path_factory):
    """One kernel runs the notebook in a fresh directory, then a search is stopped in it (the Ray the notebook's sweeps
    kept is up already: a kernel and a Ray fewer to start): (notebook, directory, seconds the notebook took, what
    stop_a_search saw)."""
    home, work = tmp_path_factory.mktemp("jupyter"), tmp_path_factory.mktemp("notebook")
    (work / "configs").symlink_to(ROOT / "configs")
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    with jupyter_home(home):
        manager = KernelManager(kernel_name=KERNEL)
        manager.start_kernel(cwd=str(work))
        try:
            started = time.monotonic()
            runner = NotebookClient(notebook, km=manager, timeout=CELL_TIMEOUT_S)  # our kernel: left running
            runner.execute()
            seconds = time.monotonic() - started
            # (runner's client: a second client of this manager would share its session, and the kernel's replies)
            return notebook, work, seconds, stop_a_search(manager, runner.kc, work)
        finally:
            manager.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def executed(kernel_run):
    """The notebook after a real kernel ran it: (notebook, its directory, seconds it took)."""
    return kernel_run[:3]


@pytest.fixture(scope="module")
def stopped(kernel_run):
    """(what the stopped search's cell showed, the error it ended with, the status of a cell run after it, its --out)"""
    return kernel_run[3]


def stop_a_search(manager, client, work: Path) -> tuple:
    """The notebook's stop button (an interrupt to the kernel) once a seed of an hs.search has finished."""
    out = work / "runs" / "stopped"
    cell = client.execute('hs.search(hs.config("configs/quickstart.yaml", "logging.wandb=false"), out="runs/stopped")')
    deadline = time.monotonic() + CELL_TIMEOUT_S
    while not list(out.glob("trials/*/result.json")):  # a seed has finished: stop it now
        assert time.monotonic() < deadline, "no seed finished"
        time.sleep(0.5)
    manager.interrupt_kernel()
    shown, error = [], None
    while True:
        message = client.get_iopub_msg(timeout=CELL_TIMEOUT_S)
        if message["parent_header"].get("msg_id") != cell:
            continue
        content = message["content"]
        shown.append(content.get("text", "") + content.get("data", {}).get("text/plain", ""))
        error = content["ename"] if message["msg_type"] == "error" else error
        if message["msg_type"] == "status" and content["execution_state"] == "idle":
            break
    alive = client.execute_interactive("1 + 1", timeout=60)["content"]["status"]
    return "".join(shown), error, alive, out


def test_the_committed_notebook_is_valid_and_holds_no_outputs():
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)


def code_cells(notebook, *calls: str) -> list:
    return [cell for cell in notebook.cells if cell.cell_type == "code" and any(c in cell.source for c in calls)]


def printed(cell) -> str:
    """What a cell printed (stdout and stderr) and showed as text."""
    texts = [out.get("text", "") for out in cell.outputs if out.output_type == "stream"]
    texts += [out.get("data", {}).get("text/plain", "") for out in cell.outputs if "data" in out]
    return "\n".join(texts)


def test_every_cell_ran_without_error(executed):
    notebook, _, seconds = executed
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code)
    assert not [out for cell in code for out in cell.outputs if out.output_type == "error"]
    print(f"the notebook ran in {seconds:.0f} s")


def test_a_sweep_cell_shows_its_progress_bar_and_its_table_and_no_wall_of_ray_or_wandb_lines(executed):
    notebook, _, _ = executed
    sweeps = code_cells(notebook, "hs.grid(", "hs.search(")
    assert len(sweeps) == 3
    for cell in sweeps:
        kinds = [out.output_type for out in cell.outputs]
        data = [out.data for out in cell.outputs if "data" in out]
        assert any(WIDGET in d for d in data), kinds  # tqdm's notebook bar (ipywidgets: the dev extras)
        assert "<table" in data[-1].get("text/html", "") and kinds[-1] == "execute_result"  # the result, as HTML
        assert not LOG_LINE.findall(printed(cell)), printed(cell)[-3000:]
        streams = "".join(out.text for out in cell.outputs if out.output_type == "stream")
        assert len(streams.splitlines()) <= 2, streams[-3000:]  # a line or two of headsweep's at most


def test_the_bars_end_full_with_the_progress_line_beside_them(executed):
    """The widgets' last state, which the notebook keeps (nbclient stores it): each bar's text is the line the terminal
    shows, and each bar ended green (every member of its sweep finished)."""
    notebook, _, _ = executed
    models = notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"].values()
    texts = [m["state"]["value"].replace("\u2007", " ").strip() for m in models if m["model_name"] == "HTMLModel"]
    for start in ("twice_grid  6/6 trained  0 running  0 failed", "twice_running_mean  2/2 trained",
                  "twice_search  6 trained  0 running  0 failed"):
        assert any(text.startswith(start) for text in texts), texts
    bars = [m["state"] for m in models if m["model_name"] == "FloatProgressModel"]
    assert len(bars) == 3 and all(bar["bar_style"] == "success" for bar in bars), bars


def test_the_training_cell_prints_no_wandb_lines(executed):
    notebook, _, _ = executed
    [cell] = code_cells(notebook, "hs.train(")
    assert not LOG_LINE.findall(printed(cell)), printed(cell)[-3000:]
    assert "<table" in cell.outputs[-1].data["text/html"]


def test_the_figures_are_images(executed):
    notebook, _, _ = executed
    for cell in code_cells(notebook, ".phase_diagram()", ".success_curves()"):
        assert any("image/png" in out.get("data", {}) for out in cell.outputs), cell.outputs


def test_the_output_directories_read_back_here(executed):
    _, work, _ = executed
    out = work / "runs" / "notebook"
    assert isinstance(hs.load(out / "train"), hs.TrainResult)
    grid, mixer = hs.load(out / "grid"), hs.load(out / "running_mean")
    assert len(grid.df) == 6 and grid.failed.empty and len(mixer.df) == 2 and mixer.failed.empty
    assert (out / "running_mean" / "trials").is_dir() and (out / "grid" / "report.html").exists()
    found = hs.load(out / "search")
    assert isinstance(found, hs.SearchResult) and len(found.members) == found.table["seeds"].sum() > 0
    saved = list((out / "running_mean" / "trials").glob("*/config.yaml"))  # the model a cell defined, trained by Ray
    assert len(saved) == 2 and all("name: running_mean" in path.read_text() for path in saved)


def test_a_search_stopped_from_the_notebook_shows_the_table_so_far_and_keeps_what_finished(stopped):
    """The notebook's stop button (an interrupt to the kernel) during hs.search: the cell shows the table so far
    (unfinished slices marked) and ends with a KeyboardInterrupt (Stopped), the kernel lives on, and every seed that
    finished is in the directory, read back by hs.load, none of them marked failed."""
    printed, error, alive, out = stopped
    assert error == "Stopped" and alive == "ok", printed[-3000:]  # sweep.stopping.Stopped, a KeyboardInterrupt
    assert "K*_q [interval]" in printed and "no (open)" in printed, printed[-3000:]
    found = hs.load(out)
    # the seeds that had finished when the table was written (a member of the round may finish a moment after the
    # stop, while the table is written: it is on disk, and a resumed search counts it, not trains it again)
    written = (out / "min_diversity.csv").stat().st_mtime
    trained = found.members[[(out / "trials" / m / "result.json").exists()
                            and (out / "trials" / m / "result.json").stat().st_mtime < written
                            for m in found.members["member"]]]
    assert found.table["seeds"].sum() == len(trained) > 0, found.members[["member", "state"]]  # each finished seed
    assert (trained["state"] != "FAIL").all(), trained[["member", "state"]]  # and none of them marked failed
