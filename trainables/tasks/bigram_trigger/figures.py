"""The bigram-with-triggers figures of a trial's arrays (attention.npz): accuracy and previous-token attention by
position over sequences longer than training (the length-generalization picture of Wang & Sato), and each layer's
attention pattern on an example sequence, where a previous-token head shows as the first sub-diagonal."""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from trainables import figures, pattern_figures

POSITION_BIN = 16  # positions averaged per point: one sequence position has few label >= 2 targets
PATTERN_WINDOW = pattern_figures.WINDOW  # patterns show the first positions: a 256 x 256 map hides the sub-diagonal
NOTE = ("By position: accuracy on targets with label >= 2 and the share of sequences whose previous-token head peaks "
        f"at t - 1, averaged over bins of {POSITION_BIN} positions of sequences longer than training (dashed: the "
        f"training length). Patterns: the first {PATTERN_WINDOW} positions of an OOD example per layer and head.")


def _binned(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bin centres and the mean of the finite values in each bin of POSITION_BIN positions (NaN if none)."""
    values = np.asarray(values, dtype=float)
    n_bins = -(-len(values) // POSITION_BIN)
    padded = np.full(n_bins * POSITION_BIN, np.nan)
    padded[:len(values)] = values
    bins = padded.reshape(n_bins, POSITION_BIN)
    finite = np.isfinite(bins)
    means = np.where(finite.any(1), np.nansum(bins, 1) / np.maximum(finite.sum(1), 1), np.nan)
    return np.arange(n_bins) * POSITION_BIN + (POSITION_BIN - 1) / 2, means


def by_position(arrays: dict[str, np.ndarray]) -> Figure:
    """Accuracy (label >= 2) and previous-token attention by position, `acc_by_position` and
    `prev_token_by_position` (T_test,), with the training length `train_len` marked."""
    fig = figures.new_figure(6.4, 3.6)
    ax = fig.add_subplot()
    for key, label, colour in (("acc_by_position", "accuracy, label >= 2", "#1f77b4"),
                               ("prev_token_by_position", "previous-token attention peak", "#d62728")):
        if key in arrays:
            centres, means = _binned(arrays[key])
            ax.plot(centres, means, marker="o", markersize=3, linewidth=1.4, color=colour, label=label)
    if "train_len" in arrays:
        ax.axvline(float(arrays["train_len"]), color="grey", linestyle="--", linewidth=1.2, label="training length")
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("position t (0-indexed)")
    ax.set_ylabel("fraction")
    ax.set_title("By position, on sequences longer than training", fontsize="medium")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize="x-small")
    return fig


def pattern(arrays: dict[str, np.ndarray], layer: int, head: int, example: int = 0) -> Figure:
    """The first PATTERN_WINDOW positions of one head's causal pattern on one OOD example (`patterns`
    (k, n_layers, H, T, T))."""
    full = arrays["patterns"][example, layer, head]
    window = min(PATTERN_WINDOW, full.shape[-1])
    return figures.attention_pattern(full, window, [], f"Layer {layer} head {head}, example {example}, "
                                                      f"first {window} positions")


def all_figures(arrays: dict[str, np.ndarray]) -> dict[str, Figure]:
    """W&B media key -> figure: accuracy and previous-token attention by position, and each layer's pattern."""
    out: dict[str, Figure] = {}
    if "acc_by_position" in arrays or "prev_token_by_position" in arrays:
        out["lengthgen/by_position"] = by_position(arrays)
    for layer, head in figures.layer_heads(arrays):
        out[f"attention/pattern_L{layer}H{head}"] = pattern(arrays, layer, head)
    return out


def all_images(arrays: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, str]]:
    """W&B media key -> (uint8 image, caption): the keys of all_figures as plain heatmaps (no figure drawn)."""
    out = {}
    rows = [arrays[key] for key in ("acc_by_position", "prev_token_by_position") if key in arrays]
    if rows:
        binned = np.stack([_binned(row)[1] for row in rows])  # (2, bins)
        marks = []
        if "train_len" in arrays:  # a dot on each row at the bin of the training length
            column = int(arrays["train_len"]) // POSITION_BIN
            marks = [(np.arange(len(rows)), np.full(len(rows), min(column, binned.shape[1] - 1)), (255, 255, 255))]
        out["lengthgen/by_position"] = (figures.heatmap_image(binned, 0.0, 1.0, marks=marks, cell=12),
                                        f"by position (bins of {POSITION_BIN}), top row: accuracy where label >= 2, "
                                        "bottom row: previous-token head peak; white dot: the training length")
    return out | pattern_figures.all_images(arrays)  # the first PATTERN_WINDOW positions, as the figures
