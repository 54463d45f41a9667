"""Ray Tune wiring for grids and searches: cluster, resources, packing, failure handling, restore, progress.

Ray starts in-process on this machine unless an address is given (`--address`, or RAY_ADDRESS as set by
`ray job submit`); a local Ray serves this process alone: its servers listen on 127.0.0.1 only, with token auth on.
Points become members of Tune trials of trainables.trainable.run_trial, several of one shape per trial (`pack`). A
grid is one Tune run over a fixed plan (resumable); a search is one Tune run whose search algorithm asks the
search's rounds for what to train next.
"""
from __future__ import annotations

import gc
import logging
import math
import os
import socket
import threading
import time
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

import ray
import ray._private.ray_constants as ray_constants
from ray import tune
from ray.tune.search import Searcher

from sweep.out_dir import PULL_EVERY_S, OutDir
from sweep.progress import ProgressView
from sweep.space import point_id
from trainables import config, memory
from trainables.errors import ConfigError
from trainables.io import read_json, write_json
from trainables.models import MODELS
from trainables.population import pack_key
from trainables.trainable import run_trial

T = TypeVar("T")

EXPERIMENT = "grid"
PLAN_FILE = "grid_plan.json"  # trial id -> its members, as the grid first planned them
TRIALS_PER_SLOT = 4  # auto packing: about this many Tune trials per slot the cluster can run at once
MAX_AUTO_PACK = 64  # auto packing never puts more members than this in one trial
LOOPBACK_VAR = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray's node IP is 127.0.0.1 (docs/CLUSTER.md)


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
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    else:
        _start_local()


def disconnect_while(work: Callable[[], T]) -> T:
    """Leave Ray (stopping a local one: a second or two, mostly waiting for its processes to exit) while `work` runs
    in another thread; return what it returns. `work` must not touch Ray. Ray is left from this thread with the
    garbage collector paused until both are done, so that no Ray object is released from the other thread while the
    core worker shuts down: Ray ends the whole process when that happens (a driver joined to a cluster lost its
    report and exited 1 that way when Ray was left from a thread of its own)."""
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["value"] = work()
        except BaseException as error:  # raised again in this thread
            outcome["error"] = error

    collecting = gc.isenabled()
    gc.disable()
    worker = threading.Thread(target=run, name="results-and-report")
    worker.start()
    try:
        ray.shutdown()
    finally:
        worker.join()
        if collecting:
            gc.enable()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _start_local() -> None:
    """Ray in this process, for this process alone: every server on 127.0.0.1, token authentication on."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None and mode.lower() != "token":
        raise ConfigError("RAY_AUTH_MODE", f"is {mode!r}, but a local Ray always runs with token authentication: "
                                           "unset it (or set it to token)")
    # Unset, Ray 2.60 turns token auth on for a new local Ray (creating ~/.ray/auth_token once) and tells this process;
    # setting it here would come too late: this process read the mode when it imported ray. Its notice of that ends
    # "set RAY_AUTH_MODE=disabled to opt out", which headsweep refuses: not shown.
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    with _loopback_only():
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)


@contextmanager
def _loopback_only():
    """While a local Ray starts, make its node IP 127.0.0.1: Ray binds its servers to loopback for that IP and to every
    interface for any other. Each process Ray starts reads LOOPBACK_VAR; this one read it on import, so its copy is
    set too. Both are put back after: a later join of another cluster from this process needs the machine's IP."""
    saved_var, saved_flag = os.environ.get(LOOPBACK_VAR), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[LOOPBACK_VAR], ray_constants.ENABLE_RAY_CLUSTER = "0", False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_flag
        if saved_var is None:
            os.environ.pop(LOOPBACK_VAR, None)
        else:
            os.environ[LOOPBACK_VAR] = saved_var


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


def members(points: list[dict], out: OutDir, job_type: str = "grid",
            verdict: Callable[[dict], dict | None] = lambda point: None) -> list[dict]:
    """The member dicts of these points: point, directory (a path, or a URI in the bucket), job type and, where
    `verdict` gives one, the rule it is judged and stopped by (trainables/verdicts.py)."""
    return [{"point": point, "dir": out.member_dir(point), "job_type": job_type}
            | ({"verdict": rule} if (rule := verdict(point)) else {}) for point in points]


def plan(base_dict: dict, all_members: list[dict], pack: int, gpu: float,
         pack_setting: str = "sweep.pack") -> dict[str, list[dict]]:
    """Tune trial id -> its members: members of one shape (population.pack_key) in chunks of `pack`, in point order,
    a candidate's seeds (one verdict group) in one chunk, so that they can stop each other (chunks). The ids are a
    function of the points and `pack`, so a restored experiment finds its trials again. A trial must fit in the memory
    of the cluster's largest node, and a member on cuda needs `gpu` > 0 per trial (Ray hides the GPUs from a trial
    that asks for none): else ConfigError."""
    section = pack_setting.split(".")[0]
    groups: dict[tuple, list[dict]] = {}
    largest: dict[tuple, tuple[dict[str, int], config.Config]] = {}  # per shape: the largest member's needs, config
    vectorized: dict[tuple, bool] = {}  # else its members run one after another in their trial
    for member in all_members:
        cfg = config.with_point(base_dict, member["point"], check_device=False)
        if cfg.device == "cuda" and not gpu:
            raise ConfigError("device", f"cuda needs {section}.resources.gpu > 0: Ray hides the GPUs from trials that "
                                        "ask for none")
        key = pack_key(cfg)
        groups.setdefault(key, []).append(member)
        needs = memory.needs(cfg)
        if key not in largest or max(needs.values()) > max(largest[key][0].values()):
            largest[key] = needs, cfg
        vectorized[key] = MODELS[cfg.model.name].vectorize
    trials = {}
    for key, group in groups.items():
        check_memory(min(pack, len(group)) if vectorized[key] else 1, *largest[key], pack_setting)
        for chunk in chunks(group, pack):
            trials[point_id(chunk[0]["point"]) + (f"+{len(chunk) - 1}" if len(chunk) > 1 else "")] = chunk
    return trials


def chunks(group: list[dict], pack: int) -> list[list[dict]]:
    """The members in order, in chunks of at most `pack`, none splitting the consecutive members of one verdict
    group (a candidate's seeds) unless the group alone has more than `pack`."""
    group_of = lambda member: (member.get("verdict") or {}).get("group")
    runs: list[list[dict]] = []
    for member in group:
        if runs and group_of(member) is not None and group_of(runs[-1][-1]) == group_of(member):
            runs[-1].append(member)
        else:
            runs.append([member])
    result: list[list[dict]] = []
    for run in runs:
        if result and len(result[-1]) + len(run) <= pack:
            result[-1] += run
        else:
            result += [run[start:start + pack] for start in range(0, len(run), pack)]
    return result


def check_memory(members: int, peaks: dict[str, int], cfg: config.Config, pack_setting: str) -> None:
    """Fail before anything runs if `members` trained as one population (each needing `peaks`: bytes at the peak per
    batch key, memory.needs(cfg)) exceed what Ray gives tasks on the cluster's largest node: naming the batch key
    when one member alone cannot fit, else `pack_setting`."""
    room = max(n["Resources"].get("memory", 0) for n in ray.nodes() if n.get("Alive"))
    memory.refuse_beyond(peaks, room, "the largest node gives trials", cfg)
    peak = max(peaks.values())
    if members * peak > room:
        raise ConfigError(pack_setting, f"{members} members per trial need about {members * peak / memory.GIB:.2f} "
                                        f"GiB together, but the largest node gives trials {room / memory.GIB:.2f} "
                                        f"GiB; set it to at most {max(1, int(room // max(peak, 1)))}")


def members_per_trial(section, n_members: int, group_size: int = 1) -> int:
    """The section's `pack`, or for 0 (auto) as many members per trial as spread them over about TRIALS_PER_SLOT
    trials per slot the cluster runs at once: fewer Tune trials cost less overhead, and not fewer than that keeps every
    slot busy to the end and a crash costly to no one; rounded up to whole verdict groups of `group_size` (a
    candidate's seeds, which stop each other only inside one trial)."""
    if section.pack:
        return section.pack
    resources, ask = ray.cluster_resources(), section.resources
    slots = min(resources.get("CPU", 1) // max(ask.cpu, 1e-9),
                resources.get("GPU", 0) // ask.gpu if ask.gpu else float("inf"))
    slots = max(1, int(min(slots, section.max_concurrent or slots)))
    pack = max(1, min(MAX_AUTO_PACK, math.ceil(n_members / (TRIALS_PER_SLOT * slots))))
    return math.ceil(pack / group_size) * group_size


def grid_plan(base: config.Config, section, points: list[dict], out: OutDir, job_type: str = "grid",
              verdict: Callable[[dict], dict | None] = lambda point: None) -> dict[str, list[dict]]:
    """The grid's Tune trials (trial id -> members, each with its `verdict` rule if any), writing nothing: the plan
    kept beside a resumable experiment, so a resumed grid finds the same trials even where `pack: 0` would now choose
    differently (another cluster), else a new plan (which raises ConfigError for a population that cannot fit). Ray
    must be connected."""
    plan_file = out.local / "ray" / PLAN_FILE
    if tune.Tuner.can_restore(_experiment(out), storage_filesystem=out.filesystem) and plan_file.exists():
        return read_json(plan_file)
    everyone = members(points, out, job_type, verdict)
    return plan(_base_dict(base, section), everyone, members_per_trial(section, len(everyone)), section.resources.gpu)


def run(base: config.Config, section, trials: dict[str, list[dict]], out: OutDir,
        summary: Callable[[], str] = lambda: "") -> dict[str, str]:
    """Train the planned trials (grid_plan) in one Tune run, resuming the experiment out/ray/grid if there is one.
    Returns the error of every point whose trial failed for good, by point id.

    section: the grid's or the search's (resources, pack, max_concurrent, max_failures). Members whose result.json
    exists are reported, not re-run, whatever Tune's own state says. The plan travels once through the object
    store; a trial's own config is just its id, which keeps Tune's trial directories readable.
    """
    base_dict, experiment = _base_dict(base, section), _experiment(out)
    restoring = tune.Tuner.can_restore(experiment, storage_filesystem=out.filesystem)
    write_json(out.local / "ray" / PLAN_FILE, trials)
    out.sync()  # a bucket has the plan before any trial starts: a driver resumed elsewhere finds the same trials
    trainable = _trainable(base_dict, section, trials)
    param_space = {"trial": tune.grid_search(list(trials))}
    view = ProgressView(base.name, out.local, sum(map(len, trials.values())), summary,
                        refresh=lambda: out.pull_trials(PULL_EVERY_S))
    if restoring:
        # Finished trials are kept; unfinished and errored ones continue from their last checkpoint. The param
        # space is given again: a driver killed before Tune generated every trial left variants still to generate.
        tuner = tune.Tuner.restore(experiment, trainable, resume_unfinished=True, resume_errored=True,
                                   param_space=param_space, storage_filesystem=out.filesystem)
    else:
        tuner = tune.Tuner(trainable, param_space=param_space, tune_config=_tune_config(section),
                           run_config=_run_config(section, out, EXPERIMENT, view))
    failed = _errors(tuner.fit())
    return {point_id(m["point"]): failed[trial] for trial, chunk in trials.items() if trial in failed for m in chunk}


def run_rounds(base: config.Config, section, rounds: Iterator[list[dict]], out: OutDir,
               summary: Callable[[], str] = lambda: "", job_type: str = "search",
               verdict: Callable[[dict], dict | None] = lambda point: None, group_size: int = 1) -> None:
    """Train what `rounds` yields, round after round, in one Tune run: each round's points become trials (packed as
    run() packs them, each member with its `verdict` rule if any, a candidate's `group_size` seeds in one trial
    where the packing allows), and the generator is resumed (to tell, then ask the next round) only once all of them
    ended and `out` has synced (the trials' files pulled from a bucket).
    A new experiment every time: a resumed search rebuilds its rounds from its studies and result files. Its name
    carries the host and pid: two drivers of one search started in the same second must not share it."""
    base_dict = _base_dict(base, section)
    pack = lambda points: plan(base_dict, members(points, out, job_type, verdict),
                               members_per_trial(section, len(points), group_size), section.resources.gpu,
                               "search.pack")
    name = f"search-{time.strftime('%Y%m%d-%H%M%S')}-{socket.gethostname()}-{os.getpid()}"
    tune_config = _tune_config(section)
    tune_config.search_alg, tune_config.num_samples = _Rounds(rounds, pack, out.sync), -1  # -1: until the rounds end
    view = ProgressView(base.name, out.local, None, summary)
    tune.Tuner(_trainable(base_dict, section, {}), tune_config=tune_config,
               run_config=_run_config(section, out, name, view)).fit()


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

    def save(self, checkpoint_path: str) -> None:  # nothing to save: see __getstate__
        pass

    def restore(self, checkpoint_path: str) -> None:
        pass


def _experiment(out: OutDir) -> str:
    return f"{out.experiments()}/{EXPERIMENT}"


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


def _errors(grid: tune.ResultGrid) -> dict[str, str]:
    """trial id -> the last line of the error of every Tune trial that ended in error."""
    found = {}
    for result in grid:
        if result.error is not None:
            found[result.config["trial"]] = (str(result.error).strip().splitlines() or ["error"])[-1][:500]
    return found


def _trial_name(trial) -> str:
    return trial.config["trial"]
