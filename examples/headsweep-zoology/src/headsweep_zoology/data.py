"""Multi-query associative recall (MQAR; Arora et al. 2023, "Zoology"), generated from one torch.Generator.

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

Everything is vectorised over the batch (no Python loop over sequences) and drawn in a fixed order from the
generator passed in, so a batch is a function of the generator's state.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

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


def distinct(n: int, k: int, pool: int, generator: torch.Generator) -> torch.Tensor:
    """(n, k) long: k distinct indices in 0 .. pool-1 per row, in random order (the first k of a random permutation
    of each row: argsort of uniforms)."""
    return torch.rand(n, pool, generator=generator).argsort(dim=1)[:, :k]


def sample(cfg: MqarConfig, n: int, generator: torch.Generator, split: str = "train",
           pad_to: int | None = None) -> Batch:
    """n sequences of `split` (train | heldout), right-padded to `pad_to` positions when given."""
    first_key, n_pool = key_range(cfg, split)
    P, Q = cfg.n_pairs, cfg.n_queries
    keys = first_key + distinct(n, P, n_pool, generator)  # (B, P)
    values = cfg.n_keys + 1 + torch.randint(cfg.n_values, (n, P), generator=generator)  # (B, P)
    asked = distinct(n, Q, P, generator)  # (B, Q): which pair each query asks for
    context = torch.stack([keys, values], dim=2).reshape(n, 2 * P)  # k_1 v_1 k_2 v_2 ...
    asked_keys, answers = keys.gather(1, asked), values.gather(1, asked)  # (B, Q) each
    T, scored = seq_len(cfg), query_positions(cfg)
    if cfg.teacher_forcing:  # q_1 a_1 q_2 a_2 ... q_Q: position t predicts token t + 1
        sequence = torch.cat([context, torch.stack([asked_keys, answers], dim=2).reshape(n, 2 * Q)], dim=1)
        tokens, targets = sequence[:, :T], sequence[:, 1:]
    else:  # q_1 q_2 ... q_Q, each scored with its answer; in the context, position t's target is token t + 1
        tokens = torch.cat([context, asked_keys], dim=1)
        targets = F.pad(tokens[:, 1:], (0, 1))
        targets[:, scored] = answers
    label = torch.full((T,), ANSWER)
    label[: 2 * P] = CONTEXT
    label[scored] = QUERY
    labels = label.expand(n, T).clone()
    batch = Batch(tokens=tokens, targets=targets, loss_mask=labels == QUERY, labels=labels, query=None, info={})
    return batch if pad_to is None else batch.padded(pad_to)


def pair_of_query(cfg: MqarConfig, batch: Batch) -> torch.Tensor:
    """(B, Q) the context pair (0 .. P-1) each query key asks for, read off the tokens (keys are distinct)."""
    context_keys = batch.tokens[:, 0 : 2 * cfg.n_pairs : 2]  # (B, P)
    query_keys = batch.tokens[:, query_positions(cfg)]  # (B, Q)
    return (query_keys[:, :, None] == context_keys[:, None, :]).int().argmax(-1)
