"""How the bigram task with triggers is shown: its TaskView (trainables/tasks/view.py), drawing with figures.py."""
from __future__ import annotations

from trainables.tasks.view import Panel, PanelSection, TaskView

_BY_OUTPUTS = "data/n_train_outputs"  # W&B runs grouped by the diversity knob


class BigramTriggerView(TaskView):
    figures_module = "trainables.tasks.bigram_trigger.figures"
    diversity_label = "training outputs (large = diverse)"
    headline = ("ood/head_acc", "head/acc", "late/acc", "attn/prev_token_early", "attn/prev_token_late",
                "data/n_train_outputs")
    table_columns = headline + ("lengthgen/acc", "lengthgen/acc_beyond", "attn/induction", "bigram/loss",
                                "bigram/excess", "bigram/floor", "bigram/step_learned", "head/step_learned")
    curve_metrics = ("train/loss", "bigram/excess", "head/acc", "ood/head_acc", "attn/prev_token")
    short_names = {"ood/head_acc": "ood/head", "head/acc": "head", "attn/prev_token_late": "prev_late",
                   "data/n_train_outputs": "outputs"}
    dashboard = (
        PanelSection("Copying unseen outputs",
                     "A model that learned an induction head copies outputs it never saw in training (ood/head_acc "
                     "near head/acc); one that memorised trigger -> output pairs in its weights does not.",
                     (Panel("line", ("ood/head_acc",), "ood/head_acc, grouped by training outputs", _BY_OUTPUTS),
                      Panel("line", ("head/acc",), "head/acc (label >= 2), grouped by training outputs", _BY_OUTPUTS),
                      Panel("scatter", ("data/n_train_outputs", "ood/head_acc"),
                            "training outputs against final ood/head_acc"))),
        PanelSection("What is learned first",
                     "The global bigram (bigram/excess: loss over its exact floor) is learned before the induction "
                     "head (head/acc, attention on the earlier outputs).",
                     tuple(Panel("line", (m,), m, _BY_OUTPUTS) for m in (
                         "bigram/excess", "head/acc", "attn/induction", "attn/prev_token"))),
        PanelSection("Positions",
                     "Previous-token attention early and late in the sequence, accuracy on sequences with no pair in "
                     "the first quarter (late/acc) and at a longer test length (Wang & Sato: RPE keeps the "
                     "previous-token head late, APE loses it).",
                     (Panel("line", ("attn/prev_token_early", "attn/prev_token_late"), "previous-token head by half"),
                      Panel("line", ("late/acc",), "late/acc"),
                      Panel("line", ("lengthgen/acc", "lengthgen/acc_beyond"), "length generalization"),
                      Panel("media", ("lengthgen/by_position",), "accuracy and previous-token head by position"))),
        PanelSection("Attention maps", "Per member at the end of training: each layer's pattern on an OOD example.",
                     tuple(Panel("media", (key,), key) for key in (
                         "attention/pattern_L0H0", "attention/pattern_L1H0"))),
        PanelSection("Training", "In-distribution fit.",
                     tuple(Panel("line", (m,), m) for m in ("train/loss", "id/loss", "bigram/loss"))),
    )
