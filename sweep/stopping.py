"""Stopping a run by hand: Ctrl-C (SIGINT) and SIGTERM both end as KeyboardInterrupt, so that what finished is
written (the grid's and the search's `finally`) and the command says so in one line (sweep/cli.py), where Ray's own
SIGTERM handler would exit at once. The signal that stopped the run is remembered for that line."""
from __future__ import annotations

import os
import signal
import threading

# Stopping (Ctrl-C, SIGTERM) is one line of ours (sweep/cli.py's main; from Python, a KeyboardInterrupt), not Ray's:
# its C++ handler prints a stack dump for SIGTERM, as for a crash, and Tune's own SIGINT handler prints a
# Tuner.restore() recipe headsweep users do not need. Set on import, before Ray is imported (sweep/cli.py and
# headsweep import this module first); an environment that sets them keeps its own.
os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
os.environ.setdefault("TUNE_DISABLE_SIGINT_HANDLER", "1")

_received: list[str] = []


def on_sigterm() -> None:
    """Make SIGTERM stop the run as Ctrl-C does; again after ray.init, which sets a handler of its own. Only from the
    main thread, as Python allows."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame) -> None:
    _received.append(signal.Signals(signum).name)
    raise KeyboardInterrupt


def stopped_by() -> signal.Signals:
    """The signal that stopped the run: SIGTERM if one came, else SIGINT (Ctrl-C)."""
    return signal.Signals[_received[-1]] if _received else signal.SIGINT


class Stopped(KeyboardInterrupt):
    """A grid or search stopped by hand once what had finished was written: `so_far` is the table it would have
    printed at its end, as it stands (the CLI prints it before its one line; headsweep.grid and .search show it)."""

    def __init__(self, so_far: str):
        super().__init__()
        self.so_far = so_far
