"""Ray Tune wiring for grids and searches: cluster, resources, failure handling, restore, progress.

Ray starts in-process on this machine unless an address is given (`--address`, or RAY_ADDRESS as set by
`ray job submit`). Each point is one Tune trial of trainables.trainable.run_trial.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import ray
from ray import tune

from sweep.space import point_id, trial_dir
from trainables import config
from trainables.errors import ConfigError
from trainables.population import pack_key
from trainables.tasks import task_of
from trainables.trainable import run_trial

EXPERIMENT = "grid"
TRIALS_PER_SLOT = 4  # auto packing: about this many Tune trials per slot the cluster can run at once
MAX_AUTO_PACK = 64  # auto packing never puts more members than this in one trial


def connect(address: str | None) -> None:
    """Join the cluster at `address` (or RAY_ADDRESS), else start a local one in this process."""
    address = address or os.environ.get("RAY_ADDRESS")
    if address and address.startswith("http"):
        raise ConfigError("--address", f"{address} is a dashboard URL (what `ray job submit` takes); give the "
                                       "cluster's GCS address host:port, or unset RAY_ADDRESS for a local Ray")
    # The classic progress table (a compact row per trial) rather than the new engine's per-trial config dumps.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # Snapshots after each checkpoint are what makes a killed grid resumable; Tune's warning about them is noise.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False if not address else None, log_to_driver=False,
                 configure_logging=False)


def check_resources(resources) -> None:
    """Fail before any trial starts if no node could ever run one (they would stay PENDING forever)."""
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    fits = [n for n in nodes if n.get("CPU", 0) >= resources.cpu and n.get("GPU", 0) >= resources.gpu]
    if fits:
        return
    gpus, cpus = max(n.get("GPU", 0) for n in nodes), max(n.get("CPU", 0) for n in nodes)
    key = "sweep.resources.gpu" if resources.gpu > gpus else "sweep.resources.cpu"
    raise ConfigError(key, f"a trial asks for {resources.cpu:g} CPU and {resources.gpu:g} GPU, but the largest "
                           f"node of this cluster has {cpus:g} CPU and {gpus:g} GPU")


def members(points: list[dict], out: Path, job_type: str = "grid") -> list[dict]:
    return [{"point": point, "dir": str(trial_dir(out, point)), "job_type": job_type} for point in points]


def plan(base_dict: dict, all_members: list[dict], pack: int) -> dict[str, list[dict]]:
    """Tune trial id -> its members: members of one shape (population.pack_key) in chunks of `pack`, in point order.
    The ids are a function of the points and `pack`, so a restored experiment finds its trials again."""
    groups: dict[tuple, list[dict]] = {}
    for member in all_members:
        cfg = config.with_point(base_dict, member["point"], check_device=False)
        groups.setdefault(pack_key(cfg), []).append(member)
    trials = {}
    for group in groups.values():
        for start in range(0, len(group), pack):
            chunk = group[start:start + pack]
            trials[point_id(chunk[0]["point"]) + (f"+{len(chunk) - 1}" if len(chunk) > 1 else "")] = chunk
    return trials


def members_per_trial(section, n_members: int) -> int:
    """The section's `pack`, or for 0 (auto) as many members per trial as spread them over about TRIALS_PER_SLOT
    trials per slot the cluster runs at once: fewer Tune trials cost less overhead, and not fewer than that keeps every
    slot busy to the end and a crash costly to no one."""
    if section.pack:
        return section.pack
    resources, ask = ray.cluster_resources(), section.resources
    slots = min(resources.get("CPU", 1) // max(ask.cpu, 1e-9),
                resources.get("GPU", 0) // ask.gpu if ask.gpu else float("inf"))
    slots = max(1, int(min(slots, section.max_concurrent or slots)))
    return max(1, min(MAX_AUTO_PACK, math.ceil(n_members / (TRIALS_PER_SLOT * slots))))


def run(base: config.Config, section, points: list[dict], out: Path, experiment: str = EXPERIMENT,
        restore: bool = True, job_type: str = "grid") -> dict[str, str]:
    """Train every point (resuming the experiment if `restore` and it exists); Ray must be connected. Returns the
    error of every point whose trial failed for good, by point id.

    section: the grid's or the search's (resources, pack, max_concurrent, max_failures). Members whose result.json
    exists are reported, not re-run, whatever Tune's own state says.
    """
    base_dict = config.to_dict(base)
    if section.resources.gpu > 0:
        base_dict["device"] = "cuda"
    everyone = members(points, out, job_type)
    # The base config and the plan travel once through the object store; a trial's own config is just its id, which
    # keeps Tune's table and trial directories readable.
    trials = plan(base_dict, everyone, members_per_trial(section, len(everyone)))
    trainable = tune.with_resources(tune.with_parameters(run_trial, base=base_dict, plan=trials),
                                    {"cpu": section.resources.cpu, "gpu": section.resources.gpu})
    experiment = (out / "ray" / experiment).resolve()
    param_space = {"trial": tune.grid_search(list(trials))}
    if restore and tune.Tuner.can_restore(str(experiment)):
        # Finished trials are kept; unfinished and errored ones continue from their last checkpoint. The param
        # space is given again: a driver killed before Tune generated every trial left variants still to generate.
        tuner = tune.Tuner.restore(str(experiment), trainable, resume_unfinished=True, resume_errored=True,
                                   param_space=param_space)
    else:
        tuner = tune.Tuner(
            trainable,
            param_space=param_space,
            tune_config=tune.TuneConfig(
                reuse_actors=True,  # ~15x the throughput of a fresh worker per small trial
                max_concurrent_trials=section.max_concurrent or None,
                trial_name_creator=_trial_name,
                trial_dirname_creator=_trial_name,
            ),
            run_config=tune.RunConfig(
                name=experiment.name,
                storage_path=str(experiment.parent),
                failure_config=tune.FailureConfig(max_failures=section.max_failures),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
                progress_reporter=tune.CLIReporter(metric_columns=task_of(base).short_names | {"step": "step"},
                                                   parameter_columns=[],
                                                   max_report_frequency=10),
                verbose=1,  # the progress table only, not every trial's config and result
            ),
        )
    failed = _errors(tuner.fit())
    return {point_id(m["point"]): failed[trial] for trial, chunk in trials.items() if trial in failed for m in chunk}


def _errors(grid: tune.ResultGrid) -> dict[str, str]:
    """trial id -> the last line of the error of every Tune trial that ended in error."""
    found = {}
    for result in grid:
        if result.error is not None:
            found[result.config["trial"]] = (str(result.error).strip().splitlines() or ["error"])[-1][:500]
    return found


def _trial_name(trial) -> str:
    return trial.config["trial"]
