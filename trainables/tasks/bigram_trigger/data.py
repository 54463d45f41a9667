"""Bigram task with triggers (SPEC §4; Bietti et al. 2023, Wang & Sato 2025): the generator and its config.

Per sequence: K trigger tokens q_k (the K most frequent under pi_u, or K distinct draws from pi_u) and an output o_k
for each. z_1 ~ pi_u; if z_t is trigger q_k then z_{t+1} = o_k, else z_{t+1} ~ pi_b(. | z_t). A sequence of T
positions draws T + 1 tokens: tokens = z_1..z_T, targets = z_2..z_{T+1} (next-token prediction at every position).

Positions are 0-indexed in code. labels[t] describes the target at t (as in Bietti's code): 0 when z_{t+1} was drawn
from the bigram, n when it is the output that follows the n-th occurrence of its trigger (z_t = q_k for the n-th time
up to t). Label >= 2 is recallable in context (only an induction head predicts it); 1 is a first occurrence.

Outputs come from a pool: training, in-distribution and the position probes draw from the first `n_train_outputs`
tokens of a fixed permutation of the vocabulary (the same for every trial, so pools are nested as the knob grows); the
OOD split draws only from the held-out rest. An output is never its own trigger (Bietti's `no_repeat`): a trigger
followed by itself would lock the chain on one token for good. Outputs may be other triggers, as in Bietti's code.

Splits: train (training and the `id` set), heldout (OOD outputs), late_pairs (Wang & Sato's probe: no trigger, hence
no trigger-output pair, in the first quarter; scored where label >= 2), long (length `test_len`, scored where label
>= 2). Every draw comes from one explicit torch.Generator in a fixed order, so a batch is a function of the seed.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from trainables.tasks import Batch
from trainables.tasks.bigram_trigger.bigram import Bigram, of

SPLITS = ("train", "heldout", "late_pairs", "long")
BIGRAMS = ("text", "synthetic")
TRIGGERS = ("fixed", "sampled")
OUTPUTS = ("uniform", "bigram")
LOSS_ON = ("all", "recall")

RECALL = 2  # labels >= RECALL are recallable in context
OUTPUT_SPLIT_SEED = 0  # the permutation of the vocabulary that decides training and held-out outputs
PAIR_FREE_SHARE = 4  # late_pairs: the first T // 4 positions hold no trigger (Wang & Sato: no pair in t < 64 of 256)


@dataclass
class BigramTriggerConfig:
    """The bigram-with-triggers data model, its OOD protocols and its diversity knob."""

    name: str = "bigram_trigger"
    bigram: str = "text"  # text: pi_b of the shipped corpus (kjv.txt, V = 62) | synthetic: Dirichlet rows
    synthetic_vocab: int = 64  # synthetic only: the vocabulary size V
    synthetic_concentration: float = 0.1  # synthetic only: Dirichlet parameter of each row (small = peaked rows)
    synthetic_seed: int = 0  # synthetic only: the bigram is a function of this seed, not of the trial's seed
    seq_len: int = 256  # T of training, id, OOD and late_pairs sequences (the papers: 256)
    test_len: int = 512  # T of the length-generalization split (lengthgen/*): longer than seq_len
    n_triggers: int = 5  # K trigger tokens per sequence
    triggers: str = "sampled"  # fixed: the K most frequent tokens | sampled: K distinct tokens ~ pi_u per sequence
    outputs: str = "uniform"  # uniform over the output pool | bigram: ~ pi_b(. | trigger) restricted to the pool
    loss_on: str = "all"  # all: every position | recall: only label >= 2 (Bietti's basic model)
    n_train_outputs: int = 46  # diversity knob: outputs of training come from this many tokens (Bietti: 3/4 of V)
    n_readout: int = 128  # sequences of test_len behind attention.npz's accuracy and attention by position


def output_order(vocab_size: int) -> torch.Tensor:
    """(V,) the fixed permutation whose first n_train_outputs tokens are the training outputs."""
    return torch.randperm(vocab_size, generator=torch.Generator().manual_seed(OUTPUT_SPLIT_SEED))


def output_pool(cfg: BigramTriggerConfig, split: str) -> torch.Tensor:
    """(V,) bool: the tokens `split` draws outputs from (heldout: the rest; every other split: the training pool)."""
    order = output_order(of(cfg).vocab_size)
    pool = torch.zeros(len(order), dtype=torch.bool)
    pool[order[:cfg.n_train_outputs] if split != "heldout" else order[cfg.n_train_outputs:]] = True
    return pool


def sample(cfg: BigramTriggerConfig, n: int, generator: torch.Generator, split: str = "train",
           pad_to: int | None = None) -> Batch:
    """n sequences of `split` with per-position labels; right-padded to `pad_to` positions when given."""
    if split not in SPLITS:
        raise ValueError(f"split: must be one of {', '.join(SPLITS)}, got {split!r}")
    bigram = of(cfg)
    length = cfg.test_len if split == "long" else cfg.seq_len
    triggers = draw_triggers(bigram, cfg.n_triggers, cfg.triggers, n, generator)  # (B, K)
    outputs = draw_outputs(bigram, triggers, output_pool(cfg, split), cfg.outputs, generator)  # (B, K)
    pair_free = length // PAIR_FREE_SHARE if split == "late_pairs" else 0
    z, labels = draw_chain(bigram, triggers, outputs, length, generator, pair_free)
    tokens, targets = z[:, :-1], z[:, 1:]  # (B, T) each
    recall_only = split in ("late_pairs", "long") or cfg.loss_on == "recall"
    loss_mask = labels >= RECALL if recall_only else torch.ones_like(labels, dtype=torch.bool)
    batch = Batch(tokens=tokens, targets=targets, loss_mask=loss_mask, labels=labels)
    return batch if pad_to is None else batch.padded(pad_to)  # padded after the draws: the same sequences


def draw_triggers(bigram: Bigram, k: int, how: str, n: int, generator: torch.Generator) -> torch.Tensor:
    """(n, K) trigger tokens: the K most frequent under pi_u (fixed), or K distinct draws from pi_u per sequence."""
    if how == "fixed":
        return bigram.by_frequency()[:k].expand(n, k).clone()
    return torch.multinomial(bigram.pi_u.expand(n, -1), k, replacement=False, generator=generator)


def draw_outputs(bigram: Bigram, triggers: torch.Tensor, pool: torch.Tensor, how: str,
                 generator: torch.Generator) -> torch.Tensor:
    """(B, K) one output per trigger from `pool` (V,) bool, never the trigger itself: uniform, or pi_b(. | trigger)
    restricted to the pool (uniform over it where that row puts no mass on the pool)."""
    B, K = triggers.shape
    V = len(pool)
    allowed = pool.expand(B, K, V).clone()
    allowed.scatter_(2, triggers[..., None], False)  # (B, K, V): never the trigger itself
    weights = allowed.double() if how == "uniform" else bigram.pi_b[triggers] * allowed
    weights = torch.where(weights.sum(-1, keepdim=True) > 0, weights, allowed.double())
    return torch.multinomial(weights.reshape(B * K, V), 1, generator=generator).reshape(B, K)


def draw_chain(bigram: Bigram, triggers: torch.Tensor, outputs: torch.Tensor, length: int,
               generator: torch.Generator, pair_free: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, length + 1) tokens of the chain and (B, length) labels of the targets z_2..z_{length+1}.

    The first `pair_free` tokens avoid the sequence's triggers: drawn from pi_u, then pi_b(. | z_t), with the triggers'
    mass removed and the rest renormalised (exact conditioning on "no trigger there" is out of reach: with frequent
    triggers, rejection would almost never accept)."""
    B, V = len(triggers), bigram.vocab_size
    rows = torch.arange(B)
    forced = torch.full((B, V), -1, dtype=torch.long)
    forced[rows[:, None], triggers] = outputs  # (B, V): the output a trigger forces next, -1 for other tokens
    is_trigger = forced >= 0  # (B, V)
    uniforms = torch.rand(length + 1, B, generator=generator, dtype=torch.float64)  # one per drawn token, by position

    z = torch.empty(B, length + 1, dtype=torch.long)
    labels = torch.zeros(B, length, dtype=torch.long)
    counts = torch.zeros(B, V, dtype=torch.long)  # occurrences of each trigger so far
    z[:, 0] = _inverse_cdf(bigram.pi_u.expand(B, V), uniforms[0], is_trigger if pair_free > 0 else None)
    for t in range(length):
        current = z[:, t]
        if t + 1 < pair_free:
            drawn = _inverse_cdf(bigram.pi_b[current], uniforms[t + 1], is_trigger)
        else:
            drawn = torch.searchsorted(bigram.cdf[current], uniforms[t + 1, :, None], right=True)[:, 0]
        output = forced[rows, current]  # (B,)
        hit = output >= 0
        counts[rows, current] += hit.long()
        labels[:, t] = torch.where(hit, counts[rows, current], 0)
        z[:, t + 1] = torch.where(hit, output, drawn)
    return z, labels


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor, banned: torch.Tensor | None) -> torch.Tensor:
    """(B,) a token per row of probs (B, V) by inverse CDF at u (B,), with `banned` (B, V) tokens' mass removed."""
    if banned is not None:
        probs = probs.masked_fill(banned, 0.0)
        probs = torch.where(probs.sum(-1, keepdim=True) > 0, probs, (~banned).double())  # a row left empty: uniform
    cdf = probs.cumsum(-1)
    cdf = cdf / cdf[:, -1:]  # the last entry exactly 1; right=True below never lands on a token without mass
    return torch.searchsorted(cdf, u[:, None], right=True)[:, 0]  # u < 1 = the last entry: always a token
