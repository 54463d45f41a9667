"""Trigger-copy task (SPEC §1): z = (f_1..f_l1, t, o, g_1..g_l2, t), predict o at the query (the second t).

Tokens are 0-indexed: triggers are 0..N_trg-1, outputs and fillers N_trg..N-1. Positions in code are 0-indexed:
the first trigger sits at index l1, the output at l1 + 1, the query at T - 1 with T = l1 + l2 + 3.
Per-position labels (FILLER, TRIGGER, OUTPUT, QUERY, PAD) say what each position holds; only the query is scored.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from trainables.tasks import PAD_LABEL, Batch
from trainables.streams import Draws
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


def sampler(cfgs: list[TriggerCopyConfig], device, split: str = "train") -> Callable[[int, Draws], Batch]:
    """The task's batch_sampler: draw(n, draws) -> a Batch of (P, n, T) tensors of `split`, scored at the query. Train
    (l ~ D_l, l1 = l2 = l): member p's lengths from its own D_l, its own trigger count, every sequence padded to the
    members' longest possible training sequence, 2 max(l) + 3. Displaced and all_pairs (SPEC §1), evaluation splits
    drawn by sample() alone (one member, GeneratorDraws): at L - 1 positions, which sample() cuts to the longest."""
    if split == "train":
        return _train(cfgs, device)
    if split not in OOD_SPLITS:
        raise ValueError(f"split: must be one of {', '.join(SPLITS)}, got {split!r}")
    cfg, n_triggers = cfgs[0], torch.tensor([cfgs[0].n_triggers])

    def draw(n: int, draws: Draws) -> Batch:
        if split == "displaced":
            # l ~ Unif(S \ {min S}) (or Unif(S) if that is empty); l1 ~ Unif({1..2l-1} \ {l}); l2 = 2l - l1.
            support = torch.tensor(list(distribution(cfg.lengths, cfg.n_triggers)))
            lengths = support[1:] if len(support) > 1 else support
            l = lengths[draws.randint(0, len(lengths), n)]  # (1, n)
            u = 1 + (draws.uniform(n) * (2 * l - 2)).long()  # (1, n): Unif{1..2l-2}
            l1 = torch.where(u >= l, u + 1, u)  # skip l itself
            return _fill(cfg, n_triggers, l1, 2 * l - l1, draws, cfg.max_len - 1)
        # Stratified rather than i.i.d.: pairs cycle in a shuffled order, so every pair gets n // P or n // P + 1
        # sequences and the per-(l1, l2) accuracy matrix has no empty cell once n >= P.
        pairs = valid_pairs(cfg.max_len)
        order = torch.randperm(len(pairs), generator=draws.generator)  # sample()'s generator (GeneratorDraws)
        l1, l2 = pairs[order[torch.arange(n) % len(pairs)]][None].unbind(2)  # (1, n) each
        return _fill(cfg, n_triggers, l1, l2, draws, cfg.max_len - 1)

    return draw


def _train(cfgs: list[TriggerCopyConfig], device) -> Callable[[int, Draws], Batch]:
    qs = [distribution(cfg.lengths, cfg.n_triggers) for cfg in cfgs]
    longest = max(max(q) for q in qs)
    probs = torch.zeros(len(cfgs), longest + 1, dtype=torch.float64)  # (P, max l + 1): q_l of each member
    for p, q in enumerate(qs):
        probs[p, list(q)] = torch.tensor(list(q.values()), dtype=torch.float64)
    cdf = probs.cumsum(1).to(device)  # (P, max l + 1)
    n_triggers = torch.tensor([cfg.n_triggers for cfg in cfgs], device=device)  # (P,)

    def draw(n: int, draws: Draws) -> Batch:
        l = draws.categorical(cdf, n)  # (P, n): the index of a length is the length
        return _fill(cfgs[0], n_triggers, l, l, draws, 2 * longest + 3)

    return draw


def _fill(cfg: TriggerCopyConfig, n_triggers: torch.Tensor, l1: torch.Tensor, l2: torch.Tensor, draws: Draws,
          width: int) -> Batch:
    """Draw fillers, triggers and outputs for given (l1, l2), each (P, n), and lay them out in `width` positions, all
    at once: every tensor of the Batch is (P, n, width), or (P, n). The fillers are drawn for the longest sequence
    the config allows whatever `width` is, so a member's sequences do not depend on the members it is packed with."""
    P, n = l1.shape
    query = l1 + l2 + 2  # (P, n) index of the second trigger
    fillers = draws.randint(n_triggers, cfg.vocab_size, n, cfg.max_len - 1)  # (P, n, L - 1): outputs' range too
    tokens = fillers[..., :width]  # (P, n, width)
    trigger = draws.randint(0, n_triggers, n)[..., None]  # (P, n, 1)
    output = draws.randint(n_triggers, cfg.vocab_size, n)[..., None]  # (P, n, 1)

    position = torch.arange(width, device=l1.device)  # (width,)
    first, second = position == l1[..., None], position == query[..., None]  # (P, n, width) each
    after_first = position == l1[..., None] + 1
    padding = position > query[..., None]
    tokens = torch.where(first | second, trigger, torch.where(after_first, output, tokens))
    tokens = tokens.masked_fill(padding, 0)
    labels = torch.where(first, TRIGGER, torch.where(after_first, OUTPUT, torch.where(second, QUERY, FILLER)))
    labels = labels.masked_fill(padding, PAD)
    targets = torch.where(second, output, 0)  # only the query is scored, and it must predict the output o
    return Batch(tokens=tokens, targets=targets, loss_mask=second, labels=labels, query=query,
                 info={"l1": l1, "l2": l2})
