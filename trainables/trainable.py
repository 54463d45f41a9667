"""Ray Tune entry point: a trial's dict -> configs -> train(), reporting and checkpointing through ray.tune.

The only module of trainables/ that imports ray. A trial carries a list of members (today one; later several packed
into one process), each with its sweep point and an absolute output directory; results stay one per member.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import torch
from ray import tune

from trainables import config
from trainables.logger import trial_logger
from trainables.train import save, train

STATE_FILE = "state.pt"


class TuneSink:
    """Mirrors each evaluation to tune.report, attaching the checkpoint staged just before it (if any)."""

    def __init__(self, member: int):
        self.member, self.staged = member, None

    def stage(self, state: dict) -> None:
        """train()'s on_checkpoint: write the state where the next report picks it up."""
        self.staged = tempfile.TemporaryDirectory(prefix="headsweep-ckpt-")
        torch.save({"member": self.member, "state": state}, Path(self.staged.name) / STATE_FILE)

    def log(self, metrics: dict[str, float], step: int) -> None:
        checkpoint = tune.Checkpoint.from_directory(self.staged.name) if self.staged else None
        tune.report(metrics | {"step": step, "member": self.member}, checkpoint=checkpoint)  # Ray copies it
        if self.staged:
            self.staged.cleanup()
            self.staged = None

    def close(self) -> None:
        if self.staged:
            self.staged.cleanup()


def run_trial(params: dict, base: dict, plan: dict[str, list[dict]]) -> None:
    """params = {"trial": id}; plan[id] = [{"point": {dotted key: value}, "dir": absolute path}, ...] (the members);
    base: the config dict every point is applied to."""
    resume = _last_checkpoint()
    for index, member in enumerate(plan[params["trial"]]):
        out = Path(member["dir"])
        finished = out / "result.json"
        if finished.exists():  # finished in an earlier attempt or run: never trained twice
            tune.report(json.loads(finished.read_text()) | {"member": index})
            continue
        cfg = config.with_point(base, member["point"])
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.yaml").write_text(config.to_yaml(cfg))
        state = resume["state"] if resume and resume["member"] == index else None
        _keep_records_until(out / "metrics.jsonl", state["step"] if state else 0)
        sink = TuneSink(index)
        with trial_logger(cfg, out, sink, job_type=member.get("job_type", "grid"), name=out.name) as logger:
            result = train(cfg, logger, resume=state, on_checkpoint=sink.stage)
            if state:  # say so in the result: this member continued from a checkpoint after a crash
                result.metrics["resumed_from_step"] = state["step"]
            logger.summary(result.metrics)
        save(result, out)
        tune.report(result.metrics | {"member": index})


def _last_checkpoint() -> dict | None:
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as directory:
        return torch.load(Path(directory) / STATE_FILE, weights_only=False)  # our own file


def _keep_records_until(path: Path, step: int) -> None:
    """Drop jsonl records past the checkpoint a retry resumes from, so each step is logged once."""
    if path.exists():
        lines = path.read_text().splitlines(keepends=True)
        path.write_text("".join(line for line in lines if json.loads(line)["step"] <= step))
