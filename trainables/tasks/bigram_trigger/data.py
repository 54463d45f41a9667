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
>= 2). A population's training batches are drawn at once (sampler): each member its own output pool, every other
setting the pack's.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from trainables.streams import Draws
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


def output_pool(cfg: BigramTriggerConfig, split: str) -> torch.Tensor:
    """(V,) bool: the tokens `split` draws outputs from: the first n_train_outputs tokens of a fixed permutation of
    the vocabulary (every split but heldout), or the rest (heldout)."""
    order = torch.randperm(of(cfg).vocab_size, generator=torch.Generator().manual_seed(OUTPUT_SPLIT_SEED))  # (V,)
    pool = torch.zeros(len(order), dtype=torch.bool)
    pool[order[:cfg.n_train_outputs] if split != "heldout" else order[cfg.n_train_outputs:]] = True
    return pool


@dataclass(frozen=True)
class Tables:
    """A bigram's tensors as a draw reads them, on the members' device: derived once per sampler, not per draw."""

    pi_u: torch.Tensor  # (V,)
    pi_b: torch.Tensor  # (V, V)
    log_pi_u: torch.Tensor  # (V,): the Gumbel-top-k scores of sampled triggers
    cdf_u: torch.Tensor  # (V,) cumulative pi_u, the last entry exactly 1
    frequent: torch.Tensor  # (V,) Bigram.by_frequency
    # The chain's transitions as one non-decreasing (2V V,) table: row r's CDF plus r, rows 0..V-1 the bigram's (where
    # a non-trigger leads) and row V + o a point mass on o (where a trigger whose output is o leads). The next token is
    # then one searchsorted of r + u over the whole table, whatever the row: a time step is four operations. r + u is
    # exact (u has 33 significant bits); r + cdf rounds within 2^-46, so a probability moves by at most that.
    chain_cdf: torch.Tensor  # (2V V,)
    token_of: torch.Tensor  # (2V V,): the token of each entry (its column)

    @classmethod
    def of(cls, bigram: Bigram, device) -> "Tables":
        V = bigram.vocab_size
        cdf_u = bigram.pi_u.cumsum(0)
        vocab = torch.arange(V)
        point = (vocab >= vocab[:, None]).double()  # (V, V): row o's CDF steps from 0 to 1 at o
        chain_cdf = (torch.cat([bigram.cdf, point]) + torch.arange(2 * V)[:, None]).flatten()
        return cls(*(t.to(device) for t in (bigram.pi_u, bigram.pi_b, bigram.pi_u.log(), cdf_u / cdf_u[-1],
                                            bigram.by_frequency(), chain_cdf, vocab.repeat(2 * V))))

    @property
    def vocab_size(self) -> int:
        return len(self.pi_u)


def sampler(cfgs: list[BigramTriggerConfig], device, split: str = "train") -> Callable[[int, Draws], Batch]:
    """The task's batch_sampler: draw(n, draws) -> a Batch of (P, n, T) tensors of `split` with per-position labels,
    each member its own output pool (n_train_outputs); the bigram, the lengths and the trigger, output and loss
    settings are the pack's."""
    if split not in SPLITS:
        raise ValueError(f"split: must be one of {', '.join(SPLITS)}, got {split!r}")
    pack = cfgs[0]  # every field but the member_fields: equal in a pack
    tables = Tables.of(of(pack), device)
    pools = torch.stack([output_pool(cfg, split) for cfg in cfgs]).to(device)  # (P, V)
    length = pack.test_len if split == "long" else pack.seq_len
    pair_free = length // PAIR_FREE_SHARE if split == "late_pairs" else 0
    recall_only = split in ("late_pairs", "long") or pack.loss_on == "recall"

    def draw(n: int, draws: Draws) -> Batch:
        triggers = draw_triggers(tables, pack.n_triggers, pack.triggers, n, draws)  # (P, n, K)
        outputs = draw_outputs(tables, triggers, pools, pack.outputs, draws)  # (P, n, K)
        z, labels = draw_chain(tables, triggers, outputs, length, draws, pair_free)  # (P, n, T + 1), (P, n, T)
        loss_mask = labels >= RECALL if recall_only else torch.ones_like(labels, dtype=torch.bool)
        return Batch(tokens=z[..., :-1], targets=z[..., 1:], loss_mask=loss_mask, labels=labels)

    return draw


def draw_triggers(tables: Tables, k: int, how: str, n: int, draws: Draws) -> torch.Tensor:
    """(P, n, K) trigger tokens: the K most frequent under pi_u (fixed), or K distinct draws from pi_u per sequence.

    Sampled: Gumbel-top-k, the K largest of log pi_u + Gumbel noise, which is distributed as K successive draws
    without replacement (torch.multinomial's), in static shapes and with no host sync."""
    if how == "fixed":
        return tables.frequent[:k].expand(draws.members, n, k)
    gumbel = -torch.log(-torch.log(draws.uniform(n, tables.vocab_size)))  # (P, n, V)
    return (tables.log_pi_u + gumbel).topk(k, dim=-1).indices


def draw_outputs(tables: Tables, triggers: torch.Tensor, pools: torch.Tensor, how: str,
                 draws: Draws) -> torch.Tensor:
    """(P, n, K) one output per trigger from its member's pool (pools (P, V) bool), never the trigger itself: uniform,
    or pi_b(. | trigger) restricted to the pool (uniform over it where that row puts no mass on the pool)."""
    P, n, K = triggers.shape
    vocab = torch.arange(tables.vocab_size, device=triggers.device)  # (V,)
    allowed = pools[:, None, None, :] & (vocab != triggers[..., None])  # (P, n, K, V): never the trigger itself
    weights = allowed.double() if how == "uniform" else _restricted(tables.pi_b[triggers], allowed)
    return _inverse_cdf(weights, draws.uniform(n, K)[..., None])[..., 0]


def draw_chain(tables: Tables, triggers: torch.Tensor, outputs: torch.Tensor, length: int, draws: Draws,
               pair_free: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(P, n, length + 1) tokens of the chain and (P, n, length) labels of the targets z_2..z_{length+1}.

    The first `pair_free` tokens avoid the sequence's triggers: drawn from pi_u, then pi_b(. | z_t), with the triggers'
    mass removed and the rest renormalised (exact conditioning on "no trigger there" is out of reach: with frequent
    triggers, rejection would almost never accept). The loop runs over positions (each token needs the one before);
    every operation in it is over all P n sequences at once."""
    P, n, _ = triggers.shape
    V = tables.vocab_size
    vocab = torch.arange(V, device=triggers.device).expand(P, n, V)
    rows = vocab.scatter(2, triggers, V + outputs)  # (P, n, V): the chain_cdf row each token's successor comes from
    uniforms = draws.uniform(n, length + 1).movedim(2, 0)[..., None].contiguous().unbind(0)  # (P, n, 1) per position

    if pair_free > 0:
        allowed = rows < V  # (P, n, V): the tokens that are no trigger
        current = _inverse_cdf(_restricted(tables.pi_u.expand(P, n, V), allowed), uniforms[0])  # (P, n, 1)
    else:
        current = torch.searchsorted(tables.cdf_u, uniforms[0], right=True)  # (P, n, 1): u < 1, always a token
    chain = [current]
    for t in range(length):
        if t + 1 < pair_free:  # the current token is no trigger either, so nothing is forced
            current = _inverse_cdf(_restricted(tables.pi_b[current[..., 0]], allowed), uniforms[t + 1])
        else:
            row = rows.gather(2, current)  # (P, n, 1)
            current = tables.token_of[torch.searchsorted(tables.chain_cdf, row + uniforms[t + 1], right=True)]
        chain.append(current)
    z = torch.cat(chain, 2)  # (P, n, length + 1)
    return z, _labels(z[..., :-1], triggers)


def _labels(current: torch.Tensor, triggers: torch.Tensor) -> torch.Tensor:
    """(P, n, T) the label of each target: n where the current token (P, n, T) is a trigger (P, n, K) for the n-th
    time up to there (its output then follows), 0 elsewhere. Read off the finished chain, so the loop stays short."""
    match = current[..., None] == triggers[..., None, :]  # (P, n, T, K): at most one, the triggers are distinct
    return (match.cumsum(2) * match).sum(-1)


def _restricted(probs: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """probs (..., V) with the mass off `allowed` (..., V) bool removed; uniform over `allowed` where none is left."""
    probs = probs * allowed
    return torch.where(probs.sum(-1, keepdim=True) > 0, probs, allowed.double())


def _inverse_cdf(weights: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """(..., m) tokens per row of weights (..., V) (non-negative, some mass in each row) by inverse CDF at
    u (..., m)."""
    cdf = weights.cumsum(-1)
    cdf = cdf / cdf[..., -1:]  # the last entry exactly 1; right=True below never lands on a token without mass
    return torch.searchsorted(cdf, u, right=True)  # u < 1 = the last entry: always a token
