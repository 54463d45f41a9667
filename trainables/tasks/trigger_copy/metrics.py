"""Trigger-copy metrics as pure functions of (predictions, batch, attention, weights) -> named values (SPEC §1-§3).

Positions here are 0-indexed: SPEC's 1-indexed position p is index p - 1. A batch's per-sequence l1 and l2 are in
batch.info.
"""
from __future__ import annotations

import torch

from trainables.tasks import Batch


def _token_at(batch: Batch, index: torch.Tensor) -> torch.Tensor:
    return batch.tokens[torch.arange(len(index), device=index.device), index]


def shortcut_rates(predictions: torch.Tensor, batch: Batch, l_min: int) -> dict[str, float]:
    """How often OOD predictions are what a positional shortcut would answer (paper §4.1).

    pseudo rate: the token at position l̄ + 2, l̄ = (l1 + l2) / 2 — the answer position of a training sequence of the
    same length. It exists only when l1 + l2 is even (T odd), so the rate is over those sequences (NaN if none;
    `displaced` always has it). leftmost rate: the token at position l_min + 2, the shortest training answer position.
    """
    l1, l2 = batch.info["l1"], batch.info["l2"]
    even = (l1 + l2) % 2 == 0
    pseudo_index = (l1 + l2) // 2 + 1  # position l̄ + 2
    pseudo = (predictions == _token_at(batch, pseudo_index))[even]
    leftmost = predictions == _token_at(batch, torch.full_like(l1, l_min + 1))
    return {"ood/pseudo_rate": pseudo.double().mean().item() if len(pseudo) else float("nan"),
            "ood/leftmost_rate": leftmost.double().mean().item()}


def mechanism_scores(attention: torch.Tensor, batch: Batch) -> dict[str, float]:
    """Attention mass at the query on the output token (induction) and on position l̄ + 2 (positional shortcut).

    attention: (B, H, T) of the last layer at the query. Each score is averaged over sequences, then the head with the
    largest score is reported: one induction head among several is what matters, and averaging heads would hide it.
    """
    l1, l2 = batch.info["l1"], batch.info["l2"]
    rows = torch.arange(len(l1), device=attention.device)
    induction = attention[rows, :, l1 + 1]  # (B, H)
    even = (l1 + l2) % 2 == 0
    positional = attention[rows, :, (l1 + l2) // 2 + 1][even]  # (B_even, H)
    return {"mech/induction_score": induction.mean(0).max().item(),
            "mech/positional_score": positional.mean(0).max().item() if len(positional) else float("nan")}


def accuracy_by_trigger_position(correct: torch.Tensor, batch: Batch, support: list[int]) -> dict[str, float]:
    """OOD accuracy split by whether the first trigger sits where training put it: training sequences have l1 = l for
    l in the support S, so an OOD sequence with l1 in S has its trigger (and output) at a position a training trigger
    (and output) has occupied. A model whose induction head works only at the positions it was trained at (one-hot
    absolute positions) copies the first kind and fails the second; a position-free one does both.

    `ood/seen_pos_share`: the share of OOD sequences of the first kind; `ood/acc_seen_pos`, `ood/acc_new_pos`: the
    accuracy over each kind (NaN where there is none). correct (B,) bool."""
    seen = torch.isin(batch.info["l1"], torch.tensor(support, device=correct.device))  # (B,)
    mean = lambda where: correct[where].double().mean().item() if where.any() else float("nan")
    return {"ood/seen_pos_share": seen.double().mean().item(), "ood/acc_seen_pos": mean(seen),
            "ood/acc_new_pos": mean(~seen)}


def accuracy_by_pair(correct: torch.Tensor, batch: Batch, max_len: int) -> torch.Tensor:
    """(L, L) float64 matrix: accuracy of the sequences with (l1, l2) at [l1, l2]; NaN where there were none."""
    index = (batch.info["l1"] * max_len + batch.info["l2"]).cpu()
    correct = correct.double().cpu()
    hits = torch.zeros(max_len * max_len, dtype=torch.float64).index_add_(0, index, correct)
    count = torch.zeros(max_len * max_len, dtype=torch.float64).index_add_(0, index, torch.ones_like(correct))
    return (hits / count).reshape(max_len, max_len)  # 0 / 0 = NaN marks empty cells


def kq_peaks(W_KQ: torch.Tensor, vocab_size: int, max_len: int, n_triggers: int) -> dict[str, float]:
    """The two peaks of the one-step W_KQ (Lemma 7), rows = key features, columns = query features.

    positional peak: the largest entry of the position-position block (key p_{l+2} or p_{l+3}, query p_T), which
    scales like max_l q_l / T(l). induction peak: W_KQ[prev-token w, current-token w] averaged over triggers w (all
    triggers are symmetric), which scales like sum_l q_l / T(l).
    """
    L, N = max_len, vocab_size
    triggers = torch.arange(n_triggers, device=W_KQ.device)
    induction = W_KQ[L + N + triggers, L + triggers]
    return {"mech/kq_positional_peak": W_KQ[:L, :L].max().item(), "mech/kq_induction_peak": induction.mean().item()}
