"""Plugins written against the task API before views and before batch_sampler was the one sampling hook
(docs/EXTENDING.md of 2026-11-26, verbatim): registering one adapts it, once, with a DeprecationWarning
(trainables/tasks/legacy.py); tests/unit/test_legacy_plugins.py holds them to working as they did."""
import torch

from tests.plugins.repeat import RepeatConfig
from trainables.errors import require
from trainables.tasks import Batch, Panel, PanelSection, Task


class Repeat(Task):
    """tests/plugins/repeat.py as docs/EXTENDING.md wrote it before batch_sampler was the one sampling hook."""

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



class PackedRepeat(Repeat):
    """With the old optional batch_sampler(cfgs, device): a pack's training batches at once, each member's strings from
    its own stream (members of a pack: one config, since member_fields is empty)."""

    def batch_sampler(self, cfgs, device):
        cfg = cfgs[0]
        pool = torch.randint(1, cfg.n_symbols + 1, (cfg.n_train_strings, cfg.length),
                             generator=torch.Generator().manual_seed(cfg.pool_seed)).to(device)  # (M, length)
        positions = torch.arange(2 * cfg.length, device=device)
        scored = (positions >= cfg.length) & (positions < 2 * cfg.length - 1)  # (T,)

        def draw(n, draws):
            strings = pool[draws.randint(0, cfg.n_train_strings, n)]  # (P, n, length)
            tokens = torch.cat([strings, strings], -1)  # (P, n, T)
            loss_mask = scored.expand(tokens.shape).clone()
            return Batch(tokens, torch.roll(tokens, -1, -1), loss_mask, loss_mask.long())

        return draw


class ShownOnItsTask(Repeat):
    """How it is shown, set on the Task class, as tasks did before views."""

    headline = ("ood/acc", "id/loss", "data/n_train_strings")
    short_names = {"ood/acc": "copies"}
    dashboard = (PanelSection("Only this", "The one section the task set.", (Panel("line", ("id/loss",), "id/loss"),)),)
    figures_module = "tests.plugins.shown"

    def figures(self, arrays):
        from matplotlib.figure import Figure

        return {"legacy/override": Figure()}


TASK, PACKED, SHOWN_ON_ITS_TASK = Repeat(), PackedRepeat(), ShownOnItsTask()
