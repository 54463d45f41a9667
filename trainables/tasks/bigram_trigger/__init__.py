"""The bigram task with triggers (SPEC §4) behind the Task protocol: its bigram (bigram.py, from the corpus of
corpus.py), generator (data.py), metrics (metrics.py) and figures (figures.py).

Evaluation splits and what is measured on each (metric names are `group/name`, DESIGN's contract):
- `id` (train split): `id/loss`, `id/acc` over the positions the loss reads (task.loss_on); `head/*` (label >= 2),
  `bigram/loss` (and `_early`, `_late`: first and second half of the positions), `bigram/excess`, `bigram/floor`
  (label 0), and the attention probes `attn/*`.
- `ood` (heldout split: outputs only from tokens never used as outputs in training): `ood/loss`, `ood/acc` over the
  positions the loss reads, and the success metric `ood/head_acc` (with `ood/head_loss`) where label >= 2.
- `late` (late_pairs split: Wang & Sato's probe, no trigger in the first quarter): `late/loss`, `late/acc` where
  label >= 2.
- `lengthgen` (long split, task.test_len positions): `lengthgen/loss`, `lengthgen/acc` where label >= 2, and
  `lengthgen/acc_beyond` at the positions past the training length only.
"""
from __future__ import annotations

import numpy as np
import torch

from trainables.errors import require
from trainables.cache import patterns
from trainables.tasks import Task
from trainables.tasks.bigram_trigger import metrics
from trainables.tasks.bigram_trigger.bigram import entropy_floor, of
from trainables.tasks.bigram_trigger.data import (BIGRAMS, LOSS_ON, OUTPUTS, RECALL, TRIGGERS, BigramTriggerConfig,
                                                  sampler)
from trainables.tasks.bigram_trigger.view import BigramTriggerView

BIGRAM_LEARNED = 0.25  # nats of bigram/excess (2.4 at initialisation) at or under which the bigram counts as learned
HEAD_LEARNED = 0.5  # head/acc at or over which the induction head counts as formed (it rises abruptly)
READOUT_CHUNK = 32  # sequences per forward pass of the readout: full patterns of long sequences are large


class BigramTrigger(Task):
    """Induction heads on a character bigram with triggers (Bietti et al. 2023): copy the token that followed a trigger."""

    name = "bigram_trigger"
    config = BigramTriggerConfig
    view = BigramTriggerView
    success_metric = "ood/head_acc"
    knobs = ("task.n_train_outputs",)  # diversity: data/n_train_outputs, the knob's own value (the default)
    # The knob's output pool is a per-member (P, V) mask, n_readout is readout-only; every other field sets the bigram,
    # the shapes or which code a draw runs, so a pack shares it.
    member_fields = ("n_train_outputs", "n_readout")

    batch_sampler = staticmethod(sampler)  # data.py's: every split, and a pack's training batches at once

    def validate(self, cfg: BigramTriggerConfig) -> None:
        require(
            ("task.bigram", cfg.bigram in BIGRAMS, f"must be one of {', '.join(BIGRAMS)}"),
            ("task.triggers", cfg.triggers in TRIGGERS, f"must be one of {', '.join(TRIGGERS)}"),
            ("task.outputs", cfg.outputs in OUTPUTS, f"must be one of {', '.join(OUTPUTS)}"),
            ("task.loss_on", cfg.loss_on in LOSS_ON, f"must be one of {', '.join(LOSS_ON)}"),
            ("task.synthetic_vocab", cfg.synthetic_vocab >= 6, "must be >= 6"),
            ("task.synthetic_concentration", cfg.synthetic_concentration > 0, "must be > 0"),
            ("task.seq_len", cfg.seq_len >= 8, "must be >= 8 (its first quarter and halves must hold positions)"),
            ("task.test_len", cfg.test_len > cfg.seq_len, "must exceed task.seq_len (it tests longer sequences)"),
            ("task.n_readout", cfg.n_readout >= 1, "must be >= 1"),
        )
        V = of(cfg).vocab_size
        require(
            ("task.n_triggers", 1 <= cfg.n_triggers <= V - 2,
             f"must be in 1..{V - 2} (V = {V}; the late_pairs prefix needs tokens that are no trigger)"),
            ("task.n_train_outputs", 2 <= cfg.n_train_outputs <= V - 2,
             f"must be in 2..{V - 2} (V = {V}): the training and the held-out pools each need two tokens, since an "
             "output is never its own trigger"),
        )

    def dims(self, cfg: BigramTriggerConfig) -> tuple[int, int]:
        return of(cfg).vocab_size, max(cfg.seq_len, cfg.test_len)

    def batch_width(self, cfg: BigramTriggerConfig) -> int:
        return cfg.seq_len  # the long split's test_len is for evaluation only

    def eval_splits(self, cfg: BigramTriggerConfig) -> dict[str, str]:
        return {"id": "train", "ood": "heldout", "late": "late_pairs", "lengthgen": "long"}

    def metrics(self, cfg, prefix, batch, logits, cache) -> dict[str, float]:
        """id: head/*, bigram/*, attn/*; ood: ood/head_acc, ood/head_loss; lengthgen: lengthgen/acc_beyond (see the
        module docstring). logits (B, T, N) at every position."""
        if prefix == "id":
            layers = patterns(cache)  # [(B, H, T, T)]; none for a model without attention
            probes = (metrics.previous_token_scores(metrics.previous_token_hits(layers))
                      | metrics.induction_mass(layers, batch)) if layers else {}
            return (metrics.recall_metrics(logits, batch) | metrics.bigram_metrics(logits, batch, of(cfg))
                    | {"bigram/floor": entropy_floor(of(cfg))} | probes)
        if prefix == "ood":
            head = metrics.recall_metrics(logits, batch)
            return {"ood/head_acc": head["head/acc"], "ood/head_loss": head["head/loss"]}
        if prefix == "lengthgen":
            beyond = torch.arange(batch.labels.shape[1], device=logits.device) >= cfg.seq_len  # (T,)
            correct = (logits.argmax(-1) == batch.targets)[(batch.labels >= RECALL) & beyond]
            return {"lengthgen/acc_beyond": correct.double().mean().item() if correct.numel() else float("nan")}
        return {}

    def diversity(self, cfg: BigramTriggerConfig) -> dict[str, float]:
        """The number of training outputs, and their share of the vocabulary."""
        return {"data/n_train_outputs": float(cfg.n_train_outputs),
                "data/train_output_share": cfg.n_train_outputs / of(cfg).vocab_size}

    def summary(self, cfg, history) -> dict[str, float]:
        """The first evaluation steps at which the bigram was learned and the induction head formed."""
        return {"bigram/step_learned": metrics.first_step(history, "bigram/excess", lambda v: v <= BIGRAM_LEARNED),
                "head/step_learned": metrics.first_step(history, "head/acc", lambda v: v >= HEAD_LEARNED)}

    @torch.no_grad()
    def readouts(self, cfg, model, ood, generator, n_examples):
        """Accuracy (label >= 2) and previous-token attention by position on `task.n_readout` fresh sequences of the
        long split (`acc_by_position`, `prev_token_by_position` (test_len,)), and the training length."""
        long = self.sample(cfg, cfg.n_readout, generator, "long").to(ood.tokens.device)
        logits, hits = [], []
        for start in range(0, cfg.n_readout, READOUT_CHUNK):
            chunk_logits, cache = model.run_with_cache(long.tokens[start:start + READOUT_CHUNK])  # (b, T, N)
            logits.append(chunk_logits)
            if patterns(cache):  # none for a model without attention
                hits.append(metrics.previous_token_hits(patterns(cache)))  # (b, heads, T - 1)
        arrays = {"acc_by_position": metrics.accuracy_by_position(torch.cat(logits), long).cpu().numpy(),
                  "train_len": np.array(cfg.seq_len)}
        if hits:
            arrays["prev_token_by_position"] = metrics.previous_token_by_position(torch.cat(hits)).cpu().numpy()
        return arrays, {}

    def run_name(self, cfg: BigramTriggerConfig) -> str:
        """Bigram, triggers and training outputs, e.g. text_K5sampled_out46_T256."""
        return f"{cfg.bigram}_K{cfg.n_triggers}{cfg.triggers}_out{cfg.n_train_outputs}_T{cfg.seq_len}"

    def tags(self, cfg: BigramTriggerConfig) -> list[str]:
        return [f"bigram:{cfg.bigram}", f"triggers:{cfg.triggers}", f"outputs:{cfg.outputs}",
                f"loss_on:{cfg.loss_on}"]


TASK = BigramTrigger()
