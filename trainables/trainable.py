"""Ray Tune entry point: a trial's members -> configs -> train_members(), reporting and checkpointing through ray.tune.

The only module of trainables/ that imports ray. A trial carries a list of members (one, or several packed), each
with its sweep point and an absolute output directory. Members of one shape train as one population
(population.pack_key) when their model vectorizes, the others one group after another; results, directories, checkpoints and W&B runs stay one
per member, so a user sees no difference but speed.
"""
from __future__ import annotations

import json
import tempfile
from contextlib import ExitStack
from pathlib import Path

import torch
from ray import tune

from trainables import config
from trainables.io import read_json, read_jsonl
from trainables.logger import trial_logger
from trainables.models import MODELS
from trainables.population import pack_key
from trainables.train import save, train_members

STATE_FILE = "state.pt"


class Reporter:
    """The trial's one channel to Tune: every member's evaluations and results as tune.report, with the latest
    checkpoint of the members in training (staged by train_members) attached to the next report."""

    def __init__(self):
        self.staged = None

    def stage(self, states: dict[int, dict]) -> None:
        """Write the members' states where the next report picks them up; a member's final state is left out (its
        result.json follows at once, and a retry never resumes a finished member)."""
        states = {index: state for index, state in states.items() if not state.get("final")}
        if not states:
            return
        self.staged = tempfile.TemporaryDirectory(prefix="headsweep-ckpt-")
        torch.save({"members": states}, Path(self.staged.name) / STATE_FILE)

    def report(self, metrics: dict, member: int) -> None:
        checkpoint = tune.Checkpoint.from_directory(self.staged.name) if self.staged else None
        tune.report(metrics | {"member": member}, checkpoint=checkpoint)  # Ray copies the checkpoint
        if self.staged:
            self.staged.cleanup()
            self.staged = None

    def sink(self, member: int) -> "MemberSink":
        return MemberSink(self, member)


class MemberSink:
    """A member's Logger sink that mirrors its evaluations to Tune through the trial's Reporter."""

    def __init__(self, reporter: Reporter, member: int):
        self.reporter, self.member = reporter, member

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.reporter.report(metrics | {"step": step}, self.member)

    def close(self) -> None:
        pass


def run_trial(params: dict, base: dict, plan: dict[str, list[dict]]) -> None:
    """params = {"trial": id} with plan[id] its members, or {"trial": id, "members": [...]} (a search's trials,
    decided as it goes); a member is {"point": {dotted key: value}, "dir": absolute path, "job_type": verb}; base:
    the config dict every point is applied to."""
    members = params.get("members") or plan[params["trial"]]
    saved = _last_checkpoint()
    reporter = Reporter()
    cfgs: dict[int, config.Config] = {}
    groups: dict[tuple, list[int]] = {}
    for index, member in enumerate(members):
        finished = read_json(Path(member["dir"]) / "result.json")
        if finished is not None:  # finished in an earlier attempt or run: never trained twice
            reporter.report(finished, index)
            continue
        cfg = cfgs[index] = config.with_point(base, member["point"])
        step = saved[index]["step"] if index in saved else 0
        alone = None if MODELS[cfg.model.name].vectorize else index  # a model that does not vectorize: one by one
        groups.setdefault((pack_key(cfg), step, alone), []).append(index)
    for indices in groups.values():
        _train_group(members, {i: cfgs[i] for i in indices}, saved, reporter)


def _train_group(members: list[dict], group: dict[int, config.Config], saved: dict, reporter: Reporter) -> None:
    """Train these members (index -> config; one shape, one step) as one population, each logging to its own
    directory."""
    indices = list(group)
    with ExitStack() as contexts:
        cfgs, loggers, resumes = [], [], []
        for index, cfg in group.items():
            member, out = members[index], Path(members[index]["dir"])
            out.mkdir(parents=True, exist_ok=True)
            (out / "config.yaml").write_text(config.to_yaml(cfg))
            resume = saved.get(index)
            _keep_records_until(out / "metrics.jsonl", resume["step"] if resume else 0)
            loggers.append(contexts.enter_context(trial_logger(cfg, out, reporter.sink(index),
                                                               job_type=member.get("job_type", "grid"), name=out.name)))
            cfgs.append(cfg)
            resumes.append(resume)

        def finished(k: int, result) -> None:
            index = indices[k]
            if resumes[k]:  # say so in the result: this member continued from a checkpoint after a crash
                result.metrics["resumed_from_step"] = resumes[k]["step"]
            loggers[k].summary(result.metrics)
            loggers[k].close()
            save(result, members[index]["dir"])
            reporter.report(result.metrics, index)

        train_members(cfgs, loggers, resumes, on_result=finished,
                      on_checkpoint=lambda staged: reporter.stage({indices[k]: s for k, s in staged.items()}))


def _last_checkpoint() -> dict[int, dict]:
    """member index -> its training state in the trial's latest checkpoint ({} without one)."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return {}
    with checkpoint.as_directory() as directory:
        saved = torch.load(Path(directory) / STATE_FILE, weights_only=False)  # our own file
    return saved["members"] if "members" in saved else {saved["member"]: saved["state"]}  # the one-member format too


def _keep_records_until(path: Path, step: int) -> None:
    """Drop jsonl records past the checkpoint a retry resumes from, so each step is logged once."""
    if path.exists():
        path.write_text("".join(f"{json.dumps(record)}\n" for record in read_jsonl(path) if record["step"] <= step))
