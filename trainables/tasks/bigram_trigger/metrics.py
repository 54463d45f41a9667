"""Bigram-with-triggers metrics as pure functions of (logits, batch, attention patterns, bigram) -> named values.

Positions are 0-indexed; labels[t] describes the target at t (data.py). "Early" and "late" are the first and second
half of the positions, t < T // 2 and t >= T // 2 (Wang & Sato split 256 positions at 128). Which evaluation split
each is computed on is the Task's choice (__init__.py says it); these functions only read what they are given.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from trainables.tasks import Batch
from trainables.tasks.bigram_trigger.bigram import Bigram
from trainables.tasks.bigram_trigger.data import RECALL


def _mean(values: torch.Tensor) -> float:
    return values.double().mean().item() if values.numel() else math.nan


def halves(length: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """(T,) bool masks of the early (t < T // 2) and late positions."""
    early = torch.arange(length, device=device) < length // 2
    return early, ~early


def recall_metrics(logits: torch.Tensor, batch: Batch, name: str = "head") -> dict[str, float]:
    """Loss and accuracy where label >= 2 (the in-context recallable outputs), also over early and late positions.

    logits (B, T, N). Keys: `{name}/loss`, `{name}/acc`, `{name}/acc_early`, `{name}/acc_late` (NaN where none)."""
    recall = batch.labels >= RECALL  # (B, T)
    correct = logits.argmax(-1) == batch.targets  # (B, T)
    early, late = halves(recall.shape[1], recall.device)
    loss = F.cross_entropy(logits[recall].double(), batch.targets[recall]).item() if recall.any() else math.nan
    return {f"{name}/loss": loss, f"{name}/acc": _mean(correct[recall]),
            f"{name}/acc_early": _mean(correct[recall & early]), f"{name}/acc_late": _mean(correct[recall & late])}


def bigram_metrics(logits: torch.Tensor, batch: Batch, bigram: Bigram) -> dict[str, float]:
    """`bigram/loss`: cross-entropy where label == 0 (targets drawn from pi_b(. | z_t)), also over the early and late
    positions (`bigram/loss_early`, `bigram/loss_late`). `bigram/excess`: that loss minus the mean of H(pi_b(. | z_t))
    over the same positions, the exact floor there (0: the bigram is learned).

    The excess is the honest comparison: SPEC's `bigram/floor` averages H over pi_u, but label-0 positions are the
    non-trigger ones, whose entropies differ (fixed triggers are the most frequent tokens)."""
    ordinary = batch.labels == 0  # (B, T)
    if not ordinary.any():
        return {key: math.nan for key in ("bigram/loss", "bigram/loss_early", "bigram/loss_late", "bigram/excess")}
    early, late = halves(ordinary.shape[1], ordinary.device)
    loss = lambda where: (F.cross_entropy(logits[where].double(), batch.targets[where]).item() if where.any()
                          else math.nan)
    floor = bigram.row_entropy.to(logits.device)[batch.tokens[ordinary]].mean().item()
    overall = loss(ordinary)
    return {"bigram/loss": overall, "bigram/loss_early": loss(ordinary & early),
            "bigram/loss_late": loss(ordinary & late), "bigram/excess": overall - floor}


def previous_token_hits(patterns: list[torch.Tensor]) -> torch.Tensor:
    """(B, layers x H, T - 1) bool: whether query t >= 1 attends most to t - 1, for every head of the layers before
    the last (a 2-layer model: SPEC's layer 1; a 1-layer model: its only layer). patterns: every layer's
    (B, H, T, T)."""
    candidates = patterns[:-1] or patterns
    T = candidates[0].shape[-1]
    previous = torch.arange(T - 1, device=candidates[0].device)
    return torch.cat([p[:, :, 1:].argmax(-1) == previous for p in candidates], 1)


def previous_token_scores(hits: torch.Tensor) -> dict[str, float]:
    """`attn/prev_token`: the fraction of positions t >= 1 whose attention peaks at t - 1, for the head that does it
    most often; `_early` and `_late`: that head's fractions over the early and late positions. hits (B, heads, T - 1)
    from previous_token_hits."""
    chosen = hits[:, hits.double().mean((0, 2)).argmax()]  # (B, T - 1): queries 1..T-1
    early, late = halves(chosen.shape[1] + 1, chosen.device)
    return {"attn/prev_token": _mean(chosen), "attn/prev_token_early": _mean(chosen[:, early[1:]]),
            "attn/prev_token_late": _mean(chosen[:, late[1:]])}


def previous_token_by_position(hits: torch.Tensor) -> torch.Tensor:
    """(T,) the fraction of sequences whose attention at t peaks at t - 1 (NaN at t = 0), for the head
    previous_token_scores picks. hits (B, heads, T - 1)."""
    chosen = hits[:, hits.double().mean((0, 2)).argmax()].double()  # (B, T - 1)
    return F.pad(chosen.mean(0), (1, 0), value=math.nan)


def induction_mass(patterns: list[torch.Tensor], batch: Batch) -> dict[str, float]:
    """`attn/induction`: at positions with label >= 2 (the query is a trigger seen before), the attention mass on the
    tokens right after the earlier occurrences of that trigger (each holds its output o_k; an induction head may
    spread its mass over all of them), for the best head among the layers after the first (SPEC: layer 2)."""
    tokens, recall = batch.tokens, batch.labels >= RECALL  # (B, T)
    if not recall.any():
        return {"attn/induction": math.nan}
    previous = F.pad(tokens, (1, 0), value=-1)[:, :-1]  # (B, T): the token before each key position
    targets = previous[:, None, :] == tokens[:, :, None]  # (B, T_query, T_key): key follows the query's token
    candidates = patterns[1:] or patterns
    mass = torch.cat([(p * targets[:, None]).sum(-1) for p in candidates], 1)  # (B, layers x H, T)
    per_head = mass.permute(0, 2, 1)[recall].mean(0)  # (layers x H,)
    return {"attn/induction": per_head.max().item()}


def accuracy_by_position(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """(T,) accuracy over the sequences whose target at t has label >= 2 (NaN where none has)."""
    recall = (batch.labels >= RECALL).double()  # (B, T)
    correct = (logits.argmax(-1) == batch.targets).double() * recall
    return correct.sum(0) / recall.sum(0)  # 0 / 0 = NaN


def first_step(history: list[dict[str, float]], metric: str, reached) -> float:
    """The first evaluation step at which `reached(value)` holds (NaN if never): when something was learned."""
    for record in history:
        value = record.get(metric)
        if isinstance(value, float) and math.isfinite(value) and reached(value):
            return float(record["step"])
    return math.nan
