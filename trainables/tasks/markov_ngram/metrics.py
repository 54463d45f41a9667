"""Markov n-gram metrics as pure functions: the in-context k-gram strategies (the Bayes predictor is k = n), the
model's cross-entropy where it is scored, the per-head lags of first-layer attention, and the stage a loss sits at.

Positions are 0-indexed; position t of a batch predicts x_{t+1} (data.py). A full sequence x_0 .. x_L is rebuilt from
a batch as its first token followed by its targets.
"""
from __future__ import annotations

import torch

from trainables.tasks import Batch
from trainables.tasks.markov_ngram.data import context_index

STRATEGY_NAMES = {1: "unigram", 2: "bigram", 3: "trigram"}  # k -> name of the in-context k-gram strategy's loss


def strategy_name(k: int, order: int) -> str:
    """The metric name of the in-context k-gram strategy: `bayes` for k = n (the Bayes-optimal predictor)."""
    return "bayes" if k == order else STRATEGY_NAMES.get(k, f"{k}gram")


def full_sequences(batch: Batch, seq_len: int) -> torch.Tensor:
    """(B, L+1) x_0 .. x_L: the first token, then what each of the L positions predicts."""
    return torch.cat([batch.tokens[:, :1], batch.targets[:, :seq_len]], dim=1)


def contexts(sequences: torch.Tensor, k: int, vocab_size: int) -> torch.Tensor:
    """(B, L+1) index of the k-1 tokens before each position j (x_{j-k+1} .. x_{j-1}); -1 where j < k-1."""
    B, length = sequences.shape
    if k == 1:
        return torch.zeros_like(sequences)  # no context: every position shares the empty one
    windows = sequences.unfold(1, k - 1, 1)  # (B, L+2-k, k-1): windows starting at 0 .. L+1-k
    index = torch.full((B, length), -1, dtype=torch.long, device=sequences.device)
    index[:, k - 1:] = context_index(windows[:, : length - k + 1], vocab_size)  # window ending at j-1 -> position j
    return index


def in_context_probs(sequences: torch.Tensor, positions: torch.Tensor, k: int, vocab_size: int,
                     alpha: float) -> torch.Tensor:
    """(B, P, S) float64: the add-alpha in-context k-gram estimate of x_{t+1} from x_0 .. x_t, for t in positions (P,).

    p(y) = (count(ctx -> y) + alpha) / (count(ctx) + S alpha), counts over the transitions j <= t of the sequence so
    far whose k-1 preceding tokens equal the k-1 tokens before t+1. With k = n and Dirichlet(alpha) rows this is the
    posterior mean of the table's row, the Bayes-optimal prediction; k = 1 counts tokens (the unigram strategy).
    Exactly so when the first tokens are uniform (Chen); with task.first=stationary (Edelman) the first token also
    carries a little evidence about the table, which the counts ignore, so the "Bayes" loss is then a near-optimal
    reference, not a strict floor.
    Vectorised as the ideal induction head: each scored position "attends" to every earlier position whose context
    matches its own and counts the tokens there.
    """
    c = contexts(sequences, k, vocab_size)  # (B, L+1)
    length = sequences.shape[1]
    query = c[:, positions + 1]  # (B, P): the context of the token each position predicts
    earlier = torch.arange(length, device=sequences.device)[None, :] <= positions[:, None]  # (P, L+1): j <= t
    match = (c[:, None, :] == query[:, :, None]) & earlier & (c[:, None, :] >= 0)  # (B, P, L+1)
    one_hot = torch.nn.functional.one_hot(sequences, vocab_size).float()  # (B, L+1, S)
    counts = torch.einsum("bpj,bjs->bps", match.float(), one_hot).double()  # (B, P, S), exact small integers
    return (counts + alpha) / (counts.sum(-1, keepdim=True) + vocab_size * alpha)


def scored_positions(batch: Batch) -> torch.Tensor:
    """(P,) every position some sequence is scored at, in order."""
    return batch.loss_mask.any(0).nonzero().squeeze(1)


def strategy_losses(batch: Batch, seq_len: int, order: int, vocab_size: int, alpha: float) -> dict[str, float]:
    """Cross-entropy of every in-context k-gram strategy (k = 1 .. n) on exactly the positions the model is scored
    on: {"unigram": .., "bigram": .., "bayes": ..} (names from `strategy_name`)."""
    sequences = full_sequences(batch, seq_len)
    positions = scored_positions(batch)
    mask = batch.loss_mask[:, positions]  # (B, P)
    targets = sequences[:, positions + 1]  # (B, P)
    losses = {}
    for k in range(1, order + 1):
        probs = in_context_probs(sequences, positions, k, vocab_size, alpha)  # (B, P, S)
        log_p = probs.gather(-1, targets[..., None]).squeeze(-1).log()  # (B, P)
        losses[strategy_name(k, order)] = -log_p[mask].mean().item()
    return losses


def model_loss(logits: torch.Tensor, batch: Batch) -> float:
    """The model's mean cross-entropy (float64) where the batch is scored: logits (B, N) at the query, or (B, T, N)."""
    scored = logits if batch.query is not None else logits[batch.loss_mask]
    return torch.nn.functional.cross_entropy(scored.double(), batch.scored_targets()).item()


def stage(loss: float, references: list[float]) -> int:
    """Index of the reference loss closest to `loss` (references: uniform, then the k-gram strategies by k)."""
    return min(range(len(references)), key=lambda i: abs(loss - references[i]))


def lag_profile(pattern: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """(H, T) mean attention mass per offset (query position minus key position) over the chosen query rows.

    pattern (B, H, T_q, T): attention of T_q query rows; rows (B, T_q) long: each row's position, -1 for a row left
    out. Each head's profile sums to 1 over offsets: where its attention concentrates (a previous-token head: 1).
    """
    B, H, T_q, T = pattern.shape
    offset = rows[..., None] - torch.arange(T, device=pattern.device)  # (B, T_q, T)
    keep = (offset >= 0) & (rows[..., None] >= 0)  # causal keys of kept rows
    mass = pattern.permute(1, 0, 2, 3)[:, keep]  # (H, kept entries)
    profile = torch.zeros(H, T, dtype=torch.float64, device=pattern.device)
    profile.index_add_(1, offset[keep], mass.double())
    return profile / max(int((rows >= 0).sum()), 1)


def lag_metrics(profile: torch.Tensor, order: int, layer: int = 0) -> dict[str, float]:
    """Per head: the offset its attention concentrates on (`attn/lag_L{layer}H{h}`) and the mass there. Per parent
    lag m in 1 .. n-1: the largest mass any head puts on it (`attn/parent_mass_{m}`; a head may split its attention
    between two parents, which its argmax alone hides). And the share of parent lags that are some head's argmax
    (`attn/parent_coverage`)."""
    mass, lag = profile.max(dim=1)  # (H,)
    metrics = {}
    for head, (m, d) in enumerate(zip(mass.tolist(), lag.tolist())):
        metrics[f"attn/lag_L{layer}H{head}"] = float(d)
        metrics[f"attn/lag_mass_L{layer}H{head}"] = m
    parents = range(1, order)
    for m in parents:
        metrics[f"attn/parent_mass_{m}"] = profile[:, m].max().item() if m < profile.shape[1] else 0.0
    metrics["attn/parent_coverage"] = len(set(parents) & set(lag.tolist())) / len(parents)
    return metrics
