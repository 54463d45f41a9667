"""Length distributions D_l over l (SPEC §1) and the diversity measures the sweeps report.

A distribution is a dict {l: q_l} over its support S (only l with q_l > 0), in increasing l. The measures are plain
arithmetic on whatever number type the q_l are, so `fractions.Fraction` weights give exact answers (tests rely on it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

from trainables.errors import ConfigError

FAMILIES = ("uniform", "weights", "power", "optimal")


@dataclass
class LengthsConfig:
    """Which distribution the training lengths l (with l1 = l2 = l) are drawn from."""

    family: str = "uniform"  # uniform | weights | power | optimal
    low: int = 3  # uniform/power: smallest l (the papers' l_min)
    high: int = 15  # uniform/power: largest l (the papers' l_max); width K = high - low + 1
    width: int = 0  # uniform/power: K > 0 sets high = low + K - 1 at load (the papers' (l0, K) parametrisation)
    exponent: float = 1.0  # power: q_l ∝ l^exponent on {low..high}
    weights: list[float] = field(default_factory=list)  # weights: q_l ∝ weights[l-1] for l = 1..len(weights)
    optimal_n: int = 0  # optimal: Proposition 8 on {1..optimal_n}; 0 means task.n_triggers


def distribution(cfg: LengthsConfig, n_triggers: int) -> dict[int, float]:
    """q as {l: q_l} with q_l > 0, normalised. Raises ConfigError (key relative to task.lengths) if cfg describes
    none."""
    if cfg.family == "uniform":
        _check_range(cfg)
        return {l: 1.0 / (cfg.high - cfg.low + 1) for l in range(cfg.low, cfg.high + 1)}
    if cfg.family == "power":
        _check_range(cfg)
        if not math.isfinite(cfg.exponent):
            raise ConfigError("exponent", f"must be finite, got {cfg.exponent}")
        # l^a computed relative to the largest term, so large |a| neither overflows nor leaves all weights zero;
        # lengths whose weight underflows to 0 leave the support.
        top = max(cfg.exponent * math.log(l) for l in (cfg.low, cfg.high))
        raw = {l: math.exp(cfg.exponent * math.log(l) - top) for l in range(cfg.low, cfg.high + 1)}
        raw = {l: w for l, w in raw.items() if w > 0}
    elif cfg.family == "weights":
        if any(w < 0 or not math.isfinite(w) for w in cfg.weights):
            raise ConfigError("weights", "every weight must be finite and >= 0")
        raw = {l: float(w) for l, w in enumerate(cfg.weights, start=1) if w > 0}
        if not raw:
            raise ConfigError("weights", "needs at least one positive weight (the support is empty)")
    elif cfg.family == "optimal":
        return {l: float(q) for l, q in optimal_distribution(cfg.optimal_n or n_triggers).items()}
    else:
        raise ConfigError("family", f"must be one of {', '.join(FAMILIES)}, got {cfg.family!r}")
    total = sum(raw.values())
    return {l: w / total for l, w in raw.items()}


def _check_range(cfg: LengthsConfig) -> None:
    if cfg.low < 1:
        raise ConfigError("low", f"must be >= 1, got {cfg.low}")
    if cfg.high < cfg.low:
        raise ConfigError("high", f"must be >= low ({cfg.low}), got {cfg.high} (the support would be empty)")


def optimal_distribution(n_triggers: int) -> dict[int, Fraction]:
    """Proposition 8: q_l = l / Z on {1..N_trg}, Z = N_trg (N_trg + 1) / 2; it has R = 1 / N_trg exactly."""
    if n_triggers < 1:
        raise ConfigError("optimal_n", f"must be >= 1, got {n_triggers}")
    z = n_triggers * (n_triggers + 1) // 2
    return {l: Fraction(l, z) for l in range(1, n_triggers + 1)}


def max_sum_ratio(q: dict[int, float]):
    """Definition 4: R(D) = max_l (q_l / l) / sum_l (q_l / l). Small R means diverse (positional signal diluted)."""
    per_length = [p / l for l, p in q.items()]
    return max(per_length) / sum(per_length)


def entropy(q: dict[int, float]) -> float:
    """Shannon entropy of q in nats."""
    return -sum(float(p) * math.log(float(p)) for p in q.values() if p > 0)


def data_cost(q: dict[int, float]):
    """E[l^2], the data cost Proposition 8 minimises (sequence length grows like l, attention cost like l^2)."""
    return sum(p * l * l for l, p in q.items())


def diversity_metrics(q: dict[int, float]) -> dict[str, float]:
    """The `data/*` metrics: width = |S| (the number of lengths with q_l > 0), entropy, R and 1/R, cost."""
    ratio = float(max_sum_ratio(q))
    return {"data/max_sum_ratio": ratio, "data/inv_ratio": 1.0 / ratio, "data/width": float(len(q)),
            "data/entropy": entropy(q), "data/cost": float(data_cost(q))}
