"""Gradient training settings (`optim:`) and the phases a model's training is made of.

A run is a list of phases, each one optimizer for a number of steps at a batch size; a model declares its own
(models/: `ModelSpec.phases`). The one-step model's Algorithm 1 configures itself under `model:` and ignores `optim:`.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import torch

from trainables.errors import require

OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}
COMPILE = ("auto", "always", "never", "reduce-overhead")  # not on/off, which YAML reads as booleans
# `optim.compile=auto` compiles runs of at least this many steps: on 2 CPU cores compiling the paper transformer's step
# takes about 2.5 s with inductor's cache warm and 6.5-22 s cold (plus importing torch._dynamo), and the compiled step
# is 1.3x faster: at 5,000 steps it was a wash, it pays from about 6,000 on (docs/PERFORMANCE.md).
COMPILE_AUTO_STEPS = 10000


@dataclass
class OptimConfig:
    """Gradient training of the transformer (the one-step model's Algorithm 1 is configured under `model`)."""

    name: str = "adam"  # adam | adamw | sgd
    lr: float = 1e-4  # learning rate
    weight_decay: float = 0.0  # decoupled for adamw, L2 for adam and sgd
    batch_size: int = 64  # fresh training sequences per step
    max_steps: int = 20000  # training steps unless early stopping ends the run sooner
    compile: str = "auto"  # auto | always | never | reduce-overhead: torch.compile the training step (auto: runs of
    # >= COMPILE_AUTO_STEPS; reduce-overhead: compiled and replayed as CUDA graphs, device=cuda only)

    def validate(self) -> None:
        require(
            ("optim.name", self.name in OPTIMIZERS, f"must be one of {', '.join(OPTIMIZERS)}"),
            ("optim.lr", self.lr > 0, "must be > 0"),
            ("optim.weight_decay", self.weight_decay >= 0, "must be >= 0"),
            ("optim.batch_size", self.batch_size >= 1, "must be >= 1"),
            ("optim.max_steps", self.max_steps >= 1, "must be >= 1"),
            ("optim.compile", self.compile in COMPILE, f"must be one of {', '.join(COMPILE)}"),
            ("optim.compile", self.compile != "always" or cpp_compiler() is not None,
             "torch.compile needs a C++ compiler (g++, or $CXX) and none is installed: use auto or never"),
        )

    def build(self, parameters) -> torch.optim.Optimizer:
        # fused: one kernel for the whole update instead of a dozen per parameter (the step is launch-bound)
        return OPTIMIZERS[self.name](parameters, lr=self.lr, weight_decay=self.weight_decay, fused=True)

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
