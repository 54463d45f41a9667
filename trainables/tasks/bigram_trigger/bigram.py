"""The global bigram pi_b and its marginal pi_u (SPEC §4): estimated from the shipped corpus or drawn synthetic.

Both are computed once per process and cached (a trial samples thousands of batches from the same bigram).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from trainables.tasks.bigram_trigger import corpus


@dataclass(frozen=True)
class Bigram:
    pi_b: torch.Tensor  # (V, V) float64, rows sum to 1: pi_b[a, b] = P(next token b | current token a)
    pi_u: torch.Tensor  # (V,) float64: the marginal over tokens
    alphabet: str = ""  # the character of each token id (text bigram); "" for a synthetic one

    @property
    def vocab_size(self) -> int:
        return len(self.pi_u)

    @functools.cached_property
    def cdf(self) -> torch.Tensor:
        """(V, V) cumulative rows, the last entry exactly 1, for inverse-CDF sampling with searchsorted."""
        cdf = self.pi_b.cumsum(-1)
        return cdf / cdf[:, -1:]  # a positive scale keeps the rows sorted

    @functools.cached_property
    def row_entropy(self) -> torch.Tensor:
        """(V,) H(pi_b(. | a)) in nats: the best possible loss on a token drawn from row a."""
        return -torch.special.xlogy(self.pi_b, self.pi_b).sum(-1)

    def by_frequency(self) -> torch.Tensor:
        """(V,) token ids from the most to the least frequent under pi_u (ties: lower id first)."""
        return torch.argsort(-self.pi_u, stable=True)


def estimate(text: str) -> Bigram:
    """Character bigram of `text`: pi_b from the counts of every consecutive pair, pi_u from the character counts.

    The alphabet is the sorted set of characters. A character with no successor (one that occurs only as the text's
    last) would have an empty row; it gets the uniform row instead, so every row is a distribution."""
    alphabet = "".join(sorted(set(text)))
    index = {c: i for i, c in enumerate(alphabet)}
    ids = torch.tensor([index[c] for c in text])
    V = len(alphabet)
    pairs = torch.zeros(V * V, dtype=torch.float64).index_add_(0, ids[:-1] * V + ids[1:],
                                                               torch.ones(len(ids) - 1, dtype=torch.float64))
    pairs = pairs.reshape(V, V)
    totals = pairs.sum(-1, keepdim=True)
    pi_b = torch.where(totals > 0, pairs / totals.clamp(min=1), torch.full_like(pairs, 1 / V))
    pi_u = torch.bincount(ids, minlength=V).double() / len(ids)
    return Bigram(pi_b, pi_u, alphabet)


def synthetic(vocab_size: int, concentration: float, seed: int) -> Bigram:
    """Rows ~ Dirichlet(concentration, ..., concentration) from `seed` (fixed: the bigram is a function of the config,
    not of the trial's seed); pi_u is the chain's stationary distribution, as the text's marginal nearly is."""
    rows = np.random.default_rng(seed).dirichlet(np.full(vocab_size, concentration), size=vocab_size)
    pi_b = torch.from_numpy(rows)
    pi_b = pi_b / pi_b.sum(-1, keepdim=True)
    return Bigram(pi_b, stationary(pi_b))


def stationary(pi_b: torch.Tensor, iterations: int = 10_000, tolerance: float = 1e-12) -> torch.Tensor:
    """(V,) p = p pi_b by power iteration from the uniform distribution (Dirichlet rows are positive: it converges)."""
    p = torch.full((len(pi_b),), 1 / len(pi_b), dtype=torch.float64)
    for _ in range(iterations):
        nxt = p @ pi_b
        if (nxt - p).abs().max() < tolerance:
            return nxt
        p = nxt
    return p


@functools.lru_cache(maxsize=None)
def text_bigram() -> Bigram:
    return estimate(corpus.read())


synthetic_bigram = functools.lru_cache(maxsize=None)(synthetic)  # synthetic(), once per (V, concentration, seed)


def of(cfg) -> Bigram:
    """The bigram a BigramTriggerConfig names (cached per process)."""
    if cfg.bigram == "text":
        return text_bigram()
    return synthetic_bigram(cfg.synthetic_vocab, cfg.synthetic_concentration, cfg.synthetic_seed)


def entropy_floor(bigram: Bigram) -> float:
    """E_{a ~ pi_u} H(pi_b(. | a)) in nats: SPEC's `bigram/floor`, the loss of the true bigram on its own chain."""
    return float(bigram.pi_u @ bigram.row_entropy)
