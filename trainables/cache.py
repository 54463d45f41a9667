"""The `run_with_cache` contract (trainables/models/__init__.py), read from the consumer's side: helpers that tasks
and readouts use to find each layer's causal attention pattern (`blocks.{i}.attn.hook_pattern` (B, H, T_q, T), T_q = 1
for a layer that ran at the query only) in a model's cache, without importing any model. A model without attention (a
convolution, a state-space mixer) puts none: then `patterns` is empty and the probes that read attention leave their
metrics out.
"""
from __future__ import annotations

import torch

PATTERN = "blocks.{}.attn.hook_pattern"


def patterns(cache: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Every layer's attention pattern in the cache, in layer order: [(B, H, T_q, T)]; [] for a model without one."""
    n_layers = sum(name.endswith(".attn.hook_pattern") for name in cache)
    return [cache[PATTERN.format(i)] for i in range(n_layers)]


def pattern_at(cache: dict[str, torch.Tensor], layer: int, query: torch.Tensor) -> torch.Tensor:
    """(B, H, T): the attention each sequence's query paid in `layer` (negative: counted from the last layer)."""
    pattern = patterns(cache)[layer]  # (B, H, T_q, T)
    if pattern.shape[2] == 1:  # the layer ran at the query only
        return pattern[:, :, 0]
    return pattern[torch.arange(len(query), device=query.device), :, query]
