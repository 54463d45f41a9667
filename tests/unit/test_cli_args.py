"""Command-line parsing: overrides before or after the options, stray arguments refused with exit code 2."""
import pytest

from sweep import cli
from tests.conftest import CONFIGS


@pytest.mark.parametrize("argv", [
    ["search", "c.yaml", "seed=1", "--out", "d", "search.budget.per_slice=3"],
    ["search", "c.yaml", "--out", "d", "seed=1", "search.budget.per_slice=3"],
])
def test_overrides_may_come_before_or_after_the_options(argv):
    args = cli.parse(argv)
    assert sorted(args.overrides) == ["search.budget.per_slice=3", "seed=1"] and str(args.out) == "d"


@pytest.mark.parametrize("argv", [
    ["train", "c.yaml", "--out", "d", "--bogus"],
    ["train", "c.yaml", "--out", "d", "stray"],
    ["report", "d", "seed=1"],  # report takes no overrides
])
def test_anything_else_is_a_one_line_error_with_exit_code_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.parse(argv)
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


@pytest.mark.parametrize("where", ["a_file", "a_file/sub", "/proc/headsweep"])
def test_an_out_that_is_a_file_or_cannot_be_created_is_one_line_exit_2(tmp_path, capsys, where):
    (tmp_path / "a_file").write_text("keep me")
    out = tmp_path / where
    assert cli.main(["train", str(CONFIGS / "debug.yaml"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("headsweep: error: --out: ") and err.count("\n") == 1, err
    assert (tmp_path / "a_file").read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


@pytest.mark.parametrize("verb, config_file, override", [
    ("train", "debug.yaml", "sweep.pack=2"),
    ("train", "debug.yaml", "search.success.threshold=2"),
    ("grid", "debug_grid.yaml", "search.success.threshold=0.5"),
    ("search", "debug_search.yaml", "sweep.pack=-1"),
])
def test_an_override_of_a_section_the_verb_does_not_read_is_one_line_exit_2(tmp_path, capsys, verb, config_file,
                                                                         override):
    """Nothing would read it: accepted, it would be silently ignored (a search ran whole with sweep.pack=-1)."""
    out = tmp_path / "out"
    assert cli.main([verb, str(CONFIGS / config_file), override, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"headsweep: error: {override.split('=')[0]}: ") and err.count("\n") == 1, err
    assert not out.exists()


RUN_A_VERB = """
import atexit, concurrent.futures, sys, threading, time
from pathlib import Path
from sweep import cli

POOL = concurrent.futures.ThreadPoolExecutor(2)  # alive to the end: only threading's exit hooks stop its workers

def verb():
    out = Path(sys.argv[1])
    def late():
        time.sleep(0.3)
        (out / "thread").write_text("joined")
    threading.Thread(target=late).start()  # a non-daemon thread still running when the verb returns
    POOL.submit(lambda: None).result()  # idle workers of a live executor (torch.compile keeps one)
    atexit.register(lambda: (out / "atexit").write_text("ran"))
    print("printed, not flushed", end="")
    return 3

cli.main = verb
cli.run()
"""


def test_the_command_exits_at_once_but_joins_threads_runs_exit_handlers_and_flushes(tmp_path):
    """`headsweep` skips the interpreter's teardown, not what it does that matters (and exits with an idle
    ThreadPoolExecutor left behind, as a compiled run leaves one: it once waited for it forever)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", RUN_A_VERB, str(tmp_path)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 3 and proc.stdout == "printed, not flushed", proc.stderr
    assert (tmp_path / "thread").read_text() == "joined" and (tmp_path / "atexit").read_text() == "ran"


@pytest.mark.parametrize("unbuffered", ["1", ""], ids=["unbuffered", "buffered"])
def test_a_reader_that_went_away_ends_the_command_quietly(unbuffered):
    """`headsweep list | head`: stdout's reader is gone before the command writes (or flushes) its last line."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    read_end, write_end = os.pipe()
    os.close(read_end)  # like `head` after its lines: every write to the pipe now fails with EPIPE
    env = os.environ | {"PYTHONUNBUFFERED": unbuffered}
    try:
        proc = subprocess.run([str(Path(sys.executable).parent / "headsweep"), "list"], stdout=write_end,
                              stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    finally:
        os.close(write_end)
    assert proc.returncode == cli.EXIT_READER_GONE and proc.stderr == "", proc.stderr


def test_sigterm_stops_a_verb_as_ctrl_c_does_in_one_line_with_exit_143(monkeypatch, capsys, tmp_path):
    """A scheduler's SIGTERM (sweep/stopping.py) ends a verb as a KeyboardInterrupt, so that what finished is written,
    and the command says so in one line. With a real grid and its local Ray: Ctrl-C in tests/integration/test_grid.py,
    SIGTERM in tests/e2e/test_slurm.py (a requeued job)."""
    import os
    import signal
    import time

    from sweep import stopping

    def grid(args):  # the verb, stopped once its handler is in place (a grid sets it again after ray.init)
        stopping.on_sigterm()
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # the handler raises first
        raise AssertionError("SIGTERM did not stop the verb")

    monkeypatch.setattr(cli, "_grid", grid)
    monkeypatch.setattr(stopping, "_received", [])
    previous = signal.getsignal(signal.SIGTERM)  # the test process's own, put back below
    try:
        code = cli.main(["grid", str(CONFIGS / "debug_grid.yaml"), "--out", str(tmp_path / "out")])
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert code == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("headsweep: stopped (SIGTERM); ")
    assert "run the same command again to resume" in err
