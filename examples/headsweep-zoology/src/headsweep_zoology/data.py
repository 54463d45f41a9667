"""Multi-query associative recall (MQAR; Arora et al. 2023, "Zoology").

Vocabulary: token 0 is padding (never drawn), keys are 1 .. n_keys, values n_keys + 1 .. n_keys + n_values.

A sequence of P = n_pairs pairs and Q = n_queries queries:

    k_1 v_1 k_2 v_2 ... k_P v_P   q_1 q_2 ... q_Q
    |------ context: 2P -------|  |-- queries --|

The P keys of a sequence are distinct, its values drawn with replacement. The queries are Q distinct keys of the
context in random order, and each is scored: its target is the value paired with it in the context. So T = 2P + Q
tokens and Q scored positions per sequence (as in Zoology, where the answers are not part of the input).

`teacher_forcing: true` follows each query by its answer, q_1 a_1 q_2 a_2 ... q_Q (the last answer left out, since
nothing reads it; T = 2P + 2Q - 1), so every scored target is the next token. It also opens a shortcut: the answers
already given rule their pairs out, and with Q = P the last query is answered by elimination, without recall
(measured: base_conv's last-query accuracy near 1 while its first query's stays near 0.5). Hence off by default.

Splits differ only in the keys they draw from (the diversity knob):
- `train` (the `id` evaluation split too): keys 1 .. n_train_keys;
- `heldout` (the `ood` split): keys training never shows, the last n_test_keys keys of the vocabulary, or every key
  above n_train_keys when n_test_keys is 0. A fixed n_test_keys keeps the OOD keys the same for every n_train_keys of
  a sweep, so its runs are compared on the same OOD sequences.

Everything is vectorised over the batch (no Python loop over sequences) and drawn in a fixed order from one random
source (`trainables.streams`): in training, a member's own counter-based stream, so that a packed trial draws all its
members' batches in one call on their device (`sampler`, the task's batch_sampler); in `sample()` (the
evaluation sets, derived by headsweep from the same hook), a torch.Generator, through the same code with one member. So
a batch is a function of the seed.
Shapes: M members (a pack's population), B = n sequences each, T positions.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from trainables.streams import Draws
from trainables.tasks import PAD_LABEL, Batch

SPLITS = ("train", "heldout")

# Per-position labels: metrics slice by them (PAD_LABEL only where a batch is padded for packing).
PAD, CONTEXT, QUERY, ANSWER = PAD_LABEL, 0, 1, 2  # ANSWER: a query's value, read (teacher forcing), not scored


@dataclass
class MqarConfig:
    """The MQAR data model and which keys training may use."""

    name: str = "mqar"
    n_keys: int = 32  # keys are tokens 1 .. n_keys
    n_values: int = 32  # values are tokens n_keys + 1 .. n_keys + n_values
    n_pairs: int = 4  # P: key-value pairs in a sequence's context (distinct keys)
    n_queries: int = 4  # Q <= P: keys of the context asked again, in random order, each scored
    n_train_keys: int = 16  # the diversity knob: training sequences draw their keys from 1 .. n_train_keys only
    n_test_keys: int = 0  # the ood split's keys: the last n_test_keys keys; 0 = every key above n_train_keys
    teacher_forcing: bool = False  # follow each query by its value in the input (opens an elimination shortcut)


def seq_len(cfg: MqarConfig) -> int:
    """T: the context (2P), then the queries (Q), or with teacher forcing the queries and every answer but the last."""
    return 2 * cfg.n_pairs + (2 * cfg.n_queries - 1 if cfg.teacher_forcing else cfg.n_queries)


def query_positions(cfg: MqarConfig) -> torch.Tensor:
    """(Q,) the positions of the query keys: the scored positions of every sequence."""
    return 2 * cfg.n_pairs + torch.arange(cfg.n_queries) * (2 if cfg.teacher_forcing else 1)


def d_vocab(cfg: MqarConfig) -> int:
    return 1 + cfg.n_keys + cfg.n_values


def key_range(cfg: MqarConfig, split: str) -> tuple[int, int]:
    """(first key, number of keys) a split draws from."""
    if split == "train":
        return 1, cfg.n_train_keys
    if split == "heldout":
        held = cfg.n_test_keys or cfg.n_keys - cfg.n_train_keys
        return cfg.n_keys - held + 1, held
    raise ValueError(f"split: must be one of {', '.join(SPLITS)}, got {split!r}")


def sampler(cfgs: list[MqarConfig], device, split: str = "train") -> Callable[[int, Draws], Batch]:
    """The task's batch_sampler: draw(n, draws) -> a Batch of (M, n, T) tensors of `split` (train | heldout), each
    member its own n_train_keys (the knob); n_keys, n_values, n_pairs, n_queries and teacher_forcing (the vocabulary
    and the layout) are the pack's. The members' key ranges become (M, ...) tensors on `device` here, once, so a draw
    reads no config and copies nothing to the device."""
    ranges = [key_range(cfg, split) for cfg in cfgs]
    pack = cfgs[0]  # the layout and the vocabulary: equal in a pack
    P, Q = pack.n_pairs, pack.n_queries
    first_key = torch.tensor([first for first, _ in ranges], device=device)[:, None, None]  # (M, 1, 1)
    pool = torch.tensor([size for _, size in ranges], device=device)[:, None, None]  # (M, 1, 1): keys to draw from
    # Every member ranks n_keys uniforms, so its draws do not depend on the pools of the members packed with it; the
    # indices beyond its pool rank last.
    outside = torch.arange(pack.n_keys, device=device) >= pool  # (M, 1, n_keys)
    label = _labels(pack).to(device)  # (T,)

    def draw(n: int, draws: Draws) -> Batch:
        ranks = draws.uniform(n, pack.n_keys).masked_fill(outside, 2.0)  # (M, n, n_keys): u in (0, 1) in the pool
        keys = first_key + _first_in_random_order(ranks, P)  # (M, n, P): distinct keys of the member's range
        values = draws.randint(pack.n_keys + 1, pack.n_keys + 1 + pack.n_values, n, P)  # (M, n, P), with replacement
        asked = _first_in_random_order(draws.uniform(n, P), Q)  # (M, n, Q): the pair each query asks for
        tokens, targets = _layout(pack, keys, values, asked)  # (M, n, T) each
        labels = label.expand(draws.members, n, -1).clone()  # (M, n, T): its own memory, as any batch's
        return Batch(tokens=tokens, targets=targets, loss_mask=labels == QUERY, labels=labels, query=None, info={})

    return draw


def _first_in_random_order(u: torch.Tensor, k: int) -> torch.Tensor:
    """(..., k) distinct indices of the last dimension of u (uniforms; any above 1 rank last), in random order: the
    first k of a random permutation (argsort of uniforms; stable, so ties cannot differ between devices)."""
    return u.argsort(dim=-1, stable=True)[..., :k]


def _layout(cfg: MqarConfig, keys: torch.Tensor, values: torch.Tensor,
            asked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, n, T) tokens and targets of the context k_1 v_1 ... k_P v_P (keys, values: (M, n, P)) and the queries
    (asked: (M, n, Q) pair indices), built by concatenation: no index assignment, the same operations for any M."""
    context = torch.stack([keys, values], dim=-1).flatten(-2)  # (M, n, 2P): k_1 v_1 k_2 v_2 ...
    asked_keys, answers = keys.gather(-1, asked), values.gather(-1, asked)  # (M, n, Q) each
    if cfg.teacher_forcing:  # q_1 a_1 q_2 a_2 ... q_Q: position t predicts token t + 1
        sequence = torch.cat([context, torch.stack([asked_keys, answers], dim=-1).flatten(-2)], dim=-1)
        return sequence[..., : seq_len(cfg)], sequence[..., 1:]
    # q_1 q_2 ... q_Q, each scored with its answer; in the context, position t's target is token t + 1
    tokens = torch.cat([context, asked_keys], dim=-1)  # (M, n, 2P + Q)
    return tokens, torch.cat([tokens[..., 1 : 2 * cfg.n_pairs + 1], answers], dim=-1)


def _labels(cfg: MqarConfig) -> torch.Tensor:
    """(T,) the per-position labels, the same in every sequence: CONTEXT, then QUERY (and ANSWER between queries)."""
    label = torch.full((seq_len(cfg),), ANSWER)
    label[: 2 * cfg.n_pairs] = CONTEXT
    label[query_positions(cfg)] = QUERY
    return label


def pair_of_query(cfg: MqarConfig, batch: Batch) -> torch.Tensor:
    """(B, Q) the context pair (0 .. P-1) each query key asks for, read off the tokens (keys are distinct)."""
    context_keys = batch.tokens[:, 0 : 2 * cfg.n_pairs : 2]  # (B, P)
    query_keys = batch.tokens[:, query_positions(cfg)]  # (B, Q)
    return (query_keys[:, :, None] == context_keys[:, None, :]).int().argmax(-1)
