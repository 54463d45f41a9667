"""The mixed n-gram task (SPEC §6) behind the Task protocol: its generator (data.py), metrics (metrics.py) and
figures (figures.py), and what the sweeps, W&B and the reports need to know about it.

The question (seed 002, "How Transformers Get Rich"): a target mixes a lazy component the weights can hold (a global
4-gram rule) and a rich in-context one (an induction head), the latter in a share alpha of the sequences. SPEC §6
claims the lazy loss falls first, the in-context loss then sits on a plateau and drops abruptly, later the smaller
alpha is. The knob is alpha; the reports plot the transition step and the plateau's length against it. Success:
the in-context accuracy on OOD sequences, whose periods were never seen in training (ood/icl_acc >= eval.threshold).
"""
from __future__ import annotations

from trainables.cache import patterns
from trainables.errors import require
from trainables.tasks import Task
from trainables.tasks.mixed_ngram import metrics
from trainables.tasks.mixed_ngram.data import CONTEXT, NGRAM, MixedNgramConfig, rule_table, sampler
from trainables.tasks.mixed_ngram.view import MixedNgramView


class MixedNgram(Task):
    """A fixed rule mixed with in-context periodic sequences: the lazy fit, then the in-context transition."""

    name = "mixed_ngram"
    config = MixedNgramConfig
    view = MixedNgramView
    success_metric = "ood/icl_acc"
    knobs = ("task.alpha",)  # diversity: data/alpha, the knob's own value (the default)
    small_is_diverse = True
    # All but the shapes (n_lazy_tokens, n_icl_tokens, seq_len): a pack may mix alphas, noise levels, rule tables and
    # periods (the sampler holds them per member); ood_period_high is the evaluation's alone.
    member_fields = ("alpha", "lazy_noise", "rule_seed", "period_low", "period_high", "ood_period_high")

    batch_sampler = staticmethod(sampler)  # data.py's: every split, and a pack's training batches at once

    def validate(self, cfg: MixedNgramConfig) -> None:
        require(
            ("task.n_lazy_tokens", cfg.n_lazy_tokens >= 2, "must be >= 2 (a rule over one token is constant)"),
            ("task.n_icl_tokens", cfg.n_icl_tokens >= 2, "must be >= 2"),
            ("task.alpha", 0 <= cfg.alpha <= 1, f"must be in [0, 1], got {cfg.alpha}"),
            ("task.lazy_noise", 0 <= cfg.lazy_noise < 1,
             f"must be in [0, 1) (1 leaves no rule token), got {cfg.lazy_noise}"),
            ("task.seq_len", cfg.seq_len >= NGRAM, f"must be >= {NGRAM} (a lazy sequence holds one rule token)"),
            ("task.period_low", cfg.period_low >= 2, "must be >= 2 (a period of 1 repeats the current token)"),
            ("task.period_high", cfg.period_high >= cfg.period_low, "must be >= task.period_low"),
            ("task.ood_period_high", cfg.ood_period_high > cfg.period_high,
             "must exceed task.period_high (OOD periods are the ones never seen in training)"),
            ("task.ood_period_high", cfg.ood_period_high <= cfg.n_icl_tokens,
             f"must be <= task.n_icl_tokens = {cfg.n_icl_tokens} (a prefix holds distinct tokens)"),
            ("task.ood_period_high", 2 * cfg.ood_period_high <= cfg.seq_len,
             f"must be <= task.seq_len / 2 = {cfg.seq_len // 2} (every prefix is repeated at least once)"),
        )

    def dims(self, cfg: MixedNgramConfig) -> tuple[int, int]:
        return cfg.vocab_size, cfg.seq_len

    def eval_splits(self, cfg: MixedNgramConfig) -> dict[str, str]:
        return {"id": "train", "ood": "ood"}

    def metrics(self, cfg, prefix, batch, logits, cache) -> dict[str, float]:
        """On the training mixture: each component's loss and accuracy (`lazy/*`, `icl/*`). On the OOD sequences: the
        in-context loss and accuracy and the attention probes of the two mechanisms."""
        components = metrics.component_metrics(logits, batch)
        if prefix == "id":
            return {f"{name}/{kind}": value for name, pair in components.items()
                    for kind, value in zip(("loss", "acc"), pair)}
        loss, acc = components["icl"]
        probes = {"mech/induction_score": metrics.induction_score(cache, batch),
                  "mech/prev_token": metrics.previous_token_score(cache, batch)} if patterns(cache) else {}
        return {f"{prefix}/icl_loss": loss, f"{prefix}/icl_acc": acc} | probes

    def diversity(self, cfg: MixedNgramConfig) -> dict[str, float]:
        """alpha, and the expected share of the scored training targets that are in-context (alpha weighs sequences;
        an in-context sequence has T - k scored targets, a lazy one a share 1 - lazy_noise of its T - 2 rule tokens)."""
        lazy_targets = (cfg.seq_len - CONTEXT + 1) * (1 - cfg.lazy_noise)
        icl_targets = cfg.seq_len - (cfg.period_low + cfg.period_high) / 2
        icl, lazy = cfg.alpha * icl_targets, (1 - cfg.alpha) * lazy_targets
        return {"data/alpha": cfg.alpha, "data/icl_target_share": icl / (icl + lazy)}

    def summary(self, cfg, history) -> dict[str, float]:
        """The lazy-to-rich transition: lazy/fit_step, icl/transition_step, icl/plateau_steps (metrics.transition)."""
        return metrics.transition(history)

    def readouts(self, cfg, model, ood, generator, n_examples):
        """The lazy rule's table, so a trial's arrays say which 4-gram it learned."""
        return {"rule_table": rule_table(cfg).numpy()}, {}

    def run_name(self, cfg: MixedNgramConfig) -> str:
        """The in-context share and the training periods, e.g. a0.25_k2-6."""
        return f"a{cfg.alpha:g}_k{cfg.period_low}-{cfg.period_high}"

    def tags(self, cfg: MixedNgramConfig) -> list[str]:
        return [f"alpha:{cfg.alpha:g}", f"rule_seed:{cfg.rule_seed}"]


TASK = MixedNgram()
