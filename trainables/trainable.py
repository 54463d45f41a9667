"""Ray Tune entry point: a trial's members -> configs -> train_members(), checkpointing through what opened them.

The only module of trainables/ that imports ray. A trial carries a list of members (one, or several packed), each
with its sweep point and its place: an absolute output directory, or an s3:// URI. Where a place lives is the sweep's
business (sweep/storage/): the sweep binds `open_members` (sweep/tuner.py), and the trial uses only what
OpenedMembers promises. Members of one shape train as one population (population.pack_key) when their model
vectorizes, the others one group after another; results, directories, checkpoints and W&B runs stay one per member,
so a user sees no difference but speed.

Metrics reach the driver through the members' files (metrics.jsonl, result.json: the source of truth), not through
Tune: a `tune.report` blocks the trial until the driver has fetched it, which cost a 156-point grid of one-step
members a quarter of its Tune run. Tune gets one result per trial.
"""
from __future__ import annotations

import json
import os
from contextlib import ExitStack
from pathlib import Path
from typing import Callable, Protocol

from ray import tune

from trainables import config, plugins as registered_plugins
from trainables.io import ERROR_FILE, atomic_write, read_json, read_jsonl
from trainables.logger import member_logger
from trainables.models import MODELS
from trainables.population import pack_key
from trainables.stopper import NEVER, Stopper
from trainables.train import save, train_members


class OpenedMembers(Protocol):
    """A trial's members opened where they can train: what run_trial needs of the sweep's storage."""

    members: list[dict]  # the members as given, each "dir" now a local directory it writes into

    def saved(self) -> dict[int, dict]:
        """member index -> its training state at its latest checkpoint (a member without one starts at step 0)."""

    def save(self, states: dict[int, dict]) -> None:
        """Checkpoint these members' training states (member index -> state; a state with "final" ends one)."""

    def push(self, *indices: int) -> None:
        """Send these members' files (all without indices) to their places (nothing to do where they are written
        in place)."""

    def close(self, failed: bool = False) -> None:
        """The trial has ended (`failed`: with an exception): send what is worth keeping, remove what is not."""


MembersOpener = Callable[[list[dict]], OpenedMembers]

# Set by W&B in a process that has used it (a notebook's kernel, a shell's Python that ran `ray start`) to share its
# service with the process's children, Ray's workers among them. A trial must not share it: a worker killed mid-run
# leaves its run "in use" there, and the member's retry cannot open it again. What the worker inherited is known at
# import (before any W&B use in this process); a service this process started later is its own and stays.
WANDB_SERVICE_VAR = "WANDB_SERVICE"
INHERITED_WANDB_SERVICE = os.environ.get(WANDB_SERVICE_VAR)


def drop_inherited_wandb_service() -> None:
    """Make this trial's W&B runs start a service of this process (W&B's default without the variable)."""
    if INHERITED_WANDB_SERVICE is not None and os.environ.get(WANDB_SERVICE_VAR) == INHERITED_WANDB_SERVICE:
        del os.environ[WANDB_SERVICE_VAR]


def run_trial(params: dict, base: dict, plan: dict[str, list[dict]], open_members: MembersOpener,
              stopper_of: Callable[[list[dict]], Stopper] = lambda members: NEVER, plugins: tuple = ()) -> None:
    """params = {"trial": id} with plan[id] its members, or {"trial": id, "members": [...]} (a search's trials,
    decided as it goes); a member is {"point": {dotted key: value}, "dir": absolute path or s3:// URI, "job_type":
    verb} and whatever else its sweep gives it (the rule of its verdict); base: the config dict every point is
    applied to; open_members: the sweep's storage (sweep.storage.copies.open_members); stopper_of: members -> their
    Stopper (the sweep binds its verdict rule's, sweep/verdicts.py), else they train to their end; plugins: the tasks
    and models the driver registered (trainables/plugins.py), shipped by value."""
    drop_inherited_wandb_service()
    registered_plugins.adopt(plugins)  # before any name is resolved: the names pick them here as in the driver
    files = open_members(params.get("members") or plan[params["trial"]])
    members, failed = files.members, True
    try:
        saved = files.saved()
        stopper = stopper_of(members)
        cfgs: dict[int, config.Config] = {}
        groups: dict[tuple, list[int]] = {}
        for index, member in enumerate(members):
            finished = read_json(Path(member["dir"]) / "result.json")
            if finished is not None:  # finished in an earlier attempt or run: never trained twice
                stopper.settle(index, finished)
                continue
            cfg = cfgs[index] = config.with_point(base, member["point"])
            step = saved[index]["step"] if index in saved else 0
            alone = None if MODELS[cfg.model.name].vectorize else index  # a model that does not vectorize: one by one
            groups.setdefault((pack_key(cfg), step, alone), []).append(index)
        for indices in groups.values():  # one after another: a group's results may decide a later one's verdicts
            _train_group(files, {i: cfgs[i] for i in indices}, saved, stopper)
        # One result per trial, so that Tune has one (it prints an empty "Last result" line for a trial without any).
        tune.report({"members": len(members), "trained": len(cfgs)})
        failed = False
    except Exception as error:
        _record_error(members, error)
        raise  # Tune retries the trial (sweep.max_failures), else records it as failed
    finally:
        files.close(failed)


def _record_error(members: list[dict], error: Exception) -> None:
    """Write the error beside every member left without a result (ERROR_FILE), where a search reads why a candidate
    failed. A later attempt that finishes removes it."""
    text = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[-1]}"[:500]
    for member in members:
        out = Path(member["dir"])
        if not (out / "result.json").exists():
            try:
                atomic_write(out / ERROR_FILE, text + "\n")
            except OSError:  # the directory itself may be what failed
                pass


def _train_group(files: OpenedMembers, group: dict[int, config.Config], saved: dict, stopper: Stopper) -> None:
    """Train these members (index -> config; one shape, one step) as one population, each logging to its own
    directory (files.members); `stopper` is that of all the trial's members (by their index). Checkpoints go to
    `files`, and a finished member's files are pushed at once."""
    indices, members = list(group), files.members
    cfgs, resumes = list(group.values()), [saved.get(index) for index in group]
    with ExitStack() as contexts:
        loggers = []
        for index, cfg, resume in zip(indices, cfgs, resumes):
            member, out = members[index], Path(members[index]["dir"])
            atomic_write(out / "config.yaml", config.to_yaml(cfg))  # creates out too
            _keep_records_until(out / "metrics.jsonl", resume["step"] if resume else 0)
            loggers.append(contexts.enter_context(member_logger(cfg, out, job_type=member.get("job_type", "grid"),
                                                               name=out.name)))

        def finished(k: int, result) -> None:
            index = indices[k]
            if resumes[k]:  # say so in the result: this member continued from a checkpoint after a crash
                result.metrics["resumed_from_step"] = resumes[k]["step"]
            loggers[k].summary(result.metrics)
            loggers[k].close()
            save(result, members[index]["dir"])
            (Path(members[index]["dir"]) / ERROR_FILE).unlink(missing_ok=True)  # an earlier attempt's
            files.push(index)

        train_members(cfgs, loggers, resumes, on_result=finished,
                      on_checkpoint=lambda states: files.save({indices[k]: s for k, s in states.items()}),
                      stopper=stopper.of(indices))


def _keep_records_until(path: Path, step: int) -> None:
    """Drop jsonl records past the checkpoint a retry resumes from, so each step is logged once."""
    if path.exists():
        atomic_write(path, "".join(f"{json.dumps(record)}\n" for record in read_jsonl(path) if record["step"] <= step))
