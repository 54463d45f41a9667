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
    member_fields = ("n_means",)  # members of a pack may differ in it: one pool per member
    success_metric, success_above = "ood/loss", False  # the mean squared error of the guesses, at most eval.threshold

    def validate(self, cfg):
        require(("task.length", cfg.length >= 2, "must be >= 2"),
                ("task.n_means", cfg.n_means >= 1, "must be >= 1"),
                ("task.spread", cfg.spread > 0, "must be > 0"))

    def dims(self, cfg):
        return 1, cfg.length  # (d_out, n_ctx): one number predicted per position

    def input_width(self, cfg):
        return 1  # one number read per position: a continuous task

    def batch_sampler(self, cfgs, device, split="train"):
        cfg = cfgs[0]  # the members' configs: equal but for n_means (member_fields)
        pools = [torch.randn(c.n_means, generator=torch.Generator().manual_seed(cfg.pool_seed)) for c in cfgs]
        pool = torch.nn.utils.rnn.pad_sequence(pools, batch_first=True).to(device)  # (P, largest pool)
        sizes = torch.tensor([c.n_means for c in cfgs], device=device)  # (P,)
        scored = torch.arange(cfg.length, device=device) < cfg.length - 1  # (T,): the last position is not

        def draw(n, draws):  # draws: each member's own random stream, every result (P, ...), float64
            if split == "train":  # a mean of the member's pool
                means = pool.gather(1, draws.randint(0, sizes, n))  # (P, n)
            else:  # "fresh": a new mean, almost surely in no pool
                means = draws.normal(n).float()  # (P, n)
            numbers = means[..., None] + cfg.spread * draws.normal(n, cfg.length).float()  # (P, n, T)
            inputs = numbers[..., None]  # (P, n, T, 1)
            targets = torch.roll(inputs, -1, -2)  # the next number
            tokens = torch.zeros(numbers.shape, dtype=torch.long, device=device)  # every position is of one kind
            labels = torch.arange(cfg.length, device=device).expand(numbers.shape).clone()  # numbers seen, minus one
            return Batch(tokens, targets, scored.expand(numbers.shape).clone(), labels, inputs=inputs)

        return draw

    def eval_splits(self, cfg):
        return {"id": "train", "ood": "fresh"}


TASK = RunningMean()
