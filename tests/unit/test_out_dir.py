"""A driver's local copy of a bucket's place (sweep/storage/out_dir.py): its own, never another live driver's.

The bucket is a local directory served through pyarrow's local filesystem, as the S3 one would be.
"""
import subprocess
import sys
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from sweep.storage import buckets, scratch
from sweep.storage.out_dir import CACHE_VAR, OutDir

ROOT = Path(__file__).resolve().parents[2]
URI = "s3://sweeps/run"
# A second driver: another process that opens the same place, then exits (its copy stays, as a finished driver's).
DRIVER = """
import sys
import pyarrow.fs as pafs
from sweep.storage import buckets
buckets.Bucket.connect = lambda self, timeout_s=None: pafs.SubTreeFileSystem(sys.argv[1], pafs.LocalFileSystem())
from sweep.storage.out_dir import OutDir
print(OutDir.open(sys.argv[2]).local)
"""


@pytest.fixture
def bucket(tmp_path, monkeypatch) -> Path:
    """The place s3://sweeps/run, holding what a sweep pushed: its config."""
    served = tmp_path / "s3"
    (served / "sweeps" / "run").mkdir(parents=True)
    (served / "sweeps" / "run" / "config.yaml").write_text("name: x\n")
    monkeypatch.setattr(buckets.Bucket, "connect",
                        lambda self, timeout_s=None: pafs.SubTreeFileSystem(str(served), pafs.LocalFileSystem()))
    monkeypatch.setenv(CACHE_VAR, str(tmp_path / "cache"))
    return served


def test_two_drivers_of_one_place_on_one_machine_each_work_in_a_copy_of_their_own(bucket, tmp_path):
    """[house] item 6: the drivers shared one copy, and the second's start-up (a pull that drops what the bucket does
    not have) deleted what the first had written and not pushed yet. A finished driver's copy is reused by the next
    driver (nothing pulled twice); the others of drivers that are gone are removed, a live one's never."""
    first = OutDir.open(URI)
    unpushed = first.local / "ray" / "grid_plan.json"  # written by the first driver, not yet in the bucket
    unpushed.parent.mkdir()
    unpushed.write_text("{}")

    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(bucket), URI], cwd=ROOT, stdout=subprocess.PIPE,
                              text=True)
    second = Path(driver.communicate()[0].strip())
    assert driver.returncode == 0
    assert unpushed.read_text() == "{}" and (first.local / "config.yaml").exists()
    assert second != first.local and (second / "config.yaml").exists() and not (second / "ray").exists()

    copies = first.local.parent
    earlier = copies / f"{scratch.SCRATCH}-{driver.pid}-{scratch.HOST_TAG}-earlier"  # another gone driver's copy
    elsewhere = copies / f"{scratch.SCRATCH}-{driver.pid}-0123abcd-x"  # a driver on another host sharing the cache
    for gone in (earlier, elsewhere):
        (gone / "config.yaml").parent.mkdir()
        (gone / "config.yaml").write_text("name: x\n")
    kept = {(gone / "config.yaml").stat().st_ino for gone in (second, earlier)}
    third = OutDir.open(URI)
    assert third.local.name.startswith(scratch.prefix())
    assert (third.local / "config.yaml").stat().st_ino in kept  # a gone driver's file, not downloaded again
    assert sorted(copies.iterdir()) == sorted([first.local, third.local, elsewhere])  # one gone copy taken, one removed
    assert unpushed.read_text() == "{}"
