"""Logger fan-out: the training loop talks to one Logger, which forwards every record to its sinks.

JsonlSink is the source of truth (always on, one flushed line per evaluation, so a crash loses at most the record in
flight); W&B mirrors it. `logging.wandb=false` imports nothing from wandb: WandbSink imports
it when it is built, and only member_logger builds it (one logger per member, or per `headsweep train` run).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import secrets
import socket
import string
import sys
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Protocol
from urllib.parse import urlparse

import numpy as np

from trainables.errors import ConfigError, require
from trainables.io import flat
from trainables.tasks import task_of

WANDB_MODES = ("auto", "online", "offline", "disabled")
# WANDB_MODE values wandb itself accepts, mapped onto ours ("dryrun" and "run" are its old names).
_ENV_MODES = {"online": "online", "run": "online", "shared": "online", "offline": "offline", "dryrun": "offline",
              "disabled": "disabled"}
DEFAULT_BASE_URL = "https://api.wandb.ai"
PROBE_TIMEOUT_S = 3.0  # how long a logged-in member waits to learn that the W&B server does not answer
RUN_ID_FILE = "headsweep-run-id"  # in <member>/wandb/: a retried member continues the same W&B run


@dataclass
class LoggingConfig:
    """Where a member's records go besides metrics.jsonl (which is always written)."""

    media_every: int = 0  # also log attention maps and matrices every this many evaluations; 0: only at the end
    wandb: bool = True  # mirror every member to a W&B run (offline unless logged in); false imports nothing from wandb
    project: str = "headsweep"  # W&B project of the runs
    entity: str = ""  # W&B entity (user or team) of the runs; empty: the logged-in account's default
    mode: str = "auto"  # auto | online | offline | disabled; auto: WANDB_MODE, else online if logged in, else offline
    tags: list[str] = field(default_factory=list)  # extra W&B tags, besides the task's, the model's and the task's own

    def validate(self) -> None:
        require(
            ("logging.media_every", self.media_every >= 0, "must be >= 0 (0 logs media only at the end)"),
            ("logging.mode", self.mode in WANDB_MODES, f"must be one of {', '.join(WANDB_MODES)}"),
            ("logging.project", bool(self.project.strip()), "must not be empty"),
        )


class Sink(Protocol):
    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    """Appends {"step": s, **metrics} as one JSON line per call; NaN and inf are written as null."""

    def __init__(self, path: str | Path):
        self.file = open(path, "a", encoding="utf-8")

    def log(self, metrics: dict[str, float], step: int) -> None:
        record = {"step": step} | {k: (v if math.isfinite(v) else None) for k, v in metrics.items()}
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class Logger:
    """Forwards to every sink; with none it does nothing, so library callers need not care about logging.

    Besides scalar records, sinks may implement `log_media(arrays, step)` (attention maps, matrices: the arrays of
    attention.npz), `summary(metrics)` (a member's final result) and `mark_failed()` (the member raised before the
    logger closed); sinks without them skip those calls.
    """

    def __init__(self, *sinks: Sink):
        self.sinks = list(sinks)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for sink in self.sinks:
            sink.log(metrics, step)

    def log_media(self, arrays: dict[str, np.ndarray], step: int) -> None:
        for sink in self.sinks:
            if hasattr(sink, "log_media"):
                sink.log_media(arrays, step)

    def summary(self, metrics: dict[str, float | str]) -> None:
        for sink in self.sinks:
            if hasattr(sink, "summary"):
                sink.summary(metrics)

    def close(self) -> None:
        """Close every sink once (a packed member's logger closes when the member finishes, before its context)."""
        sinks, self.sinks = self.sinks, []
        for sink in sinks:
            sink.close()

    def __enter__(self) -> "Logger":
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is not None:
            for sink in self.sinks:
                if hasattr(sink, "mark_failed"):
                    sink.mark_failed()
        self.close()


def member_logger(cfg, out_dir: Path, *, job_type: str = "train", name: str | None = None) -> Logger:
    """The logger of one member (or a `headsweep train` run): metrics.jsonl in out_dir (the source of truth), then a
    W&B run (WandbSink, named `name` or by `run_name`) when `logging.wandb` is on and the mode is not disabled. A
    metrics.jsonl that already holds records means a retry resuming from a checkpoint (the trainable kept the records
    up to it): the W&B run of the earlier attempt is continued rather than a new one started."""
    out_dir = Path(out_dir).resolve()  # absolute: Tune trials chdir into a scratch dir
    jsonl = out_dir / "metrics.jsonl"
    resuming = jsonl.exists() and jsonl.stat().st_size > 0
    sinks = [JsonlSink(jsonl)]
    if cfg.logging.wandb:
        mode, why = resolve_wandb_mode(cfg.logging.mode)
        if mode != "disabled":
            try:
                sinks.append(WandbSink(out_dir, cfg, mode=mode, job_type=job_type, name=name or run_name(cfg),
                                       resume=resuming))
            except BaseException:
                sinks[0].close()
                raise
            if mode == "offline":
                print(offline_notice("run", why, f"{shown_path(out_dir / 'wandb')}/offline-run-*"), file=sys.stderr)
    return Logger(*sinks)


class WandbSink:
    """Mirrors one member to one W&B run in <member dir>/wandb: every evaluation as history, media, the summary, and
    at close the last media call's arrays (the final readout) as an artifact holding attention.npz. Images are the
    task's and the model's heatmaps (readouts.member_images: numpy, no figure drawn, a small fraction of a member's
    training) as uint8 RGB (W&B renders bare float arrays black). The diversity measures (`data/*`, constant in a
    member) also go in the run's config, so runs can be grouped and filtered by diversity."""

    requirements_saved = False  # by a run of this process (see x_save_requirements below)

    def __init__(self, out_dir: Path, cfg, *, mode: str, job_type: str, name: str, resume: bool = False):
        tags = [cfg.task.name, cfg.model.name, *task_of(cfg).tags(cfg.task), *cfg.logging.tags]
        import wandb  # here, not at the top: logging.wandb=false must import nothing from wandb

        self.wandb, self.cfg = wandb, cfg
        run_id, resume = _run_id(out_dir / "wandb", resume)
        self.run = wandb.init(
            project=cfg.logging.project, entity=cfg.logging.entity or None, group=cfg.name, job_type=job_type,
            name=name, config=flat(dataclasses.asdict(cfg)), id=run_id, resume="allow" if resume else None,
            tags=list(dict.fromkeys(tag[:64] for tag in tags)),  # unique, in order; W&B caps a tag at 64 characters
            dir=str(out_dir), mode=mode,
            reinit="create_new",  # several members may share a process (reused Ray actors, packed members)
            settings=wandb.Settings(
                console="off",  # leave stdout/stderr alone: the progress bar and Ray's capture keep working
                silent=True,  # member_logger says where an offline run went, once
                x_disable_stats=True, x_disable_machine_info=True,  # no system sampling or hardware probing per member
                # The installed packages (requirements.txt) once per process: listing them parses every package's
                # metadata, 0.19 s a run, as long as training a one-step member; the later runs of a reused actor
                # or a pack share that process's environment.
                x_save_requirements=not WandbSink.requirements_saved,
            ),
        )
        WandbSink.requirements_saved = True
        self.step, self.arrays, self.config_has_data, self.exit_code = 0, None, False, 0

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._config_data(metrics)
        self.step = max(self.step, step)
        self.run.log(dict(metrics), step=step)

    def log_media(self, arrays: dict[str, np.ndarray], step: int) -> None:
        from trainables import readouts

        images = {key: self.wandb.Image(image, caption=f"{caption} (step {step})")
                  for key, (image, caption) in readouts.member_images(self.cfg, arrays).items()}
        self.arrays = arrays
        # W&B drops records at a step below the last one; a diverged run's readout belongs to an earlier step.
        self.step = max(self.step, step)
        self.run.log(images, step=self.step)

    def summary(self, metrics: dict[str, float | str]) -> None:
        self._config_data(metrics)  # a member stopped before its first step logs nothing before its summary
        self.run.summary.update(dict(metrics))

    def _config_data(self, metrics: dict) -> None:
        """Put the diversity measures in the run's config, once."""
        if not self.config_has_data:
            self.run.config.update({k: v for k, v in metrics.items() if k.startswith("data/")}, allow_val_change=True)
            self.config_has_data = True

    def mark_failed(self) -> None:
        self.exit_code = 1

    def close(self) -> None:
        if self.arrays is not None:
            path = Path(self.run.dir).parent / "attention.npz"  # beside the offline run's records, synced with them
            np.savez_compressed(path, **self.arrays)
            artifact = self.wandb.Artifact(f"attention-{self.run.id}", type="attention",
                                           description="attention.npz of the member's final readout",
                                           metadata={k: list(np.shape(v)) for k, v in self.arrays.items()})
            artifact.add_file(str(path), name="attention.npz", policy="immutable")  # no copy into ~/.local/share
            self.run.log_artifact(artifact)
        self.run.finish(exit_code=self.exit_code)


def offline_notice(kind: str, why: str, target: str) -> str:
    """The one line an offline W&B run prints: why it is offline and the command that uploads it (short: a search
    prints one per command, and a train one per run)."""
    return f"W&B: offline {kind} ({why}); upload: wandb sync {target}"


def shown_path(path: Path) -> str:
    """`path` relative to the working directory when under it (as the user typed --out), else absolute."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def resolve_wandb_mode(requested: str) -> tuple[str, str]:
    """(mode, reason): the W&B mode a member will use. Never one that prompts for a login or waits on a dead server.

    `auto` takes WANDB_MODE when it is set; online (asked for or from auto) needs credentials (WANDB_API_KEY,
    WANDB_IDENTITY_TOKEN_FILE or a ~/.netrc entry from `wandb login`) and a server that answers within
    PROBE_TIMEOUT_S, else it falls back to offline.
    """
    if requested not in WANDB_MODES:
        raise ConfigError("logging.mode", f"must be one of {', '.join(WANDB_MODES)}, got {requested!r}")
    mode = requested
    if mode == "auto":
        mode = _ENV_MODES.get(os.environ.get("WANDB_MODE", "").strip().lower(), "auto")
    if mode in ("offline", "disabled"):
        return mode, f"logging.mode={requested}" if requested != "auto" else f"WANDB_MODE={mode}"
    base_url = os.environ.get("WANDB_BASE_URL", DEFAULT_BASE_URL)
    if not has_credentials(base_url):
        return "offline", "no W&B credentials; `wandb login` to log online"
    if not server_answers(base_url):
        return "offline", f"{base_url} does not answer"
    return "online", "logged in"


def has_credentials(base_url: str) -> bool:
    """Whether wandb would find credentials for this server without asking: env vars or a .netrc entry."""
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    import netrc

    host = urlparse(base_url).hostname or ""
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc")
    try:
        return path.is_file() and netrc.netrc(str(path)).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


@lru_cache(maxsize=8)
def server_answers(base_url: str, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """A TCP connection to the server opens within `timeout` (DNS included); asked once per process."""
    url = urlparse(base_url)
    port = url.port or (443 if url.scheme == "https" else 80)
    answered = threading.Event()

    def probe() -> None:
        try:
            with socket.create_connection((url.hostname, port), timeout=timeout):
                answered.set()
        except OSError:
            pass

    thread = threading.Thread(target=probe, daemon=True)  # a daemon: a hung DNS lookup cannot hold the member
    thread.start()
    thread.join(timeout)
    return answered.is_set()


def _run_id(wandb_dir: Path, resume: bool) -> tuple[str, bool]:
    """The W&B run id of this member and whether to resume it: the earlier attempt's id when resuming, else new."""
    id_file = wandb_dir / RUN_ID_FILE
    if resume and id_file.exists():
        return id_file.read_text().strip(), True
    alphabet = string.ascii_lowercase + string.digits
    run_id = "".join(secrets.choice(alphabet) for _ in range(8))
    wandb_dir.mkdir(parents=True, exist_ok=True)
    id_file.write_text(run_id + "\n")
    return run_id, False


def run_name(cfg) -> str:
    """A readable run name: the task's name for its data settings and the seed, e.g. l3-15_t4_s0."""
    return f"{task_of(cfg).run_name(cfg.task)}_s{cfg.seed}"

