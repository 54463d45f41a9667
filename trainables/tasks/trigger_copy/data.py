"""Trigger-copy task (SPEC §1): z = (f_1..f_l1, t, o, g_1..g_l2, t), predict o at the query (the second t).

Tokens are 0-indexed: triggers are 0..N_trg-1, outputs and fillers N_trg..N-1. Positions in code are 0-indexed:
the first trigger sits at index l1, the output at l1 + 1, the query at T - 1 with T = l1 + l2 + 3.
Everything is drawn in a fixed order from one explicit torch.Generator, so a batch is a function of the seed.
Per-position labels (FILLER, TRIGGER, OUTPUT, QUERY, PAD) say what each position holds; only the query is scored.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from trainables.tasks import PAD_LABEL, Batch
from trainables.tasks.lengths import LengthsConfig, distribution

SPLITS = ("train", "displaced", "all_pairs")
OOD_SPLITS = ("displaced", "all_pairs")

# Per-position labels, as in transformer-birth: metrics slice by them.
PAD, FILLER, TRIGGER, OUTPUT, QUERY = PAD_LABEL, 0, 1, 2, 3


@dataclass
class TriggerCopyConfig:
    """The trigger-copy data model and its OOD protocol."""

    name: str = "trigger_copy"
    vocab_size: int = 32  # N: tokens 0..N-1
    max_len: int = 36  # L: every sequence has T = l1 + l2 + 3 <= L - 1
    n_triggers: int = 4  # N_trg: tokens 0..N_trg-1 are triggers
    lengths: LengthsConfig = field(default_factory=LengthsConfig)
    ood_split: str = "displaced"  # displaced (paper §4.1: same T, trigger moved) | all_pairs (Definition 2)
    n_pairs_per_cell: int = 4  # final readout: all_pairs sequences per (l1, l2) cell of the OOD accuracy matrix


def valid_pairs(max_len: int) -> torch.Tensor:
    """(P, 2) every (l1, l2) with l1, l2 >= 1 and l1 + l2 + 3 <= L - 1, in lexicographic order."""
    top = max_len - 5  # largest l1 (or l2) with the other >= 1
    grid = torch.cartesian_prod(torch.arange(1, top + 1), torch.arange(1, top + 1)).reshape(-1, 2)
    return grid[grid.sum(1) + 3 <= max_len - 1]


def sample(cfg: TriggerCopyConfig, n: int, generator: torch.Generator, split: str = "train",
           pad_to: int | None = None) -> Batch:
    """n sequences of `split`: train (l ~ D_l, l1 = l2 = l), displaced or all_pairs (SPEC §1), scored at the query.

    Right-padded to `pad_to` positions (at least the longest sequence) or, by default, to the longest sequence."""
    q = distribution(cfg.lengths, cfg.n_triggers)
    support = torch.tensor(list(q))
    if split == "train":
        probs = torch.tensor(list(q.values()), dtype=torch.float64)
        l1 = support[torch.multinomial(probs, n, replacement=True, generator=generator)]
        l2 = l1.clone()
    elif split == "displaced":
        # l ~ Unif(S \ {min S}) (or Unif(S) if that is empty); l1 ~ Unif({1..2l-1} \ {l}); l2 = 2l - l1.
        lengths = support[1:] if len(support) > 1 else support
        l = lengths[torch.randint(len(lengths), (n,), generator=generator)]
        u = 1 + (torch.rand(n, generator=generator, dtype=torch.float64) * (2 * l - 2)).long()  # Unif{1..2l-2}
        l1 = torch.where(u >= l, u + 1, u)  # skip l itself
        l2 = 2 * l - l1
    elif split == "all_pairs":
        # Stratified rather than i.i.d.: pairs cycle in a shuffled order, so every pair gets n // P or n // P + 1
        # sequences and the per-(l1, l2) accuracy matrix has no empty cell once n >= P.
        pairs = valid_pairs(cfg.max_len)
        order = torch.randperm(len(pairs), generator=generator)
        l1, l2 = pairs[order[torch.arange(n) % len(pairs)]].unbind(1)
    else:
        raise ValueError(f"split: must be one of {', '.join(SPLITS)}, got {split!r}")
    return _fill(cfg, l1, l2, generator, pad_to)


def _fill(cfg: TriggerCopyConfig, l1: torch.Tensor, l2: torch.Tensor, generator: torch.Generator,
          pad_to: int | None) -> Batch:
    """Draw fillers, triggers and outputs for given (l1, l2) and lay them out, all at once."""
    n = len(l1)
    query = l1 + l2 + 2  # (B,) index of the second trigger
    width = int(query.max()) + 1
    n_other = cfg.vocab_size - cfg.n_triggers
    tokens = cfg.n_triggers + torch.randint(n_other, (n, width), generator=generator)  # (B, T_max) fillers
    trigger = torch.randint(cfg.n_triggers, (n,), generator=generator)
    output = cfg.n_triggers + torch.randint(n_other, (n,), generator=generator)

    rows = torch.arange(n)
    position = torch.arange(width).expand(n, width)  # (B, T_max)
    labels = torch.full((n, width), FILLER)
    for index, token, label in ((l1, trigger, TRIGGER), (l1 + 1, output, OUTPUT), (query, trigger, QUERY)):
        tokens[rows, index] = token
        labels[rows, index] = label
    padding = position > query[:, None]
    tokens[padding] = 0
    labels[padding] = PAD
    targets = torch.zeros_like(tokens)  # (B, T_max): only the query is scored, and it must predict the output o
    targets[rows, query] = output
    batch = Batch(tokens=tokens, targets=targets, loss_mask=labels == QUERY, labels=labels, query=query,
                  info={"l1": l1, "l2": l2})
    return batch if pad_to is None else batch.padded(pad_to)  # padded after the draws: the same sequences
