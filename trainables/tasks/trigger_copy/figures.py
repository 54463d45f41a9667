"""The trigger-copy figures of a trial's arrays (attention.npz), drawn with trainables.figures and the task's
landmarks: the first trigger, the output token (the induction head's target) and the shortcut position.

Positions are 0-indexed as in the code: the first trigger of an OOD sequence sits at l1, the output token at l1 + 1,
the query (second trigger) at l1 + l2 + 2, and the positional shortcut reads position (l1 + l2) // 2 + 1 (SPEC §1).
"""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from trainables import figures

TRIGGER = {"marker": "v", "color": "#2ec4ff", "label": "first trigger", "s": 70, "edgecolors": "black",
           "linewidths": 0.8}
OUTPUT = {"marker": "o", "facecolors": "none", "edgecolors": "#7CFC00", "label": "output (induction target)", "s": 60,
          "linewidths": 2.0}
SHORTCUT = {"marker": "s", "facecolors": "none", "edgecolors": "#ff4fd8", "label": "shortcut position", "s": 40,
            "linewidths": 1.5}
NOTE = ("Attention at the query per layer and head: first trigger ▼, output token ○ (the induction head's target), "
        "shortcut position □. Accuracy by (l1, l2): every OOD length pair; training lengths sit on the diagonal.")


def query_attention(arrays: dict[str, np.ndarray], layer: int, head: int) -> Figure:
    """Attention paid by the query of each example OOD sequence (`query_attention` (k, n_layers, H, T))."""
    l1, l2 = np.asarray(arrays["l1"]), np.asarray(arrays["l2"])
    even = (l1 + l2) % 2 == 0
    marks = [(l1, TRIGGER), (l1 + 1, OUTPUT), (np.where(even, (l1 + l2) // 2 + 1, np.nan), SHORTCUT)]
    return figures.attention_rows(arrays["query_attention"][:, layer, head], l1 + l2 + 2,
                                  [f"l1={a}, l2={b}" for a, b in zip(l1, l2)], marks,
                                  f"Attention at the query, layer {layer} head {head}")


def pattern(arrays: dict[str, np.ndarray], layer: int, head: int, example: int = 0) -> Figure:
    """The full causal pattern of one head on one example OOD sequence (`patterns` (k, n_layers, H, T, T))."""
    l1, l2 = int(arrays["l1"][example]), int(arrays["l2"][example])
    columns = [(l1, {"color": TRIGGER["color"], "label": TRIGGER["label"]}),
               (l1 + 1, {"color": OUTPUT["edgecolors"], "label": OUTPUT["label"]})]
    return figures.attention_pattern(arrays["patterns"][example, layer, head], l1 + l2 + 3, columns,
                                     f"Layer {layer} head {head}, example l1={l1}, l2={l2}")


def accuracy_by_pair(acc: np.ndarray) -> Figure:
    """OOD accuracy per (l1, l2) cell of the all_pairs split (`acc_by_pair`, L x L at [l1, l2], NaN = no sequence)."""
    return figures.diagonal_heatmap(acc, "OOD accuracy by (l1, l2)", "l1 (fillers before the first trigger)",
                                    "l2 (fillers before the query)", "l1 = l2 (training)")


def all_figures(arrays: dict[str, np.ndarray]) -> dict[str, Figure]:
    """W&B media key -> figure: attention at the query and full patterns per layer and head, accuracy by pair."""
    out: dict[str, Figure] = {}
    for layer, head in figures.layer_heads(arrays, "query_attention"):
        out[f"attention/query_L{layer}H{head}"] = query_attention(arrays, layer, head)
    for layer, head in figures.layer_heads(arrays):
        out[f"attention/pattern_L{layer}H{head}"] = pattern(arrays, layer, head)
    if "acc_by_pair" in arrays:
        out["ood/acc_by_pair"] = accuracy_by_pair(arrays["acc_by_pair"])
    return out


# --- the same arrays as plain images (W&B media): numpy only, no figure drawn ----------------------------------------

MARK_RGB = {"first trigger": (46, 196, 255), "output": (124, 252, 0), "shortcut": (255, 79, 216)}
QUERY_CAPTION = ("rows: OOD examples, columns: key positions up to the query; dots: blue first trigger, green output "
                 "token (the induction head's target), pink shortcut position")


def all_images(arrays: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, str]]:
    """W&B media key -> (uint8 image, caption): the keys of all_figures, as heatmaps without axes."""
    out = {}
    if "query_attention" in arrays:
        l1, l2 = np.asarray(arrays["l1"]), np.asarray(arrays["l2"])
        query = l1 + l2 + 2
        rows = np.arange(len(l1))
        even = (l1 + l2) % 2 == 0
        marks = [(rows, l1, MARK_RGB["first trigger"]), (rows, l1 + 1, MARK_RGB["output"]),
                 (rows[even], ((l1 + l2) // 2 + 1)[even], MARK_RGB["shortcut"])]
        T = arrays["query_attention"].shape[-1]  # (k, n_layers, H, T)
        for layer, head in figures.layer_heads(arrays, "query_attention"):
            attention = np.asarray(arrays["query_attention"][:, layer, head], dtype=float)
            attention = np.where(np.arange(T)[None, :] > query[:, None], np.nan, attention)  # padding blank
            image = figures.heatmap_image(attention, 0.0, max(float(np.nanmax(attention)), 1e-6), "magma", marks)
            out[f"attention/query_L{layer}H{head}"] = (image, QUERY_CAPTION)
    for layer, head in figures.layer_heads(arrays):  # patterns (k, n_layers, H, T, T)
        end = int(arrays["l1"][0] + arrays["l2"][0] + 3)
        out[f"attention/pattern_L{layer}H{head}"] = (
            figures.heatmap_image(arrays["patterns"][0, layer, head, :end, :end], 0.0, 1.0, "magma"),
            f"query rows x key columns of the first example (l1={arrays['l1'][0]}, l2={arrays['l2'][0]})")
    if "acc_by_pair" in arrays:
        acc = np.asarray(arrays["acc_by_pair"], dtype=float)
        finite = np.isfinite(acc)
        top = int(max(np.nonzero(finite.any(1))[0].max(initial=1), np.nonzero(finite.any(0))[0].max(initial=1))) + 1
        out["ood/acc_by_pair"] = (figures.heatmap_image(acc[1:top, 1:top].T, 0.0, 1.0, flip=True),
                                  f"OOD accuracy by (l1 across, l2 up), from 1; mean {np.nanmean(acc):.3f}; training "
                                  "lengths lie on the diagonal")
    return out
