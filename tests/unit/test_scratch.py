"""Private directories of processes killed by SIGKILL (sweep/storage/scratch.py): the next trial on the host removes
them, never a live process's or another host's."""
import os
import signal
import subprocess
import sys
import tempfile

from sweep.storage import copies, scratch

CHILD = """
from sweep.storage.scratch import new_dir
print(new_dir(), flush=True)
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
    mine = scratch.new_dir()
    other_host = tmp_path / f"{scratch.SCRATCH}-{child.pid}-0123abcd-x"  # a pid this host cannot see
    other_host.mkdir()
    assert dead.is_dir() and dead.name.startswith(f"{scratch.SCRATCH}-{child.pid}-{scratch.HOST_TAG}-")

    copies.WorkingCopies([])  # what a trial opening its members does first
    assert sorted(tmp_path.iterdir()) == sorted([mine, other_host])
