"""The MQAR task behind headsweep's Task protocol: `task.name: mqar` (entry point) or
`task.name: "headsweep_zoology.mqar:TASK"` (module path).

The question: a model learns associative recall on keys 1 .. n_train_keys; does it recall keys it never saw in
training (`ood/acc`), and from how many distinct training keys on? With learned embeddings an unseen key keeps its
random initial embedding, so recall that generalizes must match a query to its key in the context by a comparison
that works on any embedding, not on the few directions training showed.

Everything the base class derives from `knobs` and `success_metric` is left to its defaults: the diversity axis
(`data/n_train_keys`), `diversity()`, and, in its view (MqarView: how the task is shown, apart from what it is), the
headline and table columns and the W&B dashboard.
"""
from __future__ import annotations

import torch

from trainables.cache import patterns
from trainables.errors import require
from trainables.tasks import Task, TaskView

from .data import MqarConfig, d_vocab, key_range, pair_of_query, query_positions, sampler, seq_len


class MqarView(TaskView):
    """How MQAR is shown: the defaults, but for what its diversity axis is called on figures."""

    diversity_label = "distinct training keys"


class MqarTask(Task):
    """Multi-query associative recall (Zoology, Arora et al. 2023): does recall reach keys training never showed?"""

    name = "mqar"
    config = MqarConfig
    success_metric = "ood/acc"  # recall on sequences whose keys training never showed
    knobs = ("task.n_train_keys",)
    view = MqarView
    member_fields = ("n_train_keys", "n_test_keys")  # the knob, and the ood keys training never draws: a sweep's
    # members that differ only in these pack together and draw their batches at once (batch_sampler)
    batch_sampler = staticmethod(sampler)  # data.py's: every split, and a pack's training batches in one draw

    def validate(self, cfg: MqarConfig) -> None:
        require(
            ("task.n_pairs", cfg.n_pairs >= 1, "must be >= 1"),
            ("task.n_queries", 1 <= cfg.n_queries <= cfg.n_pairs,
             f"must be in 1 .. task.n_pairs = {cfg.n_pairs} (each query asks a distinct key of the context)"),
            ("task.n_values", cfg.n_values >= 1, "must be >= 1"),
            ("task.n_keys", cfg.n_keys >= 2 * cfg.n_pairs,
             f"must be >= 2 * task.n_pairs = {2 * cfg.n_pairs} (training and held-out keys each fill a context)"),
            ("task.n_train_keys", cfg.n_train_keys >= cfg.n_pairs,
             f"must be >= task.n_pairs = {cfg.n_pairs} (a training sequence has that many distinct keys)"),
            ("task.n_test_keys", cfg.n_test_keys == 0 or cfg.n_test_keys >= cfg.n_pairs,
             f"must be 0 (every key above task.n_train_keys) or >= task.n_pairs = {cfg.n_pairs}"),
        )
        held = cfg.n_test_keys or cfg.n_keys - cfg.n_train_keys
        require(
            ("task.n_train_keys", cfg.n_train_keys + held <= cfg.n_keys,
             f"is {cfg.n_train_keys}, which overlaps the last {held} keys (task.n_test_keys), held out for ood; "
             f"at most task.n_keys - task.n_test_keys = {cfg.n_keys - held}"),
            ("task.n_train_keys", held >= cfg.n_pairs,
             f"is {cfg.n_train_keys}, which leaves task.n_keys - task.n_train_keys = {held} held-out keys, fewer than "
             f"task.n_pairs = {cfg.n_pairs} (an ood sequence needs that many distinct unseen keys); at most "
             f"{cfg.n_keys - cfg.n_pairs}"),
        )

    def dims(self, cfg: MqarConfig) -> tuple[int, int]:
        return d_vocab(cfg), seq_len(cfg)

    def eval_splits(self, cfg: MqarConfig) -> dict[str, str]:
        """OOD first: the evaluation sets are drawn in this order from one generator, so with a fixed task.n_test_keys
        the OOD sequences are the same whatever task.n_train_keys, and a sweep's runs are compared on them."""
        return {"ood": "heldout", "id": "train"}

    def metrics(self, cfg, prefix, batch, logits, cache) -> dict[str, float]:
        """How the recall fails, beside `<prefix>/acc`:
        - `value_rate`: the prediction is some value token (the model knows a value is asked for);
        - `in_context_rate`: it is a value of this sequence's context (it copies, if perhaps the wrong pair's);
        - `acc_first_query`, `acc_last_query`: accuracy of the first and the last query (the last reads the most
          intervening tokens);
        - `attn_value_share` (models with attention only): at each query, the last layer's largest attention (over
          heads) on the matching pair's value, where an induction head looks."""
        P, Q = cfg.n_pairs, cfg.n_queries
        rows = query_positions(cfg)  # (Q,) the query positions
        predicted = logits[:, rows].argmax(-1)  # (B, Q)
        answers = batch.targets[:, rows]  # (B, Q)
        context_values = batch.tokens[:, 1 : 2 * P : 2]  # (B, P)
        hit = (predicted == answers).double()
        result = {
            f"{prefix}/value_rate": (predicted > cfg.n_keys).double().mean().item(),
            f"{prefix}/in_context_rate": (predicted[:, :, None] == context_values[:, None, :]).any(-1)
            .double().mean().item(),
            f"{prefix}/acc_first_query": hit[:, 0].mean().item(),
            f"{prefix}/acc_last_query": hit[:, Q - 1].mean().item(),
        }
        layers = patterns(cache)
        if layers:  # a model without attention has none: the probe is left out
            pattern = layers[-1]  # (B, H, T, T)
            columns = 2 * pair_of_query(cfg, batch) + 1  # (B, Q) the matching value's position
            B = len(pattern)
            mass = pattern[torch.arange(B)[:, None], :, rows[None, :], columns]  # (B, Q, H)
            result[f"{prefix}/attn_value_share"] = mass.amax(-1).double().mean().item()
        return result

    def run_name(self, cfg: MqarConfig) -> str:
        """e.g. K32_train16_P4Q4."""
        return f"K{cfg.n_keys}_train{cfg.n_train_keys}_P{cfg.n_pairs}Q{cfg.n_queries}"

    def tags(self, cfg: MqarConfig) -> list[str]:
        first, held = key_range(cfg, "heldout")
        return [f"heldout_keys:{first}-{first + held - 1}"]


TASK = MqarTask()
