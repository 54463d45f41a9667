"""The MODELS registry: `model.name` picks a ModelSpec, which knows the model's config, how to build it for a task's
vocabulary and context, how it validates itself, how it is trained (its phases) and the figures of its weights.

Every model module offers, TransformerLens-style:
- `run_with_cache(tokens (B, T), query (B,) | None) -> (logits, cache)`: logits (B, T, N) at every position, or
  (B, N) at each sequence's query when `query` is given; `cache` maps activation names to tensors, among them
  `blocks.{i}.attn.hook_pattern` (B, H, T_q, T): the causal attention pattern of layer i, with T_q = 1 for a layer
  that ran at the query only.
- `matrices() -> {name: tensor}`: weights that probes read by name (the one-step model's W_KQ and W_V).
"""
from __future__ import annotations

import torch
from torch import nn

from trainables.optim import OptimConfig, Phase


class ModelSpec:
    name: str
    config: type  # the `model:` section's dataclass
    needs_query: bool = False  # computes its output at one query position per sequence only
    uses_optim: bool = True  # trained by `optim:`; False: its phases are configured under `model:`
    vectorize: bool = True  # packed members train as one vmapped population (False: one after another in a trial)

    def build(self, cfg, d_vocab: int, n_ctx: int) -> nn.Module:
        raise NotImplementedError

    def validate(self, cfg, d_vocab: int, n_ctx: int) -> None:
        """Raise ConfigError (full dotted keys) for a model that cannot be built for this vocabulary and context."""

    def phases(self, cfg, optim: OptimConfig, model: nn.Module) -> list[Phase]:
        return [Phase(optim.build(model.parameters()), optim.max_steps, optim.batch_size)]

    def batch_sizes(self, cfg, optim: OptimConfig) -> dict[str, int]:
        """The config key of each training batch -> its size (what trainables/memory.py weighs)."""
        return {"optim.batch_size": optim.batch_size}

    def activation_floats(self, cfg, d_vocab: int, n_ctx: int, scored: int) -> float:
        """Floats a forward pass keeps per sequence of n_ctx positions (`scored` of them unembedded): a rough upper
        bound of the activations autograd holds, for trainables/memory.py."""
        raise NotImplementedError

    def figures(self, arrays: dict) -> dict:
        """Media key -> Figure of the model's weights saved in attention.npz (the report)."""
        return {}

    def images(self, arrays: dict) -> dict:
        """Media key -> (uint8 image, caption) of the same weights, without matplotlib (W&B)."""
        return {}


def patterns(cache: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """Every layer's attention pattern in the cache, in layer order: [(B, H, T_q, T)]."""
    n_layers = sum(name.endswith(".attn.hook_pattern") for name in cache)
    return [cache[f"blocks.{i}.attn.hook_pattern"] for i in range(n_layers)]


def pattern_at(cache: dict[str, torch.Tensor], layer: int, query: torch.Tensor) -> torch.Tensor:
    """(B, H, T): the attention each sequence's query paid in `layer` (negative: counted from the last layer)."""
    pattern = patterns(cache)[layer]  # (B, H, T_q, T)
    if pattern.shape[2] == 1:  # the layer ran at the query only
        return pattern[:, :, 0]
    return pattern[torch.arange(len(query), device=query.device), :, query]


def _registry() -> dict[str, ModelSpec]:
    from trainables.models.one_step import SPEC as one_step
    from trainables.models.transformer import SPEC as transformer

    return {spec.name: spec for spec in (one_step, transformer)}


MODELS: dict[str, ModelSpec] = _registry()
