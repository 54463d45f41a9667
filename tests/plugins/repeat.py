"""A task with only the required hooks: a random string, then the same string again. The second half can be
predicted by looking back (an induction head's job) or, for strings seen often enough, from memory. Diversity knob:
how many distinct strings training shows; OOD strings are fresh."""
from dataclasses import dataclass

import torch

from trainables.errors import require
from trainables.tasks import Batch, Task


@dataclass
class RepeatConfig:
    name: str = "repeat"
    n_symbols: int = 16  # tokens 1..n_symbols (0 is unused)
    length: int = 6  # the string's length: each sequence is the string twice
    n_train_strings: int = 64  # the pool training strings are drawn from (the knob); OOD strings are fresh
    pool_seed: int = 0  # which pool: the same for every trial of a sweep


class Repeat(Task):
    """Say it again: copy a random string once it starts repeating."""

    name = "repeat"
    config = RepeatConfig
    knobs = ("task.n_train_strings",)

    def validate(self, cfg):
        require(("task.n_symbols", cfg.n_symbols >= 2, "must be >= 2"),
                ("task.length", cfg.length >= 2, "must be >= 2"),
                ("task.n_train_strings", cfg.n_train_strings >= 1, "must be >= 1"))

    def dims(self, cfg):
        return cfg.n_symbols + 1, 2 * cfg.length  # (d_vocab, n_ctx)

    def sample(self, cfg, n, generator, split="train", pad_to=None):
        if split == "train":  # a string of the fixed pool, drawn with this trial's generator
            pool = torch.randint(1, cfg.n_symbols + 1, (cfg.n_train_strings, cfg.length),
                                 generator=torch.Generator().manual_seed(cfg.pool_seed))  # (P, length)
            strings = pool[torch.randint(cfg.n_train_strings, (n,), generator=generator)]  # (B, length)
        else:  # "fresh": a new random string, almost surely in no pool
            strings = torch.randint(1, cfg.n_symbols + 1, (n, cfg.length), generator=generator)  # (B, length)
        tokens = torch.cat([strings, strings], 1)  # (B, T)
        targets = torch.roll(tokens, -1, 1)  # the next token; the last position is never scored
        positions = torch.arange(tokens.shape[1])
        scored = (positions >= cfg.length) & (positions < tokens.shape[1] - 1)  # (T,): inside the repeat
        loss_mask = scored.expand(n, -1).clone()  # (B, T)
        return Batch(tokens, targets, loss_mask, labels=loss_mask.long())

    def eval_splits(self, cfg):
        return {"id": "train", "ood": "fresh"}


TASK = Repeat()
