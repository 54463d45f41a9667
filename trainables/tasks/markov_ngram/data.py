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
fresh tables: tables never in the pool. Fresh tables, pools and OOD tables come from one Dirichlet sampler with
static shapes (log_gamma), so a population's batches are drawn at once with nothing read back to the host.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from trainables.streams import Draws, GeneratorDraws
from trainables.tasks import PAD_LABEL, Batch

SPLITS = ("train", "ood")  # train: tables from the pool (or fresh); ood: fresh tables, never in the pool
FIRST = ("uniform", "stationary")
LOSS_ON = ("last", "all")
MAX_TABLE_ENTRIES = 4096  # S^n per table: every sequence of a batch carries its own table, so this bounds memory
PROPOSALS = 8  # Marsaglia-Tsang proposals per Gamma variate (log_gamma): all rejected with probability <= 0.049^8
# Uniform jump mixed into a chain for its stationary law (stationary): makes every chain irreducible, and moves the
# law of one that mixes in T steps by about TELEPORT * T; float64 solves stay accurate to ~1e-8 at this size.
TELEPORT = 1e-10

# Per-position labels (by what the position predicts): metrics and the loss mask slice by them.
PAD, PRIMED, CHAIN = PAD_LABEL, 0, 1  # PRIMED: the target is one of the first n-1 tokens (not from the chain),
# never scored


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


def log_gamma(alpha: torch.Tensor, draws: Draws, *shape: int) -> torch.Tensor:
    """(P, *shape) float64 logs of Gamma(alpha_p, 1) draws, alpha (P,) per member, with static shapes: no loop on
    the draws' values, no value read back, the same operations for every member count.

    Marsaglia and Tsang's method for a = alpha (alpha >= 1) or alpha + 1 (alpha < 1, then Gamma(alpha) =
    Gamma(alpha + 1) U^(1/alpha)) with PROPOSALS proposals per variate, taking the first accepted. Returned as logs,
    because U^(1/alpha) underflows for small alpha."""
    alpha = alpha.reshape(-1, *(1,) * (len(shape) + 1))  # (P, 1, .., 1): against (P, *shape, PROPOSALS)
    a = torch.where(alpha < 1, alpha + 1, alpha)  # >= 1, where the method holds
    d = a - 1.0 / 3.0
    c = torch.rsqrt(9.0 * d)
    x = draws.normal(*shape, PROPOSALS)  # (P, *shape, K)
    u = draws.uniform(*shape, PROPOSALS)  # (P, *shape, K)
    v = (1 + c * x) ** 3
    log_v = torch.log(v.clamp(min=1e-300))
    ok = (v > 0) & (torch.log(u) < 0.5 * x**2 + d - d * v + d * log_v)  # (P, *shape, K)
    first = ok.to(torch.uint8).argmax(-1, keepdim=True)  # (P, *shape, 1): argmax returns the first maximum
    # All K rejected (probability at most 0.049^K, at a = 1): v = 1, the proposal at x = 0, near the median.
    log_v = torch.where(ok.any(-1, keepdim=True), log_v.gather(-1, first), 0.0)  # (P, *shape, 1)
    boost = torch.where(alpha < 1, 1.0 / alpha, 0.0)  # 1/alpha where boosted, else U^0 = 1
    return (torch.log(d) + log_v + torch.log(draws.uniform(*shape, 1)) * boost)[..., 0]


def fresh_tables(alpha: torch.Tensor, draws: Draws, n: int, contexts: int, vocab_size: int) -> torch.Tensor:
    """(P, n, C, S) float64 transition tables, every row ~ Dirichlet(alpha_p * 1) for member p, normalised in log
    space: rows of tiny gammas stay finite."""
    return torch.softmax(log_gamma(alpha, draws, n, contexts, vocab_size), dim=-1)


def draw_tables(cfg: MarkovNgramConfig, k: int, generator: torch.Generator) -> torch.Tensor:
    """(k, C, S) float64 transition tables, every row ~ Dirichlet(alpha * 1), from `generator` alone."""
    alpha = torch.tensor([cfg.alpha], dtype=torch.float64, device=generator.device)
    return fresh_tables(alpha, GeneratorDraws(generator), k, n_contexts(cfg), cfg.vocab_size)[0]


@functools.lru_cache(maxsize=8)
def _pool(vocab_size: int, order: int, alpha: float, pool_size: int, pool_seed: int) -> torch.Tensor:
    cfg = MarkovNgramConfig(vocab_size=vocab_size, order=order, alpha=alpha)
    return draw_tables(cfg, pool_size, torch.Generator().manual_seed(pool_seed))


def pool(cfg: MarkovNgramConfig) -> torch.Tensor:
    """(pool_size, C, S) the training pool, drawn once per (data model, pool_size, pool_seed) and cached."""
    return _pool(cfg.vocab_size, cfg.order, cfg.alpha, cfg.pool_size, cfg.pool_seed)


def stacked_pools(cfgs: list[MarkovNgramConfig]) -> torch.Tensor:
    """(P, max(pool_size), C, S) the members' pools, member p's in its first pool_size entries. The rest (and the
    one entry of a pack without pools) are uniform rows, never drawn: a valid table wherever an index lands."""
    C, S = n_contexts(cfgs[0]), cfgs[0].vocab_size
    stacked = torch.full((len(cfgs), max(1, *(cfg.pool_size for cfg in cfgs)), C, S), 1.0 / S, dtype=torch.float64)
    for p, cfg in enumerate(cfgs):
        if cfg.pool_size:  # a fresh member's row: padding only
            stacked[p, : cfg.pool_size] = pool(cfg)
    return stacked


def stationary(transition: torch.Tensor) -> torch.Tensor:
    """(..., m) the stationary distribution of each row-stochastic (..., m, m) matrix P, computed for
    (1 - TELEPORT) P + TELEPORT / m so that it is always unique: P's own to about TELEPORT x its mixing time, and for a
    reducible P (tiny alpha: Dirichlet entries underflow to 0) the long-run law from a uniform start.

    Solves mu (P - I) = 0 with one equation replaced by sum(mu) = 1, batched; solve_ex without its error check, which
    on a GPU would read the solver's status back to the host (the teleport keeps the system nonsingular)."""
    m = transition.shape[-1]
    transition = (1 - TELEPORT) * transition + TELEPORT / m  # (..., m, m)
    last = torch.arange(m, device=transition.device) == m - 1  # (m,): the equation replaced
    identity = torch.eye(m, dtype=transition.dtype, device=transition.device)
    system = torch.where(last[:, None], 1.0, (transition - identity).transpose(-1, -2))  # (..., m, m)
    rhs = last.to(transition.dtype).expand(transition.shape[:-1])  # (..., m)
    return torch.linalg.solve_ex(system, rhs, check_errors=False).result.clamp(min=0)


def _cdf(probs: torch.Tensor) -> torch.Tensor:
    """(..., S) CDFs of (..., S) distributions, each ending at exactly 1 (a cumsum may end just below it), so that
    _inverse_cdf of a uniform below 1 stays in 0..S-1 with no clamp per chain step."""
    return torch.cat([probs[..., :-1].cumsum(-1), torch.ones_like(probs[..., -1:])], -1)


def _inverse_cdf(cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """(..., 1) tokens y with cdf[..., y-1] <= u < cdf[..., y], from (..., S) CDFs (_cdf) and (..., 1) uniforms in
    [0, 1)."""
    return (u >= cdf).sum(-1, keepdim=True)


def chains(cfg: MarkovNgramConfig, tables: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """(..., L+1) sequences, one per table of (..., C, S), from (..., L+1) uniforms in [0, 1), one per token: the
    first n-1 tokens, then the chain. A loop over time steps (the chain is sequential), each step a few operations
    over all sequences at once."""
    n, S, C = cfg.order, cfg.vocab_size, n_contexts(cfg)
    cdf = _cdf(tables)  # (..., C, S)
    if cfg.first == "stationary":  # n = 2: the table is the chain's transition matrix
        first = _inverse_cdf(_cdf(stationary(tables)), u[..., :1])  # (..., 1)
    else:
        first = (u[..., : n - 1] * S).long()  # (..., n-1): u < 1, never S
    # Every step's tensors are (..., 1, 1), so that a step is one gather, one inverse CDF and the context's update.
    context = context_index(first, S)[..., None, None]  # (..., 1, 1)
    tokens = []
    for v in u[..., n - 1 :, None, None].unbind(-3):  # (..., 1, 1) each
        row = cdf.gather(-2, context.expand(*context.shape[:-1], S))  # (..., 1, S): the context's row
        token = _inverse_cdf(row, v)  # (..., 1, 1)
        tokens.append(token)
        context = context * S % C + token  # the oldest parent drops out, the new token is lag 1
    return torch.cat([first, torch.cat(tokens, -1)[..., 0, :]], -1)


def sampler(cfgs: list[MarkovNgramConfig], device, split: str = "train") -> Callable[[int, Draws], Batch]:
    """The task's batch_sampler: draw(n, draws) -> a Batch of (P, n, L) tensors of `split` (train: pool tables, or
    fresh ones when pool_size is 0; ood: fresh tables), each member its own pool_size, pool_seed and alpha;
    vocab_size, order, seq_len, first and loss_on (shapes and structure) are the pack's. info["table"] is each
    sequence's pool index (-1 for a fresh table)."""
    if split not in SPLITS:
        raise ValueError(f"split: must be one of {', '.join(SPLITS)}, got {split!r}")
    pack = cfgs[0]  # vocab_size, order, seq_len, first and loss_on: equal in a pack
    sizes = [cfg.pool_size if split == "train" else 0 for cfg in cfgs]  # ood: fresh tables for every member
    pooled, fresh = any(sizes), 0 in sizes  # which tables the pack needs: fixed by the configs, not by the draws
    pool_size = torch.tensor(sizes, device=device)  # (P,)
    is_fresh = (pool_size == 0)[:, None]  # (P, 1)
    alpha = torch.tensor([cfg.alpha for cfg in cfgs], dtype=torch.float64, device=device)  # (P,)
    P, C, S = len(cfgs), n_contexts(pack), pack.vocab_size
    pools = stacked_pools(cfgs).flatten(2).to(device) if pooled else None  # (P, max pool, C S)

    def draw(n: int, draws: Draws) -> Batch:
        # Every member draws its table indices, then its tokens' uniforms, then (where the pack has fresh members)
        # fresh tables, in this order: a member's draws are numbered alike, and so equal, in any pack.
        index = draws.randint(0, pool_size, n)  # (P, n): 0 for a fresh member, where its fresh table replaces it
        u = draws.uniform(n, pack.seq_len + 1)  # (P, n, L+1): one per token
        tables = pools.gather(1, index[..., None].expand(P, n, C * S)).view(P, n, C, S) if pooled else None
        if fresh:
            new = fresh_tables(alpha, draws, n, C, S)  # (P, n, C, S)
            tables = torch.where(is_fresh[..., None, None], new, tables) if pooled else new
        return layout(pack, chains(pack, tables, u), torch.where(is_fresh, -1, index))

    return draw


def layout(cfg: MarkovNgramConfig, sequences: torch.Tensor, table: torch.Tensor) -> Batch:
    """A Batch of (..., L+1) sequences: the model reads the first L tokens and position t predicts x_{t+1}."""
    L = cfg.seq_len
    tokens, targets = sequences[..., :L], sequences[..., 1:]  # (..., L) each
    position = torch.arange(L, device=sequences.device).expand(tokens.shape)  # (..., L)
    labels = torch.where(position < cfg.order - 2, PRIMED, CHAIN)  # (..., L)
    loss_mask = labels == CHAIN
    query = None
    if cfg.loss_on == "last":
        query = torch.full(tokens.shape[:-1], L - 1, device=sequences.device)  # (...)
        loss_mask = position == L - 1  # (..., L): position L-1 only
    return Batch(tokens=tokens, targets=targets, loss_mask=loss_mask, labels=labels, query=query,
                 info={"table": table})
