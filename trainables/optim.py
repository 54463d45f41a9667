"""Gradient training settings (`optim:`) and the phases a model's training is made of.

A run is a list of phases, each one optimizer for a number of steps at a batch size; a model declares its own
(models/: `ModelSpec.phases`). The one-step model's Algorithm 1 configures itself under `model:` and ignores `optim:`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from trainables.errors import require

OPTIMIZERS = {"adam": torch.optim.Adam, "adamw": torch.optim.AdamW, "sgd": torch.optim.SGD}


@dataclass
class OptimConfig:
    """Gradient training of the transformer (the one-step model's Algorithm 1 is configured under `model`)."""

    name: str = "adam"  # adam | adamw | sgd
    lr: float = 1e-4  # learning rate
    weight_decay: float = 0.0  # decoupled for adamw, L2 for adam and sgd
    batch_size: int = 64  # fresh training sequences per step
    max_steps: int = 20000  # training steps unless early stopping ends the run sooner

    def validate(self) -> None:
        require(
            ("optim.name", self.name in OPTIMIZERS, f"must be one of {', '.join(OPTIMIZERS)}"),
            ("optim.lr", self.lr > 0, "must be > 0"),
            ("optim.weight_decay", self.weight_decay >= 0, "must be >= 0"),
            ("optim.batch_size", self.batch_size >= 1, "must be >= 1"),
            ("optim.max_steps", self.max_steps >= 1, "must be >= 1"),
        )

    def build(self, parameters) -> torch.optim.Optimizer:
        return OPTIMIZERS[self.name](parameters, lr=self.lr, weight_decay=self.weight_decay)


@dataclass
class Phase:
    """`steps` optimizer steps, each on `batch_size` fresh training sequences."""

    optimizer: torch.optim.Optimizer
    steps: int
    batch_size: int
