"""Where a trial keeps its members' files and checkpoints: in place (a directory every node mounts; Tune holds the
checkpoints), or in local working copies of their places in a bucket (buckets.py).

In a bucket, each member's checkpoint is a file of its own, `state.pt` beside its metrics, pushed right after them:
not a Tune checkpoint, because Tune's experiment state reaches object storage later than the checkpoints it names,
and a driver killed in between left a resumed grid asking for a checkpoint Tune had already deleted (seen here, with
`checkpoint_config.num_to_keep=1`). A member's own files are pushed in order, so its state.pt is never ahead of the
metrics.jsonl it continues.

Working copies and checkpoints on their way to Tune are private directories of the trial's process in the temp dir
(scratch.py): a trial killed by SIGKILL (or the OOM killer) never removes its own, so the next trial to open its
members on that host removes those of processes that are gone.
"""
from __future__ import annotations

import shutil
import tempfile
from contextlib import nullcontext, suppress
from pathlib import Path, PurePosixPath

import torch
from ray import tune

from sweep.storage import scratch
from sweep.storage.buckets import Bucket, Mirror, is_remote

STATE_FILE = "state.pt"
PUSH_ORDER = {STATE_FILE: 1, "result.json": 2}  # a member's other files first, then its state, its result last


class InPlace:
    """Members that write straight into their directories; checkpoints reported to Tune, one file per trial."""

    def __init__(self, members: list[dict]):
        self.members = members
        scratch.remove_leftovers()

    def saved(self) -> dict[int, dict]:
        """member index -> its training state in the trial's latest checkpoint ({} without one)."""
        checkpoint = tune.get_checkpoint()
        if checkpoint is None:
            return {}
        with checkpoint.as_directory() as directory:
            return load_state(Path(directory) / STATE_FILE)

    def save(self, states: dict[int, dict]) -> None:
        """Report the members' training states (member index -> state) as the trial's checkpoint, once all of them
        have logged the evaluation it follows; a member's final state is left out (its result.json follows at once,
        and a retry never resumes a finished member)."""
        states = {index: state for index, state in states.items() if not state.get("final")}
        if not states:
            return
        with tempfile.TemporaryDirectory(prefix=scratch.prefix("ckpt-")) as directory:
            torch.save({"members": states}, Path(directory) / STATE_FILE)
            step = max(state["step"] for state in states.values())
            # Ray copies the directory before report returns
            tune.report({"checkpoint_step": step}, checkpoint=tune.Checkpoint.from_directory(directory))

    def push(self, *indices: int) -> None:
        """Nothing to send: the files are where they belong."""

    def close(self, failed: bool = False) -> None:
        pass


class WorkingCopies(InPlace):
    """Members whose places are in a bucket: each trains in a scratch directory pulled from its place now (what
    earlier attempts left: result.json, metrics.jsonl, state.pt, the W&B run) and pushed back as it goes."""

    def __init__(self, members: list[dict]):
        self.mirrors = {index: Mirror(Bucket.parse(member["dir"], "dir"), scratch.new_dir())
                        for index, member in enumerate(members)}
        try:
            for mirror in self.mirrors.values():
                mirror.pull()
        except BaseException:
            self.close()
            raise
        super().__init__([m | {"dir": str(self.mirrors[i].local)} for i, m in enumerate(members)])

    def saved(self) -> dict[int, dict]:
        return {index: state for index, mirror in self.mirrors.items() if (mirror.local / STATE_FILE).exists()
                for state in load_state(mirror.local / STATE_FILE).values()}  # one state a file, whatever its index

    def save(self, states: dict[int, dict]) -> None:
        """Each member's state into its state.pt, pushed after the files it continues; a final state removes it."""
        for index, state in states.items():
            path = self.mirrors[index].local / STATE_FILE
            if state.get("final"):
                path.unlink(missing_ok=True)
            else:
                torch.save({"member": index, "state": state}, path)
        self.push(*states)

    def push(self, *indices: int) -> None:
        """Send the working copies of these members (all without indices) to their places."""
        for index in indices or self.mirrors:
            self.mirrors[index].push(order=lambda path: PUSH_ORDER.get(PurePosixPath(path).name, 0))

    def close(self, failed: bool = False) -> None:
        """Push every copy once more (after a failure, what it wrote is still worth keeping: error.txt, finished
        members) and remove them."""
        try:
            with suppress(OSError) if failed else nullcontext():
                self.push()
        finally:
            for mirror in self.mirrors.values():
                shutil.rmtree(mirror.local, ignore_errors=True)


def open_members(members: list[dict]) -> InPlace:
    """WorkingCopies for members in a bucket, else InPlace (one sweep's members are all one or the other)."""
    return WorkingCopies(members) if members and is_remote(members[0]["dir"]) else InPlace(members)


def load_state(path: Path) -> dict[int, dict]:
    """member index -> training state, from a checkpoint file. Tensors and plain data only (weights_only): a file
    that would run code when unpickled is refused, whoever put it in the output directory."""
    saved = torch.load(path, weights_only=True)
    return saved["members"] if "members" in saved else {saved["member"]: saved["state"]}  # the one-member format too
