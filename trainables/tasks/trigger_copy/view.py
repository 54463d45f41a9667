"""How the trigger-copy task is shown: its TaskView (trainables/tasks/view.py), drawing with figures.py."""
from __future__ import annotations

from trainables.tasks.view import Panel, PanelSection, TaskView

_BY_WIDTH = "data/width"  # W&B runs are grouped by the support width K: few distinct values, ordered by diversity


class TriggerCopyView(TaskView):
    figures_module = "trainables.tasks.trigger_copy.figures"
    diversity_label = "R (small = diverse)"
    headline = ("ood/acc", "id/acc", "ood/pseudo_rate", "mech/induction_score", "data/max_sum_ratio")
    table_columns = headline + ("ood/acc_seen_pos", "ood/acc_new_pos", "mech/positional_score", "data/width")
    short_names = {"ood/acc": "ood/acc", "id/acc": "id/acc", "mech/induction_score": "induction",
                   "data/max_sum_ratio": "R"}
    dashboard = (
        PanelSection("OOD generalization by diversity",
                     "A model that learned the induction head copies the right token when the trigger moves (ood/acc "
                     "near 1); one that learned the positional shortcut does not. Theorem 5 predicts the switch at a "
                     "max-sum ratio R of order 1/N_trg.",
                     (Panel("line", ("ood/acc",), "ood/acc, grouped by support width K", _BY_WIDTH),
                      Panel("line", ("ood/loss",), "ood/loss, grouped by support width K", _BY_WIDTH),
                      Panel("scatter", ("data/max_sum_ratio", "ood/acc"), "max-sum ratio R against final ood/acc"),
                      Panel("line", ("ood/pseudo_rate", "ood/leftmost_rate"), "Shortcut answers on OOD sequences",
                            _BY_WIDTH))),
        PanelSection("Mechanism",
                     "Attention mass at the query on the output token (induction) and on the shortcut position; for "
                     "the one-step model, the two peaks of W_KQ (Lemma 7).",
                     tuple(Panel("line", (m,), m, _BY_WIDTH) for m in (
                         "mech/induction_score", "mech/positional_score", "mech/kq_induction_peak",
                         "mech/kq_positional_peak"))
                     + (Panel("scatter", ("data/max_sum_ratio", "mech/induction_score"),
                              "max-sum ratio R against the induction score"),)),
        PanelSection("Attention maps",
                     "Per member, at the end of training: attention at the query per layer and head with the first "
                     "trigger and the output token marked, the one-step W_KQ with its blocks, and OOD accuracy by "
                     "(l1, l2).",
                     tuple(Panel("media", (key,), key) for key in (
                         "attention/query_L0H0", "attention/query_L1H0", "mech/W_KQ", "ood/acc_by_pair",
                         "attention/pattern_L0H0", "attention/pattern_L1H0"))),
        PanelSection("Training", "In-distribution fit: every trial should solve its training distribution.",
                     tuple(Panel("line", (m,), m) for m in ("train/loss", "id/loss", "id/acc"))),
    )
