"""Scratch directories of trials killed by SIGKILL: the next trial on the host removes them, never a live process's."""
import os
import signal
import subprocess
import sys
import tempfile

from sweep.storage import copies

CHILD = """
from sweep.storage.copies import scratch_dir
print(scratch_dir(), flush=True)
import time
time.sleep(120)  # until killed
"""


def test_scratch_dirs_of_a_killed_process_are_removed_those_of_live_ones_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # gettempdir() here, TMPDIR in the child
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                             env=os.environ | {"TMPDIR": str(tmp_path)})
    try:
        dead = tmp_path / os.path.basename(child.stdout.readline().strip())
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()  # reaped: a zombie still counts as alive
    mine = copies.scratch_dir()
    other_host = tmp_path / f"{copies.SCRATCH}-{child.pid}-0123abcd-x"  # a pid this host cannot see
    other_host.mkdir()
    assert dead.is_dir() and dead.name.startswith(f"{copies.SCRATCH}-{child.pid}-{copies.HOST_TAG}-")

    copies.WorkingCopies([])  # what a trial opening its members does first
    assert not dead.exists() and mine.is_dir() and other_host.is_dir()
