"""The bucket mirror (sweep/storage/buckets.Mirror) and a trial's working copies (sweep/storage/copies.WorkingCopies)
against a real S3-compatible server on 127.0.0.1 (tests/s3_server.py): what is pushed and pulled, in which order,
what is deleted, and that no credential travels with the pickled filesystem Tune and Ray send to the nodes."""
import os
import pickle
import time

import pytest
import torch

from sweep.storage.buckets import Bucket, Mirror
from sweep.storage.copies import STATE_FILE, WorkingCopies
from tests.s3_server import s3_server


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with s3_server(tmp_path_factory.mktemp("s3") / "moto.log") as server:
        saved = {k: os.environ.get(k) for k in server.credentials}
        os.environ.update(server.credentials)  # where pyarrow's S3 client looks, as on a node
        try:
            yield server
        finally:
            for key, value in saved.items():
                os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)


class Recording:
    """The bucket's filesystem, noting the paths it writes in order."""

    def __init__(self, fs):
        self.fs, self.written = fs, []

    def open_output_stream(self, path):
        self.written.append(path.rsplit("/", 1)[-1])
        return self.fs.open_output_stream(path)

    def __getattr__(self, name):
        return getattr(self.fs, name)


def test_a_mirror_pushes_what_changed_deletes_what_went_and_pulls_what_is_newer(s3, tmp_path):
    bucket = Bucket.parse(s3.uri("mirror"))
    here = Mirror(bucket, tmp_path / "here")
    (here.local / "trials" / "a").mkdir(parents=True)
    (here.local / "trials" / "a" / "metrics.jsonl").write_text('{"step": 1}\n')
    (here.local / "trials" / "a" / "error.txt").write_text("ValueError: once\n")
    (here.local / "config.yaml").write_text("name: x\n")
    (here.local / "results.csv.123-4.partial").write_text("half")  # an atomic write in progress: never sent
    assert here.push() == 3 and here.push() == 0  # unchanged files are not sent twice
    assert s3.keys("mirror") == ["config.yaml", "trials/a/error.txt", "trials/a/metrics.jsonl"]

    (here.local / "trials" / "a" / "error.txt").unlink()  # a later attempt finished: its error goes from the bucket
    time.sleep(0.01)
    (here.local / "trials" / "a" / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    assert here.push(under="trials") == 2
    assert s3.keys("mirror") == ["config.yaml", "trials/a/metrics.jsonl"]

    there = Mirror(bucket, tmp_path / "there")
    (there.local / "trials" / "stale").mkdir(parents=True)
    (there.local / "trials" / "stale" / "result.json").write_text("{}")
    assert there.pull(skip=lambda path: path.name == "config.yaml", prune=True) == 1
    assert (there.local / "trials" / "a" / "metrics.jsonl").read_text().count("step") == 2
    assert not (there.local / "config.yaml").exists() and \
        not (there.local / "trials" / "stale" / "result.json").exists()
    assert there.pull() == 1  # only the file the skip held back


def test_a_members_files_reach_the_bucket_before_its_state_and_its_state_before_its_result(s3, tmp_path):
    bucket = Bucket.parse(s3.uri("order"))
    copies = WorkingCopies([{"point": {"seed": 0}, "dir": bucket.child("trials", "seed=0").uri}])
    recording = copies.mirrors[0].bucket.__dict__["filesystem"] = Recording(bucket.filesystem)
    member = copies.mirrors[0].local
    for name in ("result.json", "metrics.jsonl", "attention.npz", "config.yaml"):
        (member / name).write_text(name)
    copies.save({0: {"step": 50, "weights": torch.ones(2)}})
    assert recording.written == ["attention.npz", "config.yaml", "metrics.jsonl", STATE_FILE, "result.json"]
    copies.close()
    assert not member.exists()  # the scratch copy is gone, its files are in the bucket


def test_a_retry_finds_what_an_earlier_attempt_left_and_a_final_state_removes_the_checkpoint(s3):
    place = Bucket.parse(s3.uri("retry")).child("trials", "seed=0").uri
    first = WorkingCopies([{"point": {"seed": 0}, "dir": place}])
    (first.mirrors[0].local / "metrics.jsonl").write_text('{"step": 50}\n')
    first.save({0: {"step": 50, "weights": torch.arange(3.0)}})
    first.close(failed=True)  # the worker died after its checkpoint

    retry = WorkingCopies([{"point": {"seed": 0}, "dir": place}])
    [(index, state)] = retry.saved().items()
    assert index == 0 and state["step"] == 50 and torch.equal(state["weights"], torch.arange(3.0))
    assert retry.members[0]["dir"] == str(retry.mirrors[0].local)  # it trains in its local copy
    retry.save({0: {"step": 400, "final": True}})
    retry.close()
    assert s3.keys("retry") == ["trials/seed=0/metrics.jsonl"]


def test_no_credential_travels_with_a_pickled_bucket_or_filesystem(s3):
    bucket = Bucket.parse(s3.uri("pickled"))
    bucket.filesystem.get_file_info(bucket.name)  # used once, so credentials were resolved
    sent = pickle.dumps(bucket) + pickle.dumps(bucket.filesystem)
    assert s3.secret_key.encode() not in sent and s3.access_key.encode() not in sent
