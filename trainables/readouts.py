"""A trained model's final readout, the arrays of attention.npz (generic ones from the model's cache and weights, and
the task's own with the final metrics read off them), and the figures and images drawn from them.
"""
from __future__ import annotations

import numpy as np
import torch

from trainables.cache import pattern_at, patterns
from trainables.models import MODELS
from trainables.tasks import Batch, task_of, view_of


@torch.no_grad()
def final(cfg, model: torch.nn.Module, ood: Batch, generator: torch.Generator) -> tuple[dict[str, np.ndarray],
                                                                                          dict[str, float]]:
    """(arrays, metrics): the task's readout, attention at the query of the OOD set (its mean per layer and head, and
    `eval.n_examples` examples with their tokens and per-sequence facts), full patterns of those examples where the
    model reads every position, and the model's named matrices."""
    model.eval()
    arrays, metrics = task_of(cfg).readouts(cfg.task, model, ood, generator, cfg.eval.n_examples)
    k = min(cfg.eval.n_examples, len(ood.tokens))
    if ood.query is not None:
        _, cache = model.run_with_cache(ood.model_input, ood.query)
        attention = [pattern_at(cache, layer, ood.query) for layer in range(len(patterns(cache)))]  # [(B, H, T)]
        if attention:  # a model without attention has no patterns to read
            arrays["query_attention_mean"] = torch.stack([a.mean(0) for a in attention]).cpu().numpy()  # (layers, H, T)
            arrays["query_attention"] = torch.stack([a[:k] for a in attention], 1).cpu().numpy()  # (k, layers, H, T)
    arrays["tokens"] = ood.tokens[:k].cpu().numpy()
    arrays |= {name: value[:k].cpu().numpy() for name, value in ood.info.items()}
    if not MODELS[cfg.model.name].needs_query:  # the model reads every position: its full causal patterns
        layers = patterns(model.run_with_cache(ood.model_input[:k])[1])
        if layers:
            arrays["patterns"] = torch.stack(layers, 1).cpu().numpy()  # (k, n_layers, H, T, T)
    arrays |= {name: value.detach().cpu().numpy() for name, value in matrices(model).items()}
    return arrays, metrics


def matrices(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's named weight matrices for probes (`matrices()`, optional for a plugin's model)."""
    return model.matrices() if hasattr(model, "matrices") else {}


def trial_figures(cfg, arrays: dict[str, np.ndarray]) -> dict:
    """Media key -> Figure: the task's figures of the arrays, then the model's (the report's attention gallery).
    cfg: a Config or a plain dict (an output directory's config.yaml)."""
    return view_of(task_of(cfg)).figures(arrays) | _model(cfg).figures(arrays)


def member_images(cfg, arrays: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, str]]:
    """Media key -> (uint8 image, caption): the same arrays as plain heatmaps, the task's then the model's (W&B)."""
    return view_of(task_of(cfg)).images(arrays) | _model(cfg).images(arrays)


def _model(cfg):
    return MODELS[cfg["model"]["name"] if isinstance(cfg, dict) else cfg.model.name]
