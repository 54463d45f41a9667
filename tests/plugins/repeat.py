"""A task with the required hooks (and member_fields): a random string, then the same string again. The second half can be
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
    member_fields = ("n_train_strings",)  # members of a pack may differ in it: one pool per member

    def validate(self, cfg):
        require(("task.n_symbols", cfg.n_symbols >= 2, "must be >= 2"),
                ("task.length", cfg.length >= 2, "must be >= 2"),
                ("task.n_train_strings", cfg.n_train_strings >= 1, "must be >= 1"))

    def dims(self, cfg):
        return cfg.n_symbols + 1, 2 * cfg.length  # (d_vocab, n_ctx)

    def batch_sampler(self, cfgs, device, split="train"):
        cfg = cfgs[0]  # the members' configs: equal but for n_train_strings (member_fields)
        pools = [torch.randint(1, cfg.n_symbols + 1, (c.n_train_strings, cfg.length),
                               generator=torch.Generator().manual_seed(cfg.pool_seed)) for c in cfgs]
        pool = torch.nn.utils.rnn.pad_sequence(pools, batch_first=True).to(device)  # (P, largest pool, length)
        sizes = torch.tensor([c.n_train_strings for c in cfgs], device=device)  # (P,)
        positions = torch.arange(2 * cfg.length, device=device)
        scored = (positions >= cfg.length) & (positions < 2 * cfg.length - 1)  # (T,): inside the repeat

        def draw(n, draws):  # draws: each member's own random stream, every result (P, ...)
            if split == "train":  # a string of the member's pool
                index = draws.randint(0, sizes, n)  # (P, n)
                strings = pool.gather(1, index[..., None].expand(-1, -1, cfg.length))  # (P, n, length)
            else:  # "fresh": a new random string, almost surely in no pool
                strings = draws.randint(1, cfg.n_symbols + 1, n, cfg.length)  # (P, n, length)
            tokens = torch.cat([strings, strings], -1)  # (P, n, T)
            targets = torch.roll(tokens, -1, -1)  # the next token; the last position is never scored
            loss_mask = scored.expand(tokens.shape).clone()  # (P, n, T)
            return Batch(tokens, targets, loss_mask, labels=loss_mask.long())

        return draw

    def eval_splits(self, cfg):
        return {"id": "train", "ood": "fresh"}


TASK = Repeat()
