"""The figures of a task that draws none of its own (its view's figures_module unset, trainables/tasks/view.py):
every layer and head's full causal attention pattern on the first OOD example, where the model has attention
(`patterns` in attention.npz); nothing otherwise. The figures module contract: all_figures, all_images and NOTE."""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from trainables import figures

WINDOW = 64  # the first positions shown: a pattern wider than this is unreadable at the report's size
NOTE = "Full causal attention patterns (query rows, key columns) of the first OOD example, per layer and head."


def all_figures(arrays: dict[str, np.ndarray]) -> dict[str, Figure]:
    return {key: figures.attention_pattern(full, window, [], f"Layer {layer} head {head}, first {window} positions",
                                           query_row=False) for key, layer, head, full, window in _heads(arrays)}


def all_images(arrays: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, str]]:
    return {key: (figures.heatmap_image(full[:window, :window], 0.0, 1.0, "magma", cell=4),
                  f"query rows x key columns, the first {window} positions of an OOD example")
            for key, layer, head, full, window in _heads(arrays)}


def _heads(arrays: dict[str, np.ndarray]):
    """Per head: its media key, layer, head, full pattern on the first example (T, T) and the positions shown."""
    for layer, head in figures.layer_heads(arrays):  # patterns (k, n_layers, H, T, T)
        full = arrays["patterns"][0, layer, head]
        yield f"attention/pattern_L{layer}H{head}", layer, head, full, min(WINDOW, full.shape[-1])
