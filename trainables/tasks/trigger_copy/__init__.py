"""The trigger-copy task (SPEC §1) behind the Task protocol: its generator (data.py), metrics (metrics.py) and
figures (figures.py), and what the sweeps, W&B and the reports need to know about it."""
from __future__ import annotations

import numpy as np
import torch

from trainables.errors import ConfigError, require
from trainables.cache import pattern_at, patterns
from trainables.tasks import Task
from trainables.tasks.lengths import distribution, diversity_metrics
from trainables.tasks.trigger_copy import metrics
from trainables.tasks.trigger_copy.data import OOD_SPLITS, TriggerCopyConfig, sampler, valid_pairs
from trainables.tasks.trigger_copy.view import TriggerCopyView


class TriggerCopy(Task):
    """Copy the token after a trigger's first occurrence; the length distribution decides head vs shortcut."""

    name = "trigger_copy"
    config = TriggerCopyConfig
    view = TriggerCopyView
    knobs = ("task.lengths.width", "task.lengths.low", "task.lengths.high")  # and the family's own parameters
    small_is_diverse = True
    member_fields = ("n_triggers", "lengths", "ood_split", "n_pairs_per_cell")  # all but the model's dims
    diversity_axis = "data/max_sum_ratio"

    batch_sampler = staticmethod(sampler)  # data.py's: every split, and a pack's training batches at once

    def resolve(self, cfg: TriggerCopyConfig) -> None:
        lengths = cfg.lengths
        if lengths.width:  # resolved here so config.yaml shows the high actually used
            if lengths.width < 0:
                raise ConfigError("task.lengths.width",
                                  f"must be >= 0 (0 keeps task.lengths.high), got {lengths.width}")
            lengths.high = lengths.low + lengths.width - 1

    def validate(self, cfg: TriggerCopyConfig) -> None:
        require(
            ("task.n_triggers", cfg.n_triggers >= 1, "must be >= 1"),
            ("task.vocab_size", cfg.vocab_size > cfg.n_triggers,
             "must exceed task.n_triggers (outputs and fillers need tokens)"),
            ("task.max_len", cfg.max_len >= 6, "must be >= 6 (the shortest sequence has T = 5 <= L - 1)"),
            ("task.ood_split", cfg.ood_split in OOD_SPLITS, f"must be one of {', '.join(OOD_SPLITS)}"),
            ("task.n_pairs_per_cell", cfg.n_pairs_per_cell >= 1, "must be >= 1"),
        )
        try:
            q = distribution(cfg.lengths, cfg.n_triggers)
        except ConfigError as e:
            raise ConfigError(f"task.lengths.{e.key}", e.reason) from None
        length_key = {"weights": "weights", "optimal": "optimal_n"}.get(cfg.lengths.family, "high")
        longest = max(q)
        require(
            (f"task.lengths.{length_key}", 2 * longest + 3 <= cfg.max_len - 1,
             f"l = {longest} gives T = 2l + 3 = {2 * longest + 3}, which exceeds task.max_len - 1 = {cfg.max_len - 1}"),
            ("task.lengths", cfg.ood_split != "displaced" or len(q) > 1 or longest >= 2,
             "the displaced OOD split needs a length >= 2 (with l = 1 the trigger cannot move)"),
        )

    def dims(self, cfg: TriggerCopyConfig) -> tuple[int, int]:
        return cfg.vocab_size, cfg.max_len

    def query_only(self, cfg: TriggerCopyConfig) -> bool:
        return True

    def batch_width(self, cfg: TriggerCopyConfig) -> int:
        # the train sampler's: T = 2l + 3 at the longest l
        return 2 * max(distribution(cfg.lengths, cfg.n_triggers)) + 3

    def eval_splits(self, cfg: TriggerCopyConfig) -> dict[str, str]:
        return {"id": "train", "ood": cfg.ood_split}

    def metrics(self, cfg, prefix, batch, logits, cache) -> dict[str, float]:
        """On the OOD split: how often the shortcut's answer is given, the accuracy where the first trigger sits at a
        position training put one and where it does not, and the last layer's attention at the query on the output
        token and on the shortcut position."""
        if prefix != "ood":
            return {}
        support = sorted(distribution(cfg.lengths, cfg.n_triggers))
        predictions = logits.argmax(-1)
        result = (metrics.shortcut_rates(predictions, batch, support[0])
                  | metrics.accuracy_by_trigger_position(predictions == batch.scored_targets(), batch, support))
        if patterns(cache):  # a model without attention has no mechanism to score
            result |= metrics.mechanism_scores(pattern_at(cache, -1, batch.query), batch)  # (B, H, T) at the query
        return result

    def weight_metrics(self, cfg, matrices) -> dict[str, float]:
        """The one-step W_KQ's positional and induction peaks, when the model has W_KQ on [p_t ; e_t ; e_{t-1}]."""
        W_KQ = matrices.get("W_KQ")
        if W_KQ is None or W_KQ.shape[0] != cfg.max_len + 2 * cfg.vocab_size:
            return {}
        return metrics.kq_peaks(W_KQ, cfg.vocab_size, cfg.max_len, cfg.n_triggers)

    def diversity(self, cfg: TriggerCopyConfig) -> dict[str, float]:
        return diversity_metrics(distribution(cfg.lengths, cfg.n_triggers))

    def theory(self, cfg: TriggerCopyConfig) -> dict[str, float]:
        """Theorem 5: the one-step model's threshold on the max-sum ratio is of order 1/N_trg."""
        return {"data/max_sum_ratio": 1.0 / cfg.n_triggers}

    def shape(self, cfg: TriggerCopyConfig) -> dict[int, float]:
        return distribution(cfg.lengths, cfg.n_triggers)

    @torch.no_grad()
    def readouts(self, cfg, model, ood, generator, n_examples):
        """OOD accuracy per (l1, l2) over every valid pair (`acc_by_pair`, and its mean as `all_pairs/acc`)."""
        pairs = self.sample(cfg, len(valid_pairs(cfg.max_len)) * cfg.n_pairs_per_cell, generator, "all_pairs")
        pairs = pairs.to(ood.tokens.device)
        logits, _ = model.run_with_cache(pairs.tokens, pairs.query)  # (B, N) at the query
        acc = metrics.accuracy_by_pair(logits.argmax(-1) == pairs.scored_targets(), pairs, cfg.max_len).numpy()
        return {"acc_by_pair": acc}, {"all_pairs/acc": float(np.nanmean(acc))}

    def run_name(self, cfg: TriggerCopyConfig) -> str:
        """Training lengths and trigger count, e.g. l3-15_t4."""
        lengths = cfg.lengths
        shape = {"uniform": f"l{lengths.low}-{lengths.high}",
                 "power": f"p{lengths.low}-{lengths.high}^{lengths.exponent:g}",
                 "optimal": f"opt{lengths.optimal_n or cfg.n_triggers}",
                 "weights": f"w{len(lengths.weights)}"}.get(lengths.family, lengths.family)
        return f"{shape}_t{cfg.n_triggers}"

    def tags(self, cfg: TriggerCopyConfig) -> list[str]:
        return [f"lengths:{cfg.lengths.family}", f"ood:{cfg.ood_split}"]


TASK = TriggerCopy()
