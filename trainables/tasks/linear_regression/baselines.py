"""The two Bayes estimators that frame in-context regression (Raventós et al. 2023), exactly, in float64, for every
sequence of a batch and every k = 1..n at once: the prediction of y_k from the k-1 earlier pairs and x_k.

- ridge (lambda = sigma^2): the posterior mean of w under the Gaussian prior w ~ N(0, I_D), optimal on fresh tasks;
- dMMSE: the posterior mean of w under the uniform prior over the pool's M vectors, optimal on pool tasks.

Both read the sums over the earlier pairs only, as exclusive cumulative sums along the pairs (position k holds the sum
over j < k), so one batched solve or one pass over the pool gives all k.
"""
from __future__ import annotations

import torch

# dMMSE at sigma^2 = 0 is the limit sigma -> 0: all weight on the pool vectors that fit the earlier pairs exactly,
# averaged among them. The weights are computed at this floor of sigma^2: a vector that misses by a residual of
# 1e-3 gets exp(-5e5) of the weight, and the rounding of the stored float32 data (y = w . x to ~1e-7 relative: squared
# residuals ~1e-13) moves an exact fit's log-weight by well under 1.
NOISE_FLOOR = 1e-12
CHUNK_ELEMENTS = 2**22  # (B, N, chunk) log-weights per pass over the pool: 32 MiB of float64, whatever M


def exclusive_cumsum(t: torch.Tensor, dim: int) -> torch.Tensor:
    """t's cumulative sum along `dim` shifted one place: index k holds the sum over j < k (0 at k = 0)."""
    total = t.cumsum(dim)
    return torch.cat([torch.zeros_like(total.narrow(dim, 0, 1)), total.narrow(dim, 0, t.shape[dim] - 1)], dim)


def ridge(x: torch.Tensor, y: torch.Tensor, noise: float) -> torch.Tensor:
    """(B, N) ridge predictions: x_k . w_hat_k, w_hat_k = (X^T X + sigma^2 I)^{-1} X^T y over the pairs before k
    (w_hat = 0 at k = 1). At sigma^2 = 0 the posterior mean is the minimum-norm least-squares solution
    pinv(X^T X) X^T y (= pinv(X) y). x (B, N, D), y (B, N), float64."""
    D = x.shape[-1]
    gram = exclusive_cumsum(x[..., :, None] * x[..., None, :], 1)  # (B, N, D, D): sum_{j<k} x_j x_j^T
    moment = exclusive_cumsum(x * y[..., None], 1)[..., None]  # (B, N, D, 1): sum_{j<k} x_j y_j
    if noise > 0:
        regularised = gram + noise * torch.eye(D, dtype=x.dtype, device=x.device)  # positive definite
        w_hat = torch.cholesky_solve(moment, torch.linalg.cholesky(regularised))  # (B, N, D, 1)
    else:
        w_hat = torch.linalg.pinv(gram, hermitian=True) @ moment  # (B, N, D, 1)
    return (x * w_hat[..., 0]).sum(-1)


def dmmse(x: torch.Tensor, y: torch.Tensor, noise: float, pool: torch.Tensor) -> torch.Tensor:
    """(B, N) dMMSE predictions: x_k . sum_i p_ik w_i, p_ik = softmax_i(-||y_{<k} - X_{<k} w_i||^2 / (2 sigma^2))
    over the pool's vectors w_i (at k = 1 the pool's mean). x (B, N, D), y (B, N), pool (M, D), float64.

    A streaming log-sum-exp over chunks of the pool, so memory stays at CHUNK_ELEMENTS whatever M: the running
    maximum log-weight, the sum of weights and the weighted sum of vectors, each rescaled when the maximum grows.
    In-place where a tensor is not needed again: at M = 65536 every pass over the (B, N, M) log-weights counts."""
    B, N, D = x.shape
    scale = 0.5 / max(noise, NOISE_FLOOR)
    # k = 1 sees no pair: equal weights, the pool's mean. Predictions k = 2..N read the pairs j = 1..N-1 before them,
    # their squared residuals summed cumulatively (index k-2 holds the sum over j <= k-1).
    seen_x, seen_y = x[:, :-1].reshape(-1, D), y[:, :-1].reshape(-1, 1)  # (B (N-1), D), (B (N-1), 1)
    chunk = max(1, CHUNK_ELEMENTS // max(1, B * (N - 1)))
    top = torch.full((B, N - 1), -torch.inf, dtype=x.dtype, device=x.device)  # running max log-weight
    total = torch.zeros(B, N - 1, dtype=x.dtype, device=x.device)  # sum of exp(log-weight - top)
    weighted = torch.zeros(B, N - 1, D, dtype=x.dtype, device=x.device)  # sum of exp(log-weight - top) w_i
    for start in range(0, len(pool), chunk):
        w = pool[start:start + chunk]  # (m, D)
        residual = torch.addmm(seen_y, seen_x, w.T, alpha=-1)  # (B (N-1), m): y_j - x_j . w_i
        log_weight = residual.square_().view(B, N - 1, -1).cumsum(1).mul_(-scale)  # (B, N-1, m)
        new_top = torch.maximum(top, log_weight.amax(-1))  # (B, N-1)
        shrink = torch.exp(top - new_top)  # (B, N-1): 0 at the first chunk (top = -inf)
        p = log_weight.sub_(new_top[..., None]).exp_()  # (B, N-1, m): weights relative to the running max
        total = total * shrink + p.sum(-1)
        weighted = weighted * shrink[..., None] + p @ w  # (B, N-1, D)
        top = new_top
    posterior_mean = torch.cat([pool.mean(0).expand(B, 1, D), weighted / total[..., None]], 1)  # (B, N, D)
    return (x * posterior_mean).sum(-1)
