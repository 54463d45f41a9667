"""Gradient training settings (`optim:`) and the phases a model's training is made of.

A run is a list of phases, each one optimizer for a number of steps at a batch size; a model declares its own
(models/: `ModelSpec.phases`). The one-step model's Algorithm 1 configures itself under `model:` and ignores `optim:`.
"""
from __future__ import annotations

import inspect
import math
import os
import shutil
from dataclasses import dataclass
from typing import Callable

import torch

from trainables.errors import require

SCHEDULES = ("constant", "cosine", "linear")  # the learning rate after the warm-up: held, or decayed to optim.min_lr
COMPILE = ("auto", "always", "never", "reduce-overhead")  # not on/off, which YAML reads as booleans
# `optim.compile=auto` compiles runs of at least this many steps: on 2 CPU cores compiling the paper transformer's step
# takes about 2.5 s with inductor's cache warm and 6.5-22 s cold (plus importing torch._dynamo), and the compiled step
# is 1.3x faster: at 5,000 steps it was a wash, it pays from about 6,000 on (docs/PERFORMANCE.md).
COMPILE_AUTO_STEPS = 10000


# torch.optim's methods under their decorators (each keeps what it wraps as __wrapped__, functools.wraps'
# convention), found once here rather than at every step.
_ADD_PARAM_GROUP, _ZERO_GRAD, _STATE_DICT, _LOAD_STATE_DICT = (inspect.unwrap(getattr(torch.optim.Optimizer, name))
                                                              for name in ("add_param_group", "zero_grad",
                                                                           "state_dict", "load_state_dict"))


class _Eager:
    """torch.optim's methods, run as they are, without the decorators that import torch._dynamo on their first call
    (1.2-1.4 s of CPU, a quarter of a trial worker's start on 2 cores) only to tell a compiler not to trace them into
    a graph: `torch._disable_dynamo` on add_param_group, zero_grad, state_dict and load_state_dict, and step's wrapper,
    which sets grad mode to `differentiable` and breaks the graph around the update. headsweep compiles a member's
    forward and backward (population.py), never an optimizer's method: they only ever run eagerly, where the
    decorators do nothing else. The state, its state_dict and every update are torch's own (bit for bit:
    tests/unit/test_optim.py, which also checks that training imports no torch._dynamo)."""

    _step: Callable  # the torch class's step, undecorated: set for each subclass

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        cls._step = staticmethod(inspect.unwrap(super(_Eager, cls).step))

    def add_param_group(self, param_group: dict) -> None:
        _ADD_PARAM_GROUP(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        _ZERO_GRAD(self, set_to_none)

    def state_dict(self) -> dict:
        return _STATE_DICT(self)

    def load_state_dict(self, state_dict: dict) -> None:
        _LOAD_STATE_DICT(self, state_dict)

    def step(self, closure=None):
        with torch.set_grad_enabled(self.defaults["differentiable"]):
            return self._step(self, closure)


class Adam(_Eager, torch.optim.Adam):
    pass


class AdamW(_Eager, torch.optim.AdamW):
    pass


class SGD(_Eager, torch.optim.SGD):
    pass


OPTIMIZERS = {"adam": Adam, "adamw": AdamW, "sgd": SGD}


@dataclass
class OptimConfig:
    """Gradient training of the transformer (the one-step model's Algorithm 1 is configured under `model`)."""

    name: str = "adam"  # adam | adamw | sgd
    lr: float = 1e-4  # learning rate
    weight_decay: float = 0.0  # decoupled for adamw, L2 for adam and sgd
    batch_size: int = 64  # fresh training sequences per step
    max_steps: int = 20000  # training steps unless early stopping ends the run sooner
    schedule: str = "constant"  # constant | cosine | linear: after the warm-up, lr held, or decayed to min_lr at
    # max_steps along a half cosine or a line (lr_at)
    warmup_steps: int = 0  # the learning rate rises linearly from 0 to lr over the first this many steps
    min_lr: float = 0.0  # where a cosine or linear decay ends
    clip_norm: float = 0.0  # each member's gradient scaled to at most this global norm before the step (0: never)
    compile: str = "auto"  # auto | always | never | reduce-overhead: torch.compile the training step (auto: runs of
    # >= COMPILE_AUTO_STEPS; reduce-overhead: compiled and replayed as CUDA graphs, device=cuda only)

    def validate(self) -> None:
        require(
            ("optim.name", self.name in OPTIMIZERS, f"must be one of {', '.join(OPTIMIZERS)}"),
            ("optim.lr", self.lr > 0, "must be > 0"),
            ("optim.weight_decay", self.weight_decay >= 0, "must be >= 0"),
            ("optim.batch_size", self.batch_size >= 1, "must be >= 1"),
            ("optim.max_steps", self.max_steps >= 1, "must be >= 1"),
            ("optim.schedule", self.schedule in SCHEDULES, f"must be one of {', '.join(SCHEDULES)}"),
            ("optim.warmup_steps", 0 <= self.warmup_steps <= self.max_steps,
             f"must be >= 0 and at most optim.max_steps ({self.max_steps})"),
            ("optim.min_lr", 0 <= self.min_lr <= self.lr, f"must be >= 0 and at most optim.lr ({self.lr})"),
            ("optim.min_lr", self.min_lr == 0 or self.schedule != "constant",
             "a constant schedule never decays to it: set optim.schedule=cosine or linear, or leave min_lr at 0"),
            ("optim.clip_norm", self.clip_norm >= 0, "must be >= 0 (0: no clipping)"),
            ("optim.compile", self.compile in COMPILE, f"must be one of {', '.join(COMPILE)}"),
            ("optim.compile", self.compile != "always" or cpp_compiler() is not None,
             "torch.compile needs a C++ compiler (g++, or $CXX) and none is installed: use auto or never"),
        )

    def build(self, parameters) -> torch.optim.Optimizer:
        # fused: one kernel for the whole update instead of a dozen per parameter (the step is launch-bound)
        return OPTIMIZERS[self.name](parameters, lr=self.lr, weight_decay=self.weight_decay, fused=True)

    def lr_at(self, step: int) -> float:
        """The learning rate of optimizer step `step` (counted from 0): linear from 0 to lr over warmup_steps, then
        lr held (constant), or decayed from lr to min_lr at max_steps along a half cosine or a line. The same values
        as PyTorch's LinearLR warm-up followed by CosineAnnealingLR or LinearLR (tests/unit/test_schedules.py), as a
        function of the step alone: a run resumed mid-schedule goes on where it was."""
        if step < self.warmup_steps:
            return self.lr * step / self.warmup_steps
        if self.schedule == "constant":
            return self.lr
        progress = min(1.0, (step - self.warmup_steps) / max(1, self.max_steps - self.warmup_steps))
        left = (1 + math.cos(math.pi * progress)) / 2 if self.schedule == "cosine" else 1 - progress
        return self.min_lr + (self.lr - self.min_lr) * left

    def compile_mode(self) -> str | None:
        """torch.compile's mode for the training step ("default" or "reduce-overhead"), or None: not compiled."""
        if self.compile == "auto":
            return "default" if self.max_steps >= COMPILE_AUTO_STEPS and cpp_compiler() is not None else None
        return {"always": "default", "reduce-overhead": "reduce-overhead"}.get(self.compile)


def cpp_compiler() -> str | None:
    """The C++ compiler torch.compile's inductor would use, if one is installed."""
    return shutil.which(os.environ.get("CXX", "g++"))


@dataclass
class Phase:
    """`steps` optimizer steps, each on `batch_size` fresh training sequences."""

    optimizer: torch.optim.Optimizer
    steps: int
    batch_size: int
    lr: Callable[[int], float] | None = None  # the learning rate of the phase's step t (from 0), set before each
    # step (logged as train/lr); None: the optimizer's own throughout
    clip_norm: float = 0.0  # each member's gradient scaled to at most this global norm before the step (0: never)
