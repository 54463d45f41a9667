"""The memory a trial needs, estimated before anything runs: a batch, an evaluation set or a packed population too
large for the machine is one line of bad input naming its key, not a kernel's out-of-memory kill after the output
directory exists.

The estimate is deliberately rough and on the high side (the models' activation_floats); it only has to tell a
config that cannot fit from one that can, and is compared with what the device has available right now.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch

from trainables.errors import ConfigError
from trainables.models import MODELS
from trainables.tasks import task_of

FLOAT_BYTES = 4
BATCH_TENSORS_BYTES = 4 * 8  # tokens, targets, labels (int64) and the loss mask, per position
GIB = 2 ** 30


def needs(cfg) -> dict[str, int]:
    """Config key -> bytes at the peak its batch causes: each training batch, and each evaluation split (its
    sequences kept for the whole run plus one forward over all of them at once)."""
    task, spec = task_of(cfg), MODELS[cfg.model.name]
    d_vocab, n_ctx = task.dims(cfg.task)
    d_in = task.input_width(cfg.task)
    scored = 1 if task.query_only(cfg.task) else n_ctx
    # A continuous task's positions also hold its inputs and real-valued targets.
    per_position = BATCH_TENSORS_BYTES + (0 if d_in is None else FLOAT_BYTES * (d_in + d_vocab))
    activations = spec.activation_floats(cfg.model, d_vocab, n_ctx, scored, **({} if d_in is None else {"d_in": d_in}))
    per_sequence = FLOAT_BYTES * activations + per_position * n_ctx
    # A training step keeps the forward's activations and their gradients.
    peaks = {key: 2 * n * per_sequence for key, n in spec.batch_sizes(cfg.model, cfg.optim).items()}
    n_other_splits = len(task.eval_splits(cfg.task)) - 1
    kept = per_position * n_ctx * (cfg.eval.n_id + n_other_splits * cfg.eval.n_ood)
    peaks["eval.n_id"] = cfg.eval.n_id * per_sequence
    peaks["eval.n_ood"] = cfg.eval.n_ood * per_sequence
    return {key: peak + kept for key, peak in peaks.items()}


def available(device: str) -> int:
    """Bytes the device can still allocate: free GPU memory, or the kernel's MemAvailable (within a cgroup limit)."""
    if device == "cuda":
        return torch.cuda.mem_get_info()[0]
    free = _meminfo_available()
    limit = _cgroup_room()
    return min(free, limit) if limit is not None else free


def check(cfg) -> None:
    """Raise ConfigError naming the key whose batch would not fit in what the device has available (a packed
    population is weighed by sweep/tuner.py against the cluster's nodes)."""
    refuse_beyond(needs(cfg), available(cfg.device), f"{cfg.device} has", cfg)


def refuse_beyond(peaks: dict[str, int], room: int, whose: str, cfg) -> None:
    """ConfigError naming the batch key of the largest of `peaks` (bytes, as `needs(cfg)`) when it exceeds `room`
    bytes; `whose` says where the room is ("cuda has")."""
    key = max(peaks, key=peaks.get)
    if peaks[key] > room:
        raise ConfigError(key, f"a training run needs about {peaks[key] / GIB:.2f} GiB at its peak ({key}="
                               f"{_value(cfg, key)}), but {whose} {room / GIB:.2f} GiB available; make it smaller")


def _value(cfg, key: str):
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)


def _meminfo_available() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _cgroup_room() -> int | None:
    """What a cgroup v2 memory limit leaves (containers: MemAvailable shows the host's), or None without one."""
    cgroup = Path("/sys/fs/cgroup")
    try:
        limit, current = (cgroup / "memory.max").read_text().strip(), int((cgroup / "memory.current").read_text())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else int(limit) - current
