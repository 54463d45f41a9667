"""How the Markov n-gram task is shown: its TaskView (trainables/tasks/view.py), drawing with figures.py."""
from __future__ import annotations

from trainables.tasks.view import Panel, PanelSection, TaskView

_BY_POOL = "data/pool_size"  # W&B runs are grouped by pool size: few distinct values, ordered by diversity


class MarkovNgramView(TaskView):
    figures_module = "trainables.tasks.markov_ngram.figures"
    diversity_label = "1 / pool size (0 = a fresh table per sequence; small = diverse)"
    headline = ("ood/gap", "id/gap", "ood/loss", "ood/bayes_loss", "attn/parent_coverage", "data/pool_size")
    table_columns = headline + ("attn/parent_mass_1", "attn/parent_mass_2", "ood/unigram_loss", "id/loss",
                                "mi/argmax_is_parents")
    curve_metrics = ("train/loss", "ood/loss", "ood/unigram_loss", "ood/bayes_loss", "ood/gap")
    short_names = {"ood/gap": "gap", "id/gap": "id_gap", "attn/parent_coverage": "parents", "data/pool_size": "pool"}
    dashboard = (
        PanelSection("In-context learning on unseen tables",
                     "A model that learned the in-context algorithm predicts fresh tables as well as the Bayes-optimal "
                     "in-context predictor (ood/gap near 0); one that memorised a small pool does well on its tables "
                     "(id/gap) and not on fresh ones.",
                     (Panel("line", ("ood/gap",), "ood/gap, grouped by pool size", _BY_POOL),
                      Panel("line", ("id/gap",), "id/gap (pool tables), grouped by pool size", _BY_POOL),
                      Panel("scatter", ("data/inv_pool", "ood/gap"), "1 / pool size against final ood/gap"),
                      Panel("scatter", ("id/gap", "ood/gap"), "memorisation: id/gap against ood/gap"))),
        PanelSection("Edelman's stages",
                     "The model's OOD loss beside the in-context strategies' (uniform = log S, unigram, bigram, ..., "
                     "Bayes): a plateau near the unigram strategy's loss before the drop to the Bayes loss.",
                     (Panel("line", ("ood/loss", "ood/unigram_loss", "ood/bigram_loss", "ood/bayes_loss"),
                            "OOD loss and the in-context strategies"),
                      Panel("line", ("ood/stage",), "nearest strategy (0 uniform, k: k-gram, n: Bayes)", _BY_POOL))),
        PanelSection("Mechanism",
                     "Where each first-layer head attends (theory: the parents' lags 1 .. n-1) and Chen et al.'s "
                     "chi-square mutual information of the data model over lag sets.",
                     (Panel("line", ("attn/parent_coverage",), "share of parent lags that are a head's argmax",
                            _BY_POOL),
                      Panel("line", ("attn/parent_mass_1", "attn/parent_mass_2"),
                            "largest head mass on each parent lag"),
                      Panel("line", ("attn/lag_L0H0", "attn/lag_L0H1", "attn/lag_L0H2"), "first-layer head lags"),
                      Panel("media", ("attention/lag_profile",), "attention/lag_profile"),
                      Panel("media", ("mi/chi2",), "mi/chi2"),
                      Panel("media", ("attention/pattern_L0H0", "attention/pattern_L1H0"), "attention patterns"))),
        PanelSection("Training", "The fit on the training pool's tables.",
                     tuple(Panel("line", (m,), m) for m in ("train/loss", "id/loss", "id/bayes_loss"))),
    )
