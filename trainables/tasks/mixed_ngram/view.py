"""How the mixed n-gram task is shown: its TaskView (trainables/tasks/view.py), drawing with figures.py."""
from __future__ import annotations

from trainables.tasks.view import Panel, PanelSection, TaskView

_BY_ALPHA = "data/alpha"  # W&B runs are grouped by the in-context share: few distinct values, the knob itself


class MixedNgramView(TaskView):
    figures_module = "trainables.tasks.mixed_ngram.figures"
    diversity_label = "alpha (in-context share)"
    headline = ("icl/transition_step", "icl/plateau_steps", "ood/icl_acc", "icl/acc", "lazy/acc", "data/alpha")
    table_columns = headline + ("lazy/fit_step", "icl/loss", "lazy/loss", "mech/induction_score", "mech/prev_token")
    curve_metrics = ("lazy/loss", "icl/loss", "ood/icl_loss", "mech/induction_score")
    short_names = {"icl/transition_step": "transition", "ood/icl_acc": "ood/icl_acc", "lazy/acc": "lazy/acc",
                   "data/alpha": "alpha"}
    dashboard = (
        PanelSection("Lazy, then rich",
                     "The 4-gram (lazy) loss falls first; the in-context loss sits on a plateau, then drops abruptly "
                     "when the induction head forms. The smaller the in-context share alpha, the longer the plateau.",
                     (Panel("line", ("lazy/loss",), "lazy (4-gram) loss, grouped by alpha", _BY_ALPHA),
                      Panel("line", ("icl/loss",), "in-context loss, grouped by alpha", _BY_ALPHA),
                      Panel("scatter", ("data/alpha", "icl/transition_step"), "alpha against the transition step"),
                      Panel("scatter", ("data/alpha", "icl/plateau_steps"), "alpha against the plateau's length"))),
        PanelSection("OOD: periods never seen in training",
                     "An induction head copies in sequences of any period; memorised periods do not.",
                     (Panel("line", ("ood/icl_acc",), "ood/icl_acc, grouped by alpha", _BY_ALPHA),
                      Panel("scatter", ("data/alpha", "ood/icl_acc"), "alpha against final ood/icl_acc"))),
        PanelSection("Mechanism",
                     "Last-layer attention on the token after the current token's previous occurrence (induction) "
                     "and first-layer attention on the previous token.",
                     (Panel("line", ("mech/induction_score",), "induction score", _BY_ALPHA),
                      Panel("line", ("mech/prev_token",), "previous-token score", _BY_ALPHA),
                      *(Panel("media", (key,), key) for key in (
                          "attention/pattern_L0H0", "attention/pattern_L0H1", "attention/pattern_L1H0",
                          "attention/pattern_L1H1")))),
        PanelSection("Training", "The training mixture's loss and accuracy.",
                     tuple(Panel("line", (m,), m) for m in ("train/loss", "id/loss", "id/acc", "lazy/acc", "icl/acc"))),
    )
