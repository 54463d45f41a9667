"""Ray Tune runs for grids and searches: failure handling, restore, progress, the search's rounds as Tune's search
algorithm. cluster.py joins or starts the Ray they run on; packing.py plans which members share a Tune trial.

A grid is one Tune run over a fixed plan (resumable); a search is one Tune run whose search algorithm asks the
search's rounds for what to train next.
"""
from __future__ import annotations

import os
import socket
import time
from typing import Callable, Iterator

from ray import tune
from ray.tune.execution import class_cache
from ray.tune.search import Searcher

from sweep import cluster, packing, shipping, verdicts
from sweep.progress import ProgressView
from sweep.space import point_id
from sweep.storage import copies
from sweep.storage.out_dir import PULL_EVERY_S, OutDir
from trainables import config
from trainables.io import read_json, write_json
from trainables.trainable import run_trial

EXPERIMENT = "grid"
PLAN_FILE = "grid_plan.json"  # trial id -> its members, as the grid first planned them
AWS_CREDENTIALS = frozenset({"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"})


def grid_plan(base: config.Config, section, points: list[dict], out: OutDir,
              verdict: Callable[[dict], dict | None]) -> dict[str, list[dict]]:
    """The grid's Tune trials (trial id -> members, each with its `verdict` rule if any), writing nothing: the plan
    kept beside a resumable experiment, so a resumed grid finds the same trials even where `pack: 0` would now choose
    differently (another cluster), else a new plan (which raises ConfigError for a population that cannot fit). Ray
    must be connected."""
    plan_file = out.local / "ray" / PLAN_FILE
    if tune.Tuner.can_restore(_experiment(out), storage_filesystem=out.filesystem) and plan_file.exists():
        return read_json(plan_file)
    everyone = packing.members(points, out, "grid", verdict)
    pack = packing.members_per_pack(section, len(everyone), cluster.slots(section.resources, section.max_concurrent))
    return packing.plan(_base_dict(base, section), everyone, pack, section.resources.gpu, cluster.largest_memory())


def run(base: config.Config, section, packs: dict[str, list[dict]], out: OutDir,
        summary: Callable[[], str]) -> dict[str, str]:
    """Train the planned packs (grid_plan: pack id -> its members), each a Tune trial, in one Tune run, resuming the
    experiment out/ray/grid if there is one. Returns the error of every point whose pack failed for good, by point id.

    section: the grid's or the search's (resources, pack, max_concurrent, max_failures). Members whose result.json
    exists are reported, not re-run, whatever Tune's own state says. The plan travels once, with the trainable; a
    trial's own config is just its id, which keeps Tune's trial directories readable.
    """
    base_dict, experiment = _base_dict(base, section), _experiment(out)
    restoring = tune.Tuner.can_restore(experiment, storage_filesystem=out.filesystem)
    write_json(out.local / "ray" / PLAN_FILE, packs)
    out.sync()  # a bucket has the plan before any pack starts: a driver resumed elsewhere finds the same packs
    trainable = _trainable(base_dict, section, packs)
    param_space = {"trial": tune.grid_search(list(packs))}  # (the Tune trial's key: a pack's id)
    view = ProgressView(base.name, out.local, sum(map(len, packs.values())), summary,
                        refresh=lambda: out.pull_members(PULL_EVERY_S))
    if restoring:
        # Finished trials are kept; unfinished and errored ones continue from their last checkpoint. The param
        # space is given again: a driver killed before Tune generated every trial left variants still to generate.
        tuner = tune.Tuner.restore(experiment, trainable, resume_unfinished=True, resume_errored=True,
                                   param_space=param_space, storage_filesystem=out.filesystem)
    else:
        tuner = tune.Tuner(trainable, param_space=param_space, tune_config=_tune_config(section),
                           run_config=_run_config(section, out, EXPERIMENT, view))
    # every pack that ended in error -> the last line of its error
    failed = {result.config["trial"]: (str(result.error).strip().splitlines() or ["error"])[-1][:500]
              for result in _fit(tuner) if result.error is not None}
    return {point_id(m["point"]): failed[pack] for pack, chunk in packs.items() if pack in failed for m in chunk}


def run_rounds(base: config.Config, section, rounds: Iterator[list[dict]], out: OutDir, summary: Callable[[], str],
               verdict: Callable[[dict], dict | None], group_size: int) -> None:
    """Train what `rounds` yields, round after round, in one Tune run: each round's points become trials (packed as
    run() packs them, each member with its `verdict` rule if any, a candidate's `group_size` seeds in one trial
    where the packing allows), and the generator is resumed (to tell, then ask the next round) only once all of them
    ended and `out` has synced (the trials' files pulled from a bucket).
    A new experiment every time: a resumed search rebuilds its rounds from its studies and result files. Its name
    carries the host and pid: two drivers of one search started in the same second must not share it."""
    base_dict = _base_dict(base, section)

    def pack(points: list[dict]) -> dict[str, list[dict]]:  # asked each round: nodes may have joined or left
        slots = cluster.slots(section.resources, section.max_concurrent)
        return packing.plan(base_dict, packing.members(points, out, "search", verdict),
                            packing.members_per_pack(section, len(points), slots, group_size),
                            section.resources.gpu, cluster.largest_memory(), "search.pack")

    name = f"search-{time.strftime('%Y%m%d-%H%M%S')}-{socket.gethostname()}-{os.getpid()}"
    tune_config = _tune_config(section)
    tune_config.search_alg, tune_config.num_samples = _Rounds(rounds, pack, out.sync), -1  # -1: until the rounds end
    view = ProgressView(base.name, out.local, None, summary)
    _fit(tune.Tuner(_trainable(base_dict, section, {}), tune_config=tune_config,
                    run_config=_run_config(section, out, name, view)))


class _Rounds(Searcher):
    """Tune's search algorithm over a generator of rounds: it hands Tune the trials of the current round, and when
    all of them have ended resumes the generator, which tells their results and yields the next round's points."""

    def __init__(self, rounds: Iterator[list[dict]], pack: Callable[[list[dict]], dict[str, list[dict]]],
                 sync: Callable[[], None]):
        super().__init__()
        self.rounds, self.pack, self.sync = rounds, pack, sync
        self.queue: list[tuple[str, list[dict]]] = []
        self.running: set[str] = set()

    def suggest(self, trial_id: str) -> dict | str | None:
        if not self.queue and not self.running:
            self.sync()  # the round's results (and other drivers') where the generator reads them
            points = next(self.rounds, None)
            if points is None:
                return Searcher.FINISHED
            if not points:  # other drivers train what is left: ask the rounds again at Tune's next call
                return None
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

    def save(self, checkpoint_path: str) -> None:  # nothing to save (see __getstate__), so nothing is ever restored
        pass


def _fit(tuner: tune.Tuner) -> tune.ResultGrid:
    """tuner.fit() without the driver's AWS credentials in the trials' runtime environment: Tune copies them there
    (ray/tune/execution/class_cache.py, when it first creates the trials' actor class, inside fit), and Ray prints a
    runtime environment in plain text into runtime_env_agent.log on every node and keeps it in its GCS. A trial uses
    its node's own credentials (docs/CLUSTER.md; preflight.py checks every node first). Tune has no setting for it, so
    its set is narrowed for this fit and put back after: the process's other Tune runs keep Tune's behaviour."""
    copied = class_cache.ENV_VARS_TO_PROPAGATE
    class_cache.ENV_VARS_TO_PROPAGATE = copied - AWS_CREDENTIALS
    try:
        return tuner.fit()
    finally:
        class_cache.ENV_VARS_TO_PROPAGATE = copied


def _experiment(out: OutDir) -> str:
    return f"{out.experiments()}/{EXPERIMENT}"


def _base_dict(base: config.Config, section) -> dict:
    base_dict = config.to_dict(base)
    if section.resources.gpu > 0:
        base_dict["device"] = "cuda"
    return base_dict


def _trainable(base_dict: dict, section, packs: dict[str, list[dict]]):
    """run_trial with its plan, the storage its members are opened in (trainables never import the sweep's), the
    sweep's verdict rule, and the tasks and models registered from Python (headsweep.register), shipped by value
    (shipping.py)."""
    # Bound by value into the trainable, which Tune keeps in the cluster's GCS, not put in the object store as
    # tune.with_parameters does: Ray ends a driver at once (exit 1) when the node holding objects it owns goes, which
    # a Slurm requeue or preemption does to the head and the driver together, before the driver wrote its results.
    bound = dict(base=base_dict, plan=packs, open_members=copies.open_members, stopper_of=verdicts.stopper_of,
                 plugins=shipping.shipped())

    def trainable(params: dict) -> None:
        run_trial(params, **bound)

    trainable.__name__ = run_trial.__name__  # Tune's name for it, as before: an earlier version's experiment resumes
    return tune.with_resources(trainable, {"cpu": section.resources.cpu, "gpu": section.resources.gpu})


def _tune_config(section) -> tune.TuneConfig:
    return tune.TuneConfig(
        reuse_actors=True,  # ~15x the throughput of a fresh worker per small trial
        max_concurrent_trials=section.max_concurrent or None,
        trial_name_creator=_trial_name,
        trial_dirname_creator=_trial_name,
    )


def _run_config(section, out: OutDir, name: str, view: ProgressView) -> tune.RunConfig:
    return tune.RunConfig(
        name=name,
        storage_path=out.experiments(),
        storage_filesystem=out.filesystem,
        failure_config=tune.FailureConfig(max_failures=section.max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
        progress_reporter=view,
        verbose=1,  # the progress view only, not every trial's config and result
    )


def _trial_name(trial) -> str:
    return trial.config["trial"]
