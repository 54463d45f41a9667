"""The memory a trial needs, estimated before anything runs: a batch, an evaluation set or a packed population too
large for the machine is one line of bad input naming its key, not a kernel's out-of-memory kill after the output
directory exists.

`needs(cfg, members)` is the peak, per batch key, of the tensors a trial of `members` such members trained as one
population holds (sweep/packing.py asks it for a pack; 1: a trial of one). It counts
- every member's parameters and buffers, their gradients and the optimizer's moments (Adam's two), and in a
  population its slice of the stacked parameters beside its own module's;
- every member's evaluation sets, kept for the whole run;
- for a training batch's key, every member's batch and what its step holds per sequence at the peak beyond it: the
  activations autograd saves and the gradients and temporaries alive beside them, for sequences as wide as the
  training batch's (Task.batch_width), measured on the CPU (vmapped over two members for a population) unless the
  model gives a formula (ModelSpec.activation_floats, weighed at n_ctx positions);
- for an evaluation split's key, one member's forward over all of that split's sequences at once, without gradients
  (train_members evaluates its members in turn), measured the same way at n_ctx positions (an upper bound where a
  task's evaluation sequences are shorter: 1.4x for configs/transformer_grid.yaml's).

It is the honest number, not a bound with a margin in it: 0.95-1.03 of the peak torch measured on an H200 for
bench/gpu.py's eager rows (the first row's cuBLAS workspaces aside; docs/PERFORMANCE.md), 0.92-1.07 of the whole
packed step measured on the CPU (tests/unit/test_memory.py holds it within 25%, bench/memory_estimate.py at the GPU's
sizes). Not counted: what a process holds once whatever it trains (the CUDA context, outside torch's allocator;
cuBLAS's workspaces, 32 MiB per thread that multiplies on a Hopper GPU, the forward's and the backward's), the caching
allocator's rounding (a block is a multiple of 512 bytes, and may be a larger free block left unsplit) and its
fragmentation, the draws' temporaries (a training batch's, below its step's peak in every config measured; the
evaluation sets', once at the start), and a task's metrics' own temporaries during an evaluation. CUDA graphs
(optim.compile=reduce-overhead) hold a memory pool of their own: on the H200 61 MiB against 1.2 MiB eager for one
trigger-copy transformer, 175 against 80 MiB for 64, 7,959 against 8,826 MiB for 64 regression transformers.
"""
from __future__ import annotations

import os
from itertools import chain
from pathlib import Path

import torch
from torch import nn
from torch.func import stack_module_state

from trainables.errors import ConfigError
from trainables.live_bytes import LiveBytes
from trainables.models import MODELS, build_model
from trainables.population import scored_loss, stacked_loss
from trainables.tasks import task_of

FLOAT_BYTES = 4
TOKEN_POSITION_BYTES = 3 * 8 + 1  # a token task's batch per position: tokens, targets, labels (int64), the loss mask
QUERY_BYTES = 8  # per sequence, where one position is scored: its index (int64)
MOMENTS = {"adam": 2, "adamw": 2}  # optimizer state per parameter, in parameters (SGD has none)
GIB = 2 ** 30


def needs(cfg, members: int = 1) -> dict[str, int]:
    """Config key -> bytes at the peak its batch causes in a trial of `members` members of this config trained as
    one population: each training batch's step (every member's at once) and each evaluation split's forward (one
    member's)."""
    task, spec = task_of(cfg), MODELS[cfg.model.name]
    d_vocab, n_ctx = task.dims(cfg.task)
    d_in = task.input_width(cfg.task)
    width, query_only = task.batch_width(cfg.task), task.query_only(cfg.task)

    def sequence(T: int) -> int:  # a batch's bytes per sequence of T positions
        position = TOKEN_POSITION_BYTES if d_in is None else 2 * 8 + 1 + FLOAT_BYTES * (d_in + d_vocab)
        return position * T + QUERY_BYTES * query_only

    copies = 2 + (members > 1) + (MOMENTS.get(cfg.optim.name, 0) if spec.uses_optim else 0)
    n_other_splits = len(task.eval_splits(cfg.task)) - 1
    held = members * (copies * FLOAT_BYTES * parameter_floats(cfg)
                      + cfg.eval.n_id * sequence(width) + n_other_splits * cfg.eval.n_ood * sequence(n_ctx))
    step = sequence(width) + FLOAT_BYTES * activation_floats(cfg, width, members)
    peaks = {key: members * n * step for key, n in spec.batch_sizes(cfg.model, cfg.optim).items()}
    evaluation = FLOAT_BYTES * activation_floats(cfg, n_ctx, training=False)
    peaks |= {key: n * evaluation for key, n in (("eval.n_id", cfg.eval.n_id), ("eval.n_ood", cfg.eval.n_ood))}
    return {key: int(held + peak) for key, peak in peaks.items()}


def activation_floats(cfg, width: int, members: int = 1, training: bool = True) -> float:
    """What one member's training step (or evaluation forward) holds per sequence of `width` positions at its peak
    beyond the batch, in float32-sized units, in a population of `members`: the model's own activation_floats (at
    n_ctx positions; for an evaluation too, an upper bound), or else measured on the CPU, once per config and shape in
    a process: a forward and backward of the model's loss (or its evaluation forward) on 2 and on 4 sequences of
    `width` positions, of one member or vmapped over two; the bytes alive after each operation compared
    (trainables/live_bytes.py): their largest growth per sequence. Tens of milliseconds for the built-in configs."""
    task, spec = task_of(cfg), MODELS[cfg.model.name]
    d_vocab, n_ctx = task.dims(cfg.task)
    d_in, query_only = task.input_width(cfg.task), task.query_only(cfg.task)
    own = spec.activation_floats(cfg.model, d_vocab, n_ctx, 1 if query_only else n_ctx,
                                 **({} if d_in is None else {"d_in": d_in}))
    if own is not None:
        return own
    members = min(members, 2)
    key = (id(spec), repr(cfg.model), d_vocab, n_ctx, d_in, width, query_only, members, training)
    if key not in _measured:
        with torch.random.fork_rng(devices=[]):
            model = build_model(spec, cfg.model, d_vocab, n_ctx, d_in)
        run = lambda n: _live(model, n, width, query_only, d_vocab, d_in, members, training)
        small, large = run(2), run(4)
        if len(small.timeline) == len(large.timeline):  # the same operations: compare them one by one
            growth = max(b - a for a, b in zip(small.timeline, large.timeline)) / (2 * members)
        else:  # other operations at other sizes (none of the built-ins'): the peaks at larger sizes
            small, large = run(8), run(16)
            growth = (large.peak - small.peak) / (8 * members)
        _measured[key] = growth / FLOAT_BYTES
    return _measured[key]


_measured: dict[tuple, float] = {}  # activation_floats measured, per model config and shape


def _live(model: nn.Module, n: int, width: int, query_only: bool, d_out: int, d_in: int | None, members: int,
          training: bool) -> LiveBytes:
    """The bytes alive during one forward and backward of the model's loss (population.scored_loss) on n sequences
    of `width` zeros, of each of `members` > 1 stacked copies of the model at once, vmapped; or during one evaluation
    forward (run_with_cache, and the float64 copy of its outputs train.loss_and_accuracy makes). Neither the batch
    nor the parameters count, as they are made before it."""
    lead = (members, n) if members > 1 else (n,)
    model_input = torch.zeros(*lead, width, dtype=torch.long) if d_in is None else torch.zeros(*lead, width, d_in)
    targets = torch.zeros(*lead, width, dtype=torch.long) if d_in is None else torch.zeros(*lead, width, d_out)
    query = torch.full(lead, width - 1) if query_only else None
    mask = torch.ones(*lead, width, dtype=torch.bool)
    model.train(training)
    if not training:
        with torch.no_grad(), LiveBytes() as live:
            logits, cache = model.run_with_cache(model_input, query)
            logits.double()
        return live
    if members > 1:
        params, buffers = stack_module_state([model] * members)
        loss = lambda: stacked_loss(model, params, buffers, model_input, query, targets, mask)[0].sum()
    else:
        loss = lambda: scored_loss(model, model_input, query, targets, mask)[0]
    model.zero_grad(set_to_none=True)
    with LiveBytes() as live:
        loss().backward()
    return live


def parameter_floats(cfg) -> int:
    """The elements of the model's parameters and buffers, counted on the model built on the CPU, once per config and
    shape in a process (on the meta device, torch would import torch._dynamo: seconds)."""
    task, spec = task_of(cfg), MODELS[cfg.model.name]
    key = (id(spec), repr(cfg.model), task.dims(cfg.task), task.input_width(cfg.task))
    if key not in _parameters:
        with torch.random.fork_rng(devices=[]):
            model = build_model(spec, cfg.model, *key[2], key[3])
        _parameters[key] = sum(t.numel() for t in chain(model.parameters(), model.buffers()))
    return _parameters[key]


_parameters: dict[tuple, int] = {}  # parameter_floats, per model config and shape


def available(device: str) -> int:
    """Bytes the device can still allocate: free GPU memory, or the kernel's MemAvailable (within a cgroup limit)."""
    if device == "cuda":
        return torch.cuda.mem_get_info()[0]
    free, limit = _meminfo_available(), _cgroup_room()
    return free if limit is None else min(free, limit)


def check(cfg) -> None:
    """Raise ConfigError naming the key whose batch would not fit in what the device has available (a packed
    population is weighed by sweep/tuner.py against the cluster's nodes)."""
    refuse_beyond(needs(cfg), available(cfg.device), f"{cfg.device} has", cfg)


def refuse_beyond(peaks: dict[str, int], room: int, whose: str, cfg) -> None:
    """ConfigError naming the batch key of the largest of `peaks` (bytes, as `needs(cfg)`) when it exceeds `room`
    bytes; `whose` says where the room is ("cuda has")."""
    key = max(peaks, key=peaks.get)
    section, name = key.split(".")  # optim.batch_size: its value is named in the message
    if peaks[key] > room:
        raise ConfigError(key, f"a training run needs about {peaks[key] / GIB:.2f} GiB at its peak ({key}="
                               f"{getattr(getattr(cfg, section), name)}), but {whose} {room / GIB:.2f} GiB available; "
                               "make it smaller")


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
