"""`headsweep` commands started from a warm interpreter, for the tests that run the CLI many times.

A multiprocessing fork server imports the libraries every command imports first (torch, pandas, matplotlib, scipy,
Optuna: 1-1.8 s of each command's CPU on a 2-core VM, of 5.8 s for a debug grid and 2.7 s for a command refused at its
config; bench/warm_cli.py; torch._dynamo no more: headsweep's optimizers never import it, trainables/optim.py),
and each command is a fresh process forked from it that runs `sweep.cli.run()` as
the console script does: its own argv, environment, working directory, sys.path, stdin (/dev/null), stdout and
stderr, its exit code, and the interpreter's exit (threads joined, exit handlers run). Preloaded is only what reads
nothing of a command's own environment when imported: not Ray (ray_constants reads RAY_* variables at import, and a
command's environment must decide them), not W&B, nothing of headsweep's own (a plugin installed during the session
must be found as a fresh process finds it). A command whose environment differs from the server's (SERVER_ENV) in a
variable the interpreter or a preloaded library reads when starting (COLD_VARS: PYTHONPATH, HOME, ...) runs as a plain
subprocess of the `headsweep` executable, as do the tests that signal or kill a driver.
"""
from __future__ import annotations

import json
import multiprocessing
import multiprocessing.forkserver
import os
import subprocess
import sys
import tempfile
import threading
import traceback
import warnings
from pathlib import Path

HEADSWEEP = str(Path(sys.executable).parent / "headsweep")
PRELOAD = ["torch", "pandas", "optuna", "scipy.stats", "matplotlib.figure",
           "matplotlib.backends.backend_agg", "omegaconf", "yaml",
           __name__]  # this module too: each command's target is unpickled from it
# Variables (by prefix) that the interpreter, torch, matplotlib or the rest of PRELOAD read when started or imported;
# not PYTHONBREAKPOINT, read at each breakpoint() (a Ray driver in a test's own process sets it in os.environ).
# (TORCHINDUCTOR_CACHE_DIR, which importing torch._dynamo sets and reads, is set once in tests/conftest.py.)
COLD_VARS = ("PYTHON", "HOME", "XDG_", "MPL", "OMP_", "MKL_", "TORCH", "PYTORCH", "CUDA", "LD_")
READ_WHEN_USED = {"PYTHONBREAKPOINT"}
SERVER_ENV = dict(os.environ)  # the server's: os.environ when the tests were collected, before any test changed it
_context = None
forked = 0  # commands forked from the server so far in this process (tests/integration/test_warm_cli.py)
_console_path: list[str] = []  # sys.path of the console script: its folder, then what the interpreter adds


def run(args: list[str], env: dict[str, str], timeout: float, cwd: str | os.PathLike | None = None
        ) -> subprocess.CompletedProcess:
    """subprocess.run([HEADSWEEP, *args], capture_output=True, text=True, env=env, stdin=DEVNULL, timeout=timeout,
    cwd=cwd), forked from the warm server instead of started from scratch, unless `env` changes a COLD_VARS
    variable."""
    changed = {key for key in env.keys() | SERVER_ENV.keys() if env.get(key) != SERVER_ENV.get(key)}
    if cold := sorted(key for key in changed if key.startswith(COLD_VARS) and key not in READ_WHEN_USED):
        # Shown in pytest's warnings summary: a variable that drifts in os.environ makes every later command cold.
        warnings.warn(f"headsweep {args[0] if args else ''} started cold: {', '.join(cold)} differ from the fork "
                      "server's environment", stacklevel=3)
        return cold_run(args, env, timeout, cwd)
    global forked
    forked += 1
    argv = [HEADSWEEP, *args]
    with tempfile.TemporaryDirectory(prefix="headsweep-cli-") as scratch:
        out, err = Path(scratch) / "stdout", Path(scratch) / "stderr"
        command = server().Process(target=_command,
                                   args=(argv, env, str(cwd or os.getcwd()), _console_path, str(out), str(err)))
        command.start()
        command.join(timeout)
        if command.exitcode is None:  # as subprocess.run: killed, then TimeoutExpired with what it wrote
            command.kill()
            command.join()
            raise subprocess.TimeoutExpired(argv, timeout, output=out.read_text(), stderr=err.read_text())
        return subprocess.CompletedProcess(argv, command.exitcode, out.read_text(), err.read_text())


def cold_run(args: list[str], env: dict[str, str], timeout: float, cwd: str | os.PathLike | None = None
             ) -> subprocess.CompletedProcess:
    """The `headsweep` executable started from scratch, its output captured, without a terminal."""
    return subprocess.run([HEADSWEEP, *args], capture_output=True, text=True, timeout=timeout, env=env,
                          stdin=subprocess.DEVNULL, cwd=cwd)


def server() -> multiprocessing.context.BaseContext:
    """The fork server's context, the server started on first use with SERVER_ENV (it inherits os.environ, which a
    test may have changed for itself)."""
    global _context
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        the_tests = dict(os.environ)
        os.environ.clear()
        os.environ.update(SERVER_ENV)
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            os.environ.clear()
            os.environ.update(the_tests)
        _console_path[:] = [str(Path(HEADSWEEP).parent)] + json.loads(subprocess.check_output(
            [sys.executable, "-c", "import json, sys; print(json.dumps(sys.path[1:]))"], cwd="/", env=SERVER_ENV))
        _context = context
    return _context


def _command(argv: list[str], env: dict, cwd: str, path: list[str], out: str, err: str) -> None:
    """In the forked process: become the command, run it, exit as the interpreter would."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.path[:], sys.argv = path, argv
    for fd, file in ((1, out), (2, err)):
        opened = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(opened, fd)
        os.close(opened)
    code = 1
    try:
        from sweep.cli import run as console_script
        console_script()  # exits the process itself when main() returns
    except SystemExit as stop:  # argparse's exit 2, and any sys.exit: as the interpreter ends on it
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    threading._shutdown()
    import atexit
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
