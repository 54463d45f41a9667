"""Ray Tune wiring for grids and searches: cluster, resources, packing, failure handling, restore, progress.

Ray starts in-process on this machine unless an address is given (`--address`, or RAY_ADDRESS as set by
`ray job submit`). Points become members of Tune trials of trainables.trainable.run_trial, several of one shape per
trial (`pack`). A grid is one Tune run over a fixed plan (resumable); a search is one Tune run whose search algorithm
asks the search's rounds for what to train next.
"""
from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Callable, Iterator

import ray
from ray import tune
from ray.tune.search import Searcher

from sweep.progress import ProgressView
from sweep.space import point_id, trial_dir
from trainables import config
from trainables.errors import ConfigError
from trainables.io import read_json, write_json
from trainables.population import pack_key
from trainables.trainable import run_trial

EXPERIMENT = "grid"
PLAN_FILE = "grid_plan.json"  # trial id -> its members, as the grid first planned them
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


def run(base: config.Config, section, points: list[dict], out: Path, summary: Callable[[], str] = lambda: "",
        job_type: str = "grid") -> dict[str, str]:
    """Train every point in one Tune run, resuming the experiment out/ray/grid if there is one; Ray must be
    connected. Returns the error of every point whose trial failed for good, by point id.

    section: the grid's or the search's (resources, pack, max_concurrent, max_failures). Members whose result.json
    exists are reported, not re-run, whatever Tune's own state says.
    """
    base_dict = _base_dict(base, section)
    everyone = members(points, out, job_type)
    experiment = (out / "ray" / EXPERIMENT).resolve()
    restoring = tune.Tuner.can_restore(str(experiment))
    # The plan is kept beside the experiment: a resumed grid must find the same trials even where `pack: 0` would
    # now choose differently (another cluster). It travels once through the object store; a trial's own config is
    # just its id, which keeps Tune's trial directories readable.
    plan_file = out / "ray" / PLAN_FILE
    trials = read_json(plan_file) if restoring and plan_file.exists() else None
    if trials is None:
        trials = plan(base_dict, everyone, members_per_trial(section, len(everyone)))
        write_json(plan_file, trials)
    trainable = _trainable(base_dict, section, trials)
    param_space = {"trial": tune.grid_search(list(trials))}
    view = ProgressView(base.name, out, len(everyone), summary)
    if restoring:
        # Finished trials are kept; unfinished and errored ones continue from their last checkpoint. The param
        # space is given again: a driver killed before Tune generated every trial left variants still to generate.
        tuner = tune.Tuner.restore(str(experiment), trainable, resume_unfinished=True, resume_errored=True,
                                   param_space=param_space)
    else:
        tuner = tune.Tuner(trainable, param_space=param_space, tune_config=_tune_config(section),
                           run_config=_run_config(section, experiment, view))
    failed = _errors(tuner.fit())
    return {point_id(m["point"]): failed[trial] for trial, chunk in trials.items() if trial in failed for m in chunk}


def run_rounds(base: config.Config, section, rounds: Iterator[list[dict]], out: Path,
               summary: Callable[[], str] = lambda: "", job_type: str = "search") -> None:
    """Train what `rounds` yields, round after round, in one Tune run: each round's points become trials (packed as
    run() packs them), and the generator is resumed (to tell, then ask the next round) only once all of them ended.
    A new experiment every time: a resumed search rebuilds its rounds from its studies and result files."""
    base_dict = _base_dict(base, section)
    pack = lambda points: plan(base_dict, members(points, out, job_type),
                               members_per_trial(section, len(points)))
    experiment = (out / "ray" / f"search-{time.strftime('%Y%m%d-%H%M%S')}").resolve()
    tune_config = _tune_config(section)
    tune_config.search_alg, tune_config.num_samples = _Rounds(rounds, pack), -1  # -1: until the rounds are over
    view = ProgressView(base.name, out, None, summary)
    tune.Tuner(_trainable(base_dict, section, {}), tune_config=tune_config,
               run_config=_run_config(section, experiment, view)).fit()


class _Rounds(Searcher):
    """Tune's search algorithm over a generator of rounds: it hands Tune the trials of the current round, and when
    all of them have ended resumes the generator, which tells their results and yields the next round's points."""

    def __init__(self, rounds: Iterator[list[dict]], pack: Callable[[list[dict]], dict[str, list[dict]]]):
        super().__init__()
        self.rounds, self.pack = rounds, pack
        self.queue: list[tuple[str, list[dict]]] = []
        self.running: set[str] = set()

    def suggest(self, trial_id: str) -> dict | str | None:
        if not self.queue and not self.running:
            points = next(self.rounds, None)
            if points is None:
                return Searcher.FINISHED
            self.queue = list(self.pack(points).items())
        if not self.queue:
            return None  # the round's last trials are still running
        trial, chunk = self.queue.pop(0)
        self.running.add(trial_id)
        return {"trial": trial, "members": chunk}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self.running.discard(trial_id)

    def __getstate__(self) -> dict:
        """Tune pickles its config (tuner.pkl); a search is never restored through Tune (a re-run rebuilds its rounds
        from its studies and result files), so the live generator stays behind."""
        return {}

    def save(self, checkpoint_path: str) -> None:  # nothing to save: see __getstate__
        pass

    def restore(self, checkpoint_path: str) -> None:
        pass


def _base_dict(base: config.Config, section) -> dict:
    base_dict = config.to_dict(base)
    if section.resources.gpu > 0:
        base_dict["device"] = "cuda"
    return base_dict


def _trainable(base_dict: dict, section, trials: dict[str, list[dict]]):
    return tune.with_resources(tune.with_parameters(run_trial, base=base_dict, plan=trials),
                               {"cpu": section.resources.cpu, "gpu": section.resources.gpu})


def _tune_config(section) -> tune.TuneConfig:
    return tune.TuneConfig(
        reuse_actors=True,  # ~15x the throughput of a fresh worker per small trial
        max_concurrent_trials=section.max_concurrent or None,
        trial_name_creator=_trial_name,
        trial_dirname_creator=_trial_name,
    )


def _run_config(section, experiment: Path, view: ProgressView) -> tune.RunConfig:
    return tune.RunConfig(
        name=experiment.name,
        storage_path=str(experiment.parent),
        failure_config=tune.FailureConfig(max_failures=section.max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
        progress_reporter=view,
        verbose=1,  # the progress view only, not every trial's config and result
    )


def _errors(grid: tune.ResultGrid) -> dict[str, str]:
    """trial id -> the last line of the error of every Tune trial that ended in error."""
    found = {}
    for result in grid:
        if result.error is not None:
            found[result.config["trial"]] = (str(result.error).strip().splitlines() or ["error"])[-1][:500]
    return found


def _trial_name(trial) -> str:
    return trial.config["trial"]
