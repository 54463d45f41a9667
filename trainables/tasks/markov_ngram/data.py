"""Markov n-gram in-context learning (SPEC §5): every sequence is a chain with its own transition table.

A table `pi` (C, S) holds one row per context, C = S^(n-1): the next token is drawn from the row of the previous n-1
tokens (its parents, at lags 1 .. n-1). Rows are Dirichlet(alpha * 1). A context is indexed with the lag-1 token as
the least significant digit: index = sum_m x_{t-m} S^(m-1), m = 1 .. n-1 (see `context_index`).

A sequence x_0 .. x_L has L + 1 tokens: the first n-1 uniform (Chen) or, for n = 2, from the table's stationary
distribution (Edelman), the rest drawn from the chain. The model reads x_0 .. x_{L-1}; position t predicts x_{t+1}.
Positions whose target is one of the first n-1 tokens (t < n-2) are never scored; `loss_on: last` scores position
L-1 only (Chen), `all` every other position (Edelman).

Training tables come from a pool of `pool_size` tables drawn once from `pool_seed` (the same pool for every training
seed, so seeds vary the model, not the data), or are fresh per sequence (pool_size 0). The OOD split always draws
fresh tables from the evaluation generator: tables never in the pool. Everything else is drawn from the explicit
torch.Generator passed in, so a batch is a function of the seed.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from trainables.tasks import PAD_LABEL, Batch

SPLITS = ("train", "ood")  # train: tables from the pool (or fresh); ood: fresh tables, never in the pool
FIRST = ("uniform", "stationary")
LOSS_ON = ("last", "all")
MAX_TABLE_ENTRIES = 4096  # S^n per table: every sequence of a batch carries its own table, so this bounds memory

# Per-position labels (by what the position predicts): metrics and the loss mask slice by them.
PAD, PRIMED, CHAIN = PAD_LABEL, 0, 1  # PRIMED: the target is one of the first n-1 tokens (not from the chain), never scored


@dataclass
class MarkovNgramConfig:
    """The n-gram Markov data model, its pool of training tables and where the loss is read."""

    name: str = "markov_ngram"
    vocab_size: int = 3  # S: tokens 0..S-1
    order: int = 3  # n: each token depends on the previous n-1 tokens (its parents, at lags 1 .. n-1)
    alpha: float = 0.3  # Dirichlet concentration of every transition row (small: peaked rows, easy to tell apart)
    seq_len: int = 64  # L: the model reads L tokens of a length-(L+1) sequence
    pool_size: int = 0  # distinct transition tables in the training pool; 0 = a fresh table per sequence
    pool_seed: int = 0  # the pool is drawn once from this seed, the same for every training seed
    first: str = "uniform"  # the first n-1 tokens: uniform (Chen) | stationary (Edelman; order 2 only)
    loss_on: str = "last"  # last: score the prediction of x_L only (Chen) | all: every chain token (Edelman)


def n_contexts(cfg: MarkovNgramConfig) -> int:
    return cfg.vocab_size ** (cfg.order - 1)


def context_index(window: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """(..., k) tokens, oldest first -> (...) context index with the newest (lag 1) token least significant."""
    k = window.shape[-1]
    weights = vocab_size ** torch.arange(k - 1, -1, -1, device=window.device)  # (k,): S^(k-1) .. S^0
    return (window * weights).sum(-1)


def gamma(shape: float, size: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    """log Gamma(shape, 1) draws (float64) from `generator` alone (torch's own gamma sampler takes no generator).

    Marsaglia and Tsang's rejection method for shape + 1 >= 1, redrawing only what was rejected, then
    Gamma(a) = Gamma(a + 1) U^(1/a) for a < 1. Returned as logs, because U^(1/a) underflows for small a.
    """
    a = shape + 1.0 if shape < 1 else shape
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    log_g = torch.empty(size, dtype=torch.float64)
    todo = torch.ones(size, dtype=torch.bool)
    while todo.any():
        m = int(todo.sum())
        x = torch.randn(m, generator=generator, dtype=torch.float64)
        u = torch.rand(m, generator=generator, dtype=torch.float64)
        v = (1 + c * x) ** 3
        ok = (v > 0) & (torch.log(u) < 0.5 * x**2 + d - d * v + d * torch.log(v.clamp(min=1e-300)))
        index = todo.nonzero(as_tuple=True)
        accepted = tuple(i[ok] for i in index)
        log_g[accepted] = math.log(d) + torch.log(v[ok])
        todo[accepted] = False
    if shape < 1:
        u = torch.rand(size, generator=generator, dtype=torch.float64)
        log_g = log_g + torch.log(u) / shape
    return log_g


def draw_tables(cfg: MarkovNgramConfig, k: int, generator: torch.Generator) -> torch.Tensor:
    """(k, C, S) float64 transition tables, every row ~ Dirichlet(alpha * 1)."""
    log_g = gamma(cfg.alpha, (k, n_contexts(cfg), cfg.vocab_size), generator)
    return torch.softmax(log_g, dim=-1)  # normalised in log space: rows of tiny gammas stay finite


@functools.lru_cache(maxsize=8)
def _pool(vocab_size: int, order: int, alpha: float, pool_size: int, pool_seed: int) -> torch.Tensor:
    cfg = MarkovNgramConfig(vocab_size=vocab_size, order=order, alpha=alpha)
    return draw_tables(cfg, pool_size, torch.Generator().manual_seed(pool_seed))


def pool(cfg: MarkovNgramConfig) -> torch.Tensor:
    """(pool_size, C, S) the training pool, drawn once per (data model, pool_size, pool_seed) and cached."""
    return _pool(cfg.vocab_size, cfg.order, cfg.alpha, cfg.pool_size, cfg.pool_seed)


def stationary(transition: torch.Tensor) -> torch.Tensor:
    """(..., m) the stationary distribution of each row-stochastic (..., m, m) matrix (all entries > 0: unique).

    Solves mu (P - I) = 0 with one equation replaced by sum(mu) = 1, batched."""
    m = transition.shape[-1]
    system = (transition - torch.eye(m, dtype=transition.dtype)).transpose(-1, -2).clone()  # (..., m, m)
    system[..., -1, :] = 1.0
    rhs = torch.zeros(transition.shape[:-1], dtype=transition.dtype)
    rhs[..., -1] = 1.0
    return torch.linalg.solve(system, rhs).clamp(min=0)


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """(B,) tokens with P(token = y) = probs[b, y], from (B,) uniforms."""
    return (u[:, None] > probs.cumsum(-1)).sum(-1).clamp(max=probs.shape[-1] - 1)


def chains(cfg: MarkovNgramConfig, tables: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """(B, L+1) sequences, one per table of (B, C, S): first n-1 tokens, then the chain. A loop over time steps
    (the chain is sequential), each step vectorised over the batch."""
    B, n, S = len(tables), cfg.order, cfg.vocab_size
    u = torch.rand(B, cfg.seq_len + 1, generator=generator, dtype=torch.float64)  # (B, L+1): one uniform per token
    tokens = torch.empty(B, cfg.seq_len + 1, dtype=torch.long)
    if cfg.first == "stationary":  # n = 2: the table is the chain's transition matrix
        mu = stationary(tables)  # (B, S)
        tokens[:, 0] = _inverse_cdf(mu, u[:, 0])
    else:
        tokens[:, : n - 1] = (u[:, : n - 1] * S).long().clamp(max=S - 1)
    rows = torch.arange(B)
    for t in range(n - 1, cfg.seq_len + 1):
        context = context_index(tokens[:, t - n + 1 : t], S)  # (B,)
        tokens[:, t] = _inverse_cdf(tables[rows, context], u[:, t])
    return tokens


def sample(cfg: MarkovNgramConfig, n: int, generator: torch.Generator, split: str = "train",
           pad_to: int | None = None) -> Batch:
    """n sequences of `split` (train: pool tables, or fresh ones when pool_size is 0; ood: fresh tables).

    info["table"] is each sequence's pool index (-1 for a fresh table)."""
    if split == "train" and cfg.pool_size:
        table = torch.randint(cfg.pool_size, (n,), generator=generator)
        tables = pool(cfg)[table]  # (B, C, S)
    elif split in SPLITS:
        table = torch.full((n,), -1)
        tables = draw_tables(cfg, n, generator)
    else:
        raise ValueError(f"split: must be one of {', '.join(SPLITS)}, got {split!r}")
    return layout(cfg, chains(cfg, tables, generator), table, pad_to)


def layout(cfg: MarkovNgramConfig, sequences: torch.Tensor, table: torch.Tensor, pad_to: int | None) -> Batch:
    """A Batch of (B, L+1) sequences: the model reads the first L tokens and position t predicts x_{t+1}."""
    B, L = len(sequences), cfg.seq_len
    tokens, targets = sequences[:, :L], sequences[:, 1:]  # (B, L) each
    position = torch.arange(L).expand(B, L)
    labels = torch.where(position < cfg.order - 2, PRIMED, CHAIN)  # (B, L)
    loss_mask = labels == CHAIN
    query = None
    if cfg.loss_on == "last":
        query = torch.full((B,), L - 1)
        loss_mask = F.one_hot(query, L).bool()  # (B, L): position L-1 only
    batch = Batch(tokens=tokens, targets=targets, loss_mask=loss_mask, labels=labels, query=query,
                  info={"table": table})
    return batch if pad_to is None else batch.padded(pad_to)  # padded after the draws: the same sequences
