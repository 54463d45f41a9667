"""A continuous task: numbers drawn around one hidden mean, each to be predicted from those before it. The best guess
is a running mean shrunk toward the prior; a model that saw few means can instead snap to the nearest one it knows.
Diversity knob: how many distinct means training draws from; OOD means are fresh."""
from dataclasses import dataclass

import torch

from trainables.errors import require
from trainables.tasks import Batch, Task


@dataclass
class RunningMeanConfig:
    name: str = "running_mean"
    length: int = 8  # numbers per sequence
    n_means: int = 16  # the pool training means are drawn from (the knob); OOD means are fresh
    spread: float = 0.5  # the numbers' standard deviation around their mean
    pool_seed: int = 0  # which pool: the same for every trial of a sweep


class RunningMean(Task):
    """Guess the next number: each sequence's numbers share a hidden mean."""

    name = "running_mean"
    config = RunningMeanConfig
    knobs = ("task.n_means",)
    success_metric, success_above = "ood/loss", False  # the mean squared error of the guesses, at most eval.threshold

    def validate(self, cfg):
        require(("task.length", cfg.length >= 2, "must be >= 2"),
                ("task.n_means", cfg.n_means >= 1, "must be >= 1"),
                ("task.spread", cfg.spread > 0, "must be > 0"))

    def dims(self, cfg):
        return 1, cfg.length  # (d_out, n_ctx): one number predicted per position

    def input_width(self, cfg):
        return 1  # one number read per position: a continuous task

    def sample(self, cfg, n, generator, split="train"):
        if split == "train":  # a mean of the fixed pool, drawn with this trial's generator
            pool = torch.randn(cfg.n_means, generator=torch.Generator().manual_seed(cfg.pool_seed))  # (M,)
            means = pool[torch.randint(cfg.n_means, (n,), generator=generator)]  # (B,)
        else:  # "fresh": a new mean, almost surely in no pool
            means = torch.randn(n, generator=generator)  # (B,)
        numbers = means[:, None] + cfg.spread * torch.randn(n, cfg.length, generator=generator)  # (B, T)
        inputs = numbers[..., None]  # (B, T, 1)
        targets = torch.roll(inputs, -1, 1)  # the next number; the last position is never scored
        loss_mask = (torch.arange(cfg.length) < cfg.length - 1).expand(n, -1).clone()  # (B, T)
        tokens = torch.zeros(n, cfg.length, dtype=torch.long)  # every position is of one kind
        labels = torch.arange(cfg.length).expand(n, -1).clone()  # (B, T): how many numbers were seen, minus one
        return Batch(tokens, targets, loss_mask, labels, inputs=inputs)

    def eval_splits(self, cfg):
        return {"id": "train", "ood": "fresh"}


TASK = RunningMean()
