"""Chen et al.'s modified chi-square mutual information (seeds 001/003, SPEC §5) as a pure function of tables.

For a set A of lags and the stationary joint law mu of (x_t, x_{t-1}, .., x_{t-W}) under a table pi:

    standard  I(A) = E_pi sum_{z_A} mu(z_A)   [ sum_y mu(y | z_A)^2 / mu(y) - 1 ]
    modified ~I(A) = E_pi sum_{z_A} mu(z_A)^2 [ sum_y mu(y | z_A)^2 / mu(y) - 1 ]

The standard criterion cannot tell the parents {1..n-1} from any superset (a token is independent of older ones
given its parents, so both are equal); the extra factor mu(z_A) of the modified one penalises every lag added, so
its argmax is the parent set the FFN selects (Chen et al., Section 3.3). The expectation over pi is the mean over the
tables given (the training pool, or draws from the prior). Windows run over lags 1 .. W, W = n: the parents and one
lag past them.
"""
from __future__ import annotations

import itertools

import torch

from trainables.tasks.markov_ngram.data import stationary

MAX_STATES = 512  # S^(n-1) states of the chain: the exact stationary solve is (tables, states, states) dense


def subsets(window: int) -> list[tuple[int, ...]]:
    """Every non-empty set of lags in 1 .. window, smallest first, then in lexicographic order."""
    lags = range(1, window + 1)
    return [a for size in lags for a in itertools.combinations(lags, size)]


def state_chain(tables: torch.Tensor) -> torch.Tensor:
    """(K, C, C) transitions between contexts: context c followed by token y becomes (c S + y) mod C."""
    K, C, S = tables.shape
    following = (torch.arange(C)[:, None] * S + torch.arange(S)) % C  # (C, S)
    chain = torch.zeros(K, C, C, dtype=tables.dtype)
    return chain.scatter_add_(2, following.expand(K, C, S), tables)


def window_joint(tables: torch.Tensor, order: int, window: int) -> torch.Tensor:
    """(K, S, .., S) stationary joint of (x_t, x_{t-1}, .., x_{t-window}): dim 1 is the token, dim 1 + m is lag m."""
    K, C, S = tables.shape
    mu = stationary(state_chain(tables))  # (K, C): index with lag 1 least significant
    joint = mu.reshape(K, *[S] * (order - 1))  # dims: oldest .. newest token (row-major digits)
    rows = tables.reshape(K, *[S] * (order - 1), S)  # (K, parents oldest .. newest, next token)
    for _ in range(window + 2 - order):  # extend forward one token at a time until window + 1 tokens
        extra = joint.dim() - 1 - (order - 1)  # older tokens the next one does not depend on
        joint = joint[..., None] * rows.reshape(K, *[1] * extra, *rows.shape[1:])
    return joint.permute(0, *range(joint.dim() - 1, 0, -1))  # dims: newest (x_t) first, then lags 1 .. window


def chi2_mutual_information(tables: torch.Tensor, order: int) -> dict[tuple[int, ...], tuple[float, float]]:
    """{lags A: (standard I(A), modified ~I(A))} averaged over the (K, C, S) tables, for every non-empty A in 1 .. n."""
    joint = window_joint(tables.double(), order, order)  # (K, S, S^n)
    token = joint.sum(dim=tuple(range(2, joint.dim())))  # (K, S): mu(y)
    values = {}
    for lags in subsets(order):
        others = tuple(1 + m for m in range(1, order + 1) if m not in lags)
        marginal = joint.sum(dim=others) if others else joint  # (K, S, S^|A|): mu(y, z_A)
        parents = marginal.sum(1, keepdim=True)  # (K, 1, S^|A|): mu(z_A)
        y_shape = (len(token), -1) + (1,) * (marginal.dim() - 2)
        # sum_y mu(y, z)^2 / mu(y); a token the chain never visits (mu(y) = 0, possible for tiny alpha) adds nothing
        ratio = (marginal**2 / token.reshape(y_shape).clamp(min=1e-300)).sum(1, keepdim=True)
        inside = torch.where(parents > 0, ratio / parents.clamp(min=1e-300) ** 2 - 1, 0.0)  # sum_y mu(y|z)^2/mu(y) - 1
        flat = lambda t: t.reshape(len(t), -1).sum(1)
        values[lags] = (flat(parents * inside).mean().item(), flat(parents**2 * inside).mean().item())
    return values


def argmax(values: dict[tuple[int, ...], tuple[float, float]], criterion: int = 1) -> tuple[int, ...]:
    """The lag set with the largest value (criterion 0: standard, 1: modified); ties go to the smaller set."""
    return max(values, key=lambda lags: (round(values[lags][criterion], 12), -len(lags)))


def metric_name(lags: tuple[int, ...]) -> str:
    return "_".join(map(str, lags))
