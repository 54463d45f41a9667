"""In-context linear regression (SPEC §8, Raventós et al. 2023): every sequence is n pairs (x_k, y_k) of one task w.

x_k ~ N(0, I_D), y_k = w . x_k + eps_k, eps_k ~ N(0, sigma^2). Training tasks come from a pool of M vectors
w_1..w_M ~ N(0, I_D) drawn once from `pool_seed` alone (the same pool for every training seed, so seeds vary the
model, not the data); the `fresh` split draws w ~ N(0, I_D) anew for every sequence.

Layout (d_in = D + 1, T = 2n - 1, positions 0-indexed): position 2(k-1) holds x_k as [0, x_k], position 2k-1 holds
y_k as [y_k, 0, ..., 0]; the last y_n is never shown. The model predicts y_k at x_k's position, so that prediction
sees exactly the k-1 earlier pairs and x_k. tokens say what a position holds (X = 0, Y = 1); labels number the
pairs: k-1 at x_k, n + k - 1 at y_k (no padding: every sequence has T positions).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from trainables.streams import Draws
from trainables.tasks import Batch

SPLITS = ("train", "fresh")  # train: tasks from the pool (the `id` split too); fresh: w ~ N(0, I) per sequence
X, Y = 0, 1  # tokens: what each position holds
FRESH = -1  # info["task_index"] of a sequence whose task was drawn fresh
# The pool is drawn in chunks of this many vectors, each one randn call of a fixed size: torch does not promise that
# randn(M) is a prefix of randn(M') for M < M', but a sequence of equal calls is, so a pool of M is the first M vectors
# of any larger pool of the same seed (nested pools: a pool-size sweep adds tasks, it never swaps them).
POOL_CHUNK = 1024


@dataclass
class LinearRegressionConfig:
    """The regression data model and its pool of training tasks."""

    name: str = "linear_regression"
    dim: int = 4  # D: x_k and w live in R^D
    n_points: int = 8  # n: (x, y) pairs per sequence; the model reads T = 2n - 1 positions
    n_tasks: int = 1024  # M: task vectors in the training pool (the diversity knob)
    noise: float = 0.25  # sigma^2: the variance of the label noise eps_k
    pool_seed: int = 0  # the pool is drawn once from this seed, the same for every training seed


def n_positions(cfg: LinearRegressionConfig) -> int:
    return 2 * cfg.n_points - 1


@functools.lru_cache(maxsize=8)
def _pool_chunks(pool_seed: int, n_chunks: int, dim: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(pool_seed)
    return torch.cat([torch.randn(POOL_CHUNK, dim, generator=generator, dtype=torch.float64)
                      for _ in range(n_chunks)])  # (n_chunks * POOL_CHUNK, D)


def pool(pool_seed: int, n_tasks: int, dim: int) -> torch.Tensor:
    """(M, D) float64 the training pool, drawn once per (seed, chunk count, D) and cached: sampling and the dMMSE
    baseline read it every step. A view of the cache: never modify it."""
    return _pool_chunks(pool_seed, math.ceil(n_tasks / POOL_CHUNK), dim)[:n_tasks]


def pool_of(cfg: LinearRegressionConfig) -> torch.Tensor:
    return pool(cfg.pool_seed, cfg.n_tasks, cfg.dim)


def _stacked_pools(cfgs: list[LinearRegressionConfig]) -> tuple[torch.Tensor, list[int]]:
    """((S, max M, D) the pools of the pack's S distinct seeds, each the largest any member of that seed needs
    (nested: a smaller pool is its prefix), zero rows after it, never drawn; each member's seed slot). One pool per
    seed, not per member: 256 members of one seed share one (M, D) tensor."""
    largest: dict[int, int] = {}
    for cfg in cfgs:
        largest[cfg.pool_seed] = max(largest.get(cfg.pool_seed, 0), cfg.n_tasks)
    seeds = list(largest)
    stacked = torch.zeros(len(seeds), max(largest.values()), cfgs[0].dim, dtype=torch.float64)
    for s, seed in enumerate(seeds):
        stacked[s, : largest[seed]] = pool(seed, largest[seed], cfgs[0].dim)
    return stacked, [seeds.index(cfg.pool_seed) for cfg in cfgs]


def sampler(cfgs: list[LinearRegressionConfig], device, split: str = "train") -> Callable[[int, Draws], Batch]:
    """The task's batch_sampler: draw(n, draws) -> a Batch of (P, n, T, ...) tensors of `split` (train: pool tasks;
    fresh: w ~ N(0, I) per sequence), each member its own pool size, pool seed and noise; dim and n_points (shapes)
    are the pack's. info["task_index"] is each sequence's pool index (FRESH = -1 for a fresh task)."""
    if split not in SPLITS:
        raise ValueError(f"split: must be one of {', '.join(SPLITS)}, got {split!r}")
    D, N = cfgs[0].dim, cfgs[0].n_points  # equal in a pack
    noise_scale = torch.tensor([math.sqrt(cfg.noise) for cfg in cfgs], dtype=torch.float64,
                               device=device)[:, None, None]  # (P, 1, 1): sigma
    if split == "train":
        pools, slots = _stacked_pools(cfgs)
        flat_pools = pools.flatten(0, 1).to(device)  # (S * max M, D)
        offset = torch.tensor(slots, device=device)[:, None] * pools.shape[1]  # (P, 1): a member's pool's first row
        n_tasks = torch.tensor([cfg.n_tasks for cfg in cfgs], device=device)  # (P,)

    def draw(n: int, draws: Draws) -> Batch:
        # Every member draws its tasks (pool indices, or fresh vectors), then its x, then its noise, in this order:
        # a member's draws are numbered alike, and so equal, in any pack.
        if split == "train":
            index = draws.randint(0, n_tasks, n)  # (P, n): uniform over the member's own M
            w = flat_pools[offset + index]  # (P, n, D)
        else:
            w = draws.normal(n, D)  # (P, n, D)
            index = torch.full(w.shape[:2], FRESH, device=w.device)  # (P, n)
        x = draws.normal(n, N, D).float().double()  # (P, n, N, D): rounded as the model reads it, so y = w . x
        # holds on the stored inputs up to y's own rounding (the baselines read the stored batch)
        y = (x * w[:, :, None, :]).sum(-1) + noise_scale * draws.normal(n, N)  # (P, n, N)
        return layout(x, y, index)

    return draw


def layout(x: torch.Tensor, y: torch.Tensor, task_index: torch.Tensor) -> Batch:
    """A Batch of pairs x (..., N, D), y (..., N) (float64, stored as float32) in the interleaved layout above;
    task_index (...) goes to info."""
    *lead, N, D = x.shape
    T = 2 * N - 1
    x_rows = torch.cat([x.new_zeros(*lead, N, 1), x], -1)  # (..., N, D+1): [0, x_k]
    y_rows = torch.cat([y[..., None], x.new_zeros(*lead, N, D)], -1)  # (..., N, D+1): [y_k, 0, ..., 0]
    inputs = torch.stack([x_rows, y_rows], -2).flatten(-3, -2)[..., :T, :]  # (..., T, D+1): x_1 y_1 .. y_{n-1} x_n
    targets = torch.stack([y, torch.zeros_like(y)], -1).flatten(-2)[..., :T, None]  # (..., T, 1): y_k at x_k
    position = torch.arange(T, device=x.device)  # (T,)
    is_x = position % 2 == 0
    pair = position // 2  # k - 1 at x_k's and at y_k's position
    whole = lambda t: t.expand(*lead, T).contiguous()  # (..., T): the same at every sequence
    return Batch(tokens=whole(torch.where(is_x, X, Y)), targets=targets.float(), loss_mask=whole(is_x),
                 labels=whole(torch.where(is_x, pair, N + pair)), info={"task_index": task_index},
                 inputs=inputs.float())
