"""Mixed n-gram metrics as pure functions: each component's loss and accuracy (sliced by the per-position labels),
attention probes of the two mechanisms, and the lazy-to-rich transition read off a run's loss curves (SPEC §6).

Positions are 0-indexed; position t predicts z_{t+1}. In an in-context sequence with period k, the current token at
t >= k last occurred at t - k, so an induction head attends to t - k + 1, the token that followed it.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from trainables.cache import patterns
from trainables.tasks import Batch
from trainables.tasks.mixed_ngram.data import ICL, LAZY

COMPONENTS = {"lazy": LAZY, "icl": ICL}  # component name -> the label of its targets
MIN_DROP = 0.5  # a curve "drops" only if its final value is below (1 - MIN_DROP) times its start level


def component_metrics(logits: torch.Tensor, batch: Batch) -> dict[str, tuple[float, float]]:
    """{component: (mean cross-entropy, argmax accuracy)} over the targets labelled as that component; (NaN, NaN)
    where the batch has none (e.g. the in-context component at alpha = 0). logits: (B, T, N)."""
    out = {}
    for name, label in COMPONENTS.items():
        where = batch.labels == label  # (B, T)
        if not where.any():
            out[name] = (math.nan, math.nan)
            continue
        scored, targets = logits[where].double(), batch.targets[where]  # (M, N), (M,)
        out[name] = (F.cross_entropy(scored, targets).item(), (scored.argmax(-1) == targets).double().mean().item())
    return out


def induction_score(cache: dict, batch: Batch) -> float:
    """Last-layer attention at in-context targets (label ICL) on t - k + 1, the token after the current token's most
    recent earlier occurrence; averaged over those positions, the largest over heads (one induction head is enough).
    NaN without in-context targets."""
    pattern = patterns(cache)[-1]  # (B, H, T, T)
    rows, queries = (batch.labels == ICL).nonzero(as_tuple=True)  # (M,) each
    if len(rows) == 0:
        return math.nan
    keys = queries - batch.info["period"][rows] + 1  # (M,)
    return pattern[rows, :, queries, keys].mean(0).max().item()  # (M, H) -> (H,) -> max


def previous_token_score(cache: dict, batch: Batch) -> float:
    """First-layer attention from every scored position t >= 1 on t - 1 (what the induction head's keys and the lazy
    rule both need), averaged over those positions, the largest over heads."""
    pattern = patterns(cache)[0]  # (B, H, T, T)
    scored = batch.loss_mask.clone()
    scored[:, 0] = False
    rows, queries = scored.nonzero(as_tuple=True)
    return pattern[rows, :, queries, queries - 1].mean(0).max().item()


def drop_step(steps: list[float], losses: list[float], min_drop: float = MIN_DROP) -> float:
    """The step at which a loss curve dropped: the first evaluation from which on the loss stays below the midpoint
    between its start level and its final value. NaN unless it ended below (1 - min_drop) times its start level.

    start level: the highest loss up to the curve's lowest point (the plateau it leaves; a rise before the plateau
    counts as the plateau). final value: the last evaluation. Non-finite values are ignored. Requiring the loss to
    stay below the midpoint makes a noisy dip before the real drop not count.
    """
    points = [(s, l) for s, l in zip(steps, losses) if l is not None and math.isfinite(l)]
    if not points:
        return math.nan
    values = [l for _, l in points]
    lowest = min(range(len(values)), key=values.__getitem__)
    start, final = max(values[:lowest + 1]), values[-1]
    if not final < (1 - min_drop) * start:
        return math.nan
    midpoint = (start + final) / 2
    above = [i for i, l in enumerate(values) if l >= midpoint]
    return float(points[above[-1] + 1][0] if above else points[0][0])


def transition(history: list[dict[str, float]]) -> dict[str, float]:
    """The lazy-to-rich transition of a run (its evaluations in order, each with "step"):

    lazy/fit_step: the step at which the lazy loss dropped (the 4-gram fitted); icl/transition_step: the step at
    which the in-context loss dropped (the induction head formed); icl/plateau_steps: the steps between the two, the
    plateau on which the lazy rule is fitted and the in-context loss has not yet dropped (NaN unless both dropped).
    """
    steps = [record["step"] for record in history]
    fit = drop_step(steps, [record.get("lazy/loss") for record in history])
    rich = drop_step(steps, [record.get("icl/loss") for record in history])
    return {"lazy/fit_step": fit, "icl/transition_step": rich, "icl/plateau_steps": rich - fit}
