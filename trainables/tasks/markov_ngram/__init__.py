"""The Markov n-gram in-context learning task (SPEC §5) behind the Task protocol: its generator (data.py), the
in-context strategies and attention probes (metrics.py), Chen et al.'s chi-square mutual information
(mutual_info.py), figures (figures.py), and what the sweeps, W&B and the reports need to know about it. Success:
`ood/gap` = the model's loss minus the Bayes-optimal in-context predictor's on fresh tables, at most eval.threshold.

SPEC §5's names and the metrics that carry them (split-prefixed, as every task's evaluation metrics are: `id` = tables
from the pool, `ood` = fresh tables):
- `icl/loss`, `icl/bayes_loss`, `icl/gap`, `icl/unigram_loss` -> `<split>/loss`, `<split>/bayes_loss`, `<split>/gap`,
  `<split>/unigram_loss` (and `<split>/bigram_loss`, the order-1 strategy, for Edelman's stages);
- `attn/parent_lags` (per first-layer head, the offset its attention peaks at) -> `attn/lag_L0H{h}` (one scalar per
  head; `attn/lag_mass_L0H{h}`: its mass there), summarised by `attn/parent_mass_{m}` and `attn/parent_coverage`;
  the theory's parent lags themselves are `parent_lags` in attention.npz;
- the modified chi-square mutual information -> `mi/*` in the summary and `mi_*` arrays (mutual_info.py).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from trainables.errors import require
from trainables.cache import patterns
from trainables.tasks import Task
from trainables.tasks.markov_ngram import metrics, mutual_info
from trainables.tasks.markov_ngram.data import (FIRST, LOSS_ON, MAX_TABLE_ENTRIES, MarkovNgramConfig, draw_tables,
                                                n_contexts, pool, sampler)
from trainables.tasks.markov_ngram.view import MarkovNgramView

MI_TABLES = 256  # tables the chi-square mutual information averages over (the pool's first ones, or prior draws)


class MarkovNgram(Task):
    """In-context n-gram learning on fresh Markov chains (Chen et al. 2024, Edelman et al. 2024): the gap to Bayes."""

    name = "markov_ngram"
    config = MarkovNgramConfig
    view = MarkovNgramView
    success_metric = "ood/gap"
    success_above = False  # a loss gap: success when it is at most eval.threshold
    knobs = ("task.pool_size",)
    # The data distribution: each member its own pool (or fresh tables) and Dirichlet alpha. vocab_size, order and
    # seq_len set shapes, first and loss_on the sampler's structure and the scored positions: equal in a pack.
    member_fields = ("pool_size", "pool_seed", "alpha")
    small_is_diverse = True
    diversity_axis = "data/inv_pool"

    batch_sampler = staticmethod(sampler)  # data.py's: every split, and a pack's training batches at once

    def validate(self, cfg: MarkovNgramConfig) -> None:
        require(
            ("task.vocab_size", cfg.vocab_size >= 2, "must be >= 2"),
            ("task.order", cfg.order >= 2, "must be >= 2 (order n: every token has n - 1 >= 1 parents)"),
            ("task.order", cfg.vocab_size ** cfg.order <= MAX_TABLE_ENTRIES,
             f"S^n = {cfg.vocab_size}^{cfg.order} table entries exceed {MAX_TABLE_ENTRIES} (every sequence carries "
             "its own table); lower task.order or task.vocab_size"),
            ("task.alpha", cfg.alpha > 0, "must be > 0 (the Dirichlet concentration of each row)"),
            ("task.seq_len", cfg.seq_len >= cfg.order,
             f"must be >= task.order = {cfg.order} (the first n-1 tokens, then chain tokens to predict)"),
            ("task.pool_size", cfg.pool_size >= 0, "must be >= 0 (0 = a fresh table per sequence)"),
            ("task.pool_seed", cfg.pool_seed >= 0, "must be >= 0"),
            ("task.first", cfg.first in FIRST, f"must be one of {', '.join(FIRST)}"),
            ("task.first", cfg.first != "stationary" or cfg.order == 2,
             "stationary needs task.order=2 (the stationary law of a higher-order chain is over contexts)"),
            ("task.loss_on", cfg.loss_on in LOSS_ON, f"must be one of {', '.join(LOSS_ON)}"),
        )

    def dims(self, cfg: MarkovNgramConfig) -> tuple[int, int]:
        return cfg.vocab_size, cfg.seq_len

    def query_only(self, cfg: MarkovNgramConfig) -> bool:
        return cfg.loss_on == "last"

    def eval_splits(self, cfg: MarkovNgramConfig) -> dict[str, str]:
        """OOD first: the evaluation sets are drawn in this order from one generator, so the OOD set (fresh tables)
        is then the same whatever the pool size, and runs of a pool-size sweep are compared on the same sequences."""
        return {"ood": "ood", "id": "train"}

    def metrics(self, cfg, prefix, batch, logits, cache) -> dict[str, float]:
        """The in-context strategies' losses where the model is scored, the gap to the Bayes predictor and the
        nearest strategy; on the OOD split also the first layer's per-head lags."""
        losses = metrics.strategy_losses(batch, cfg.seq_len, cfg.order, cfg.vocab_size, cfg.alpha)
        loss = metrics.model_loss(logits, batch)
        result = {f"{prefix}/{name}_loss": value for name, value in losses.items()}
        result[f"{prefix}/gap"] = loss - losses["bayes"]
        references = [math.log(cfg.vocab_size)] + list(losses.values())  # uniform (Edelman's start), k = 1 .. n
        result[f"{prefix}/stage"] = float(metrics.stage(loss, references))
        if prefix == "ood" and patterns(cache):  # a model without attention has no lags to read
            pattern = patterns(cache)[0]  # (B, H, T_q, T) of the first layer
            result |= metrics.lag_metrics(metrics.lag_profile(pattern, self._rows(cfg, pattern, batch)), cfg.order)
        return result

    @staticmethod
    def _rows(cfg: MarkovNgramConfig, pattern: torch.Tensor, batch) -> torch.Tensor:
        """(B, T_q) positions of the pattern's query rows that the lag probe reads (-1: left out): every position
        whose parents all exist (t >= n-1) on a full pattern, or the query of a layer that ran there only."""
        B, _, T_q, _ = pattern.shape
        if T_q == 1:
            return batch.query[:, None]
        position = torch.arange(T_q, device=pattern.device)
        keep = (position >= cfg.order - 1) & (position < cfg.seq_len)
        return torch.where(keep, position, -1).expand(B, T_q)

    def diversity(self, cfg: MarkovNgramConfig) -> dict[str, float]:
        """The pool size (0 = fresh) and its inverse, finite and growing as diversity falls (0 for fresh tables)."""
        return {"data/pool_size": float(cfg.pool_size),
                "data/inv_pool": 1.0 / cfg.pool_size if cfg.pool_size else 0.0}

    def summary(self, cfg: MarkovNgramConfig, history: list[dict[str, float]]) -> dict[str, float]:
        """The first evaluation step at which the OOD loss sat nearest each strategy (NaN: never): Edelman's stages
        show as uniform < unigram < .. < Bayes."""
        names = ["uniform"] + [metrics.strategy_name(k, cfg.order) for k in range(1, cfg.order + 1)]
        first = {}
        for record in history:
            stage = record.get("ood/stage")
            if stage is not None and stage == stage:  # NaN-safe
                first.setdefault(names[int(stage)], record["step"])
        return {f"ood/first_step_at_{name}": float(first.get(name, float("nan"))) for name in names}

    @torch.no_grad()
    def readouts(self, cfg, model, ood, generator, n_examples):
        """Every layer's lag profile on the OOD set (`lag_profile` (n_layers, H, T)) and the chi-square mutual
        information of the training distribution over lag sets (`mi_*`, and `mi/*` final metrics)."""
        # Read as evaluation reads it: with loss_on=last at the query (a model that reads only the query, such as
        # one_step, has no other rows; a transformer's last layer is trained there only), else every row of every layer.
        _, cache = model.run_with_cache(ood.tokens, ood.query)
        layers = patterns(cache)  # none for a model without attention
        arrays = {"parent_lags": np.arange(1, cfg.order)}
        if layers:
            arrays["lag_profile"] = torch.stack([metrics.lag_profile(p, self._rows(cfg, p, ood)) for p in layers]
                                                ).cpu().numpy()
        final = {}
        if n_contexts(cfg) <= mutual_info.MAX_STATES:
            tables = (pool(cfg)[:MI_TABLES] if cfg.pool_size  # the training pool's first, or as many prior draws
                      else draw_tables(cfg, MI_TABLES, torch.Generator().manual_seed(cfg.pool_seed)))
            values = mutual_info.chi2_mutual_information(tables, cfg.order)
            arrays |= {"mi_lags": np.array([[m in lags for m in range(1, cfg.order + 1)] for lags in values]),
                       "mi_standard": np.array([v[0] for v in values.values()]),
                       "mi_modified": np.array([v[1] for v in values.values()])}
            for lags, (standard, modified) in values.items():
                final[f"mi/standard_{mutual_info.metric_name(lags)}"] = standard
                final[f"mi/modified_{mutual_info.metric_name(lags)}"] = modified
            final["mi/argmax_is_parents"] = float(mutual_info.argmax(values) == tuple(range(1, cfg.order)))
        return arrays, final

    def run_name(self, cfg: MarkovNgramConfig) -> str:
        """Vocabulary, order, alpha and pool, e.g. S3_n3_a0.3_pool64."""
        return f"S{cfg.vocab_size}_n{cfg.order}_a{cfg.alpha:g}_pool{cfg.pool_size or 'fresh'}"

    def tags(self, cfg: MarkovNgramConfig) -> list[str]:
        return [f"loss_on:{cfg.loss_on}", f"first:{cfg.first}", "pool:fresh" if not cfg.pool_size else "pool:fixed"]


TASK = MarkovNgram()
