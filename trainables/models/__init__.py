"""The ModelSpec protocol and the MODELS registry (public API for plugins: ModelSpec keeps this import path; see
docs/EXTENDING.md): `model.name` picks a ModelSpec, which knows the model's config, how to build it for a task's
vocabulary and context, how it validates itself, how it is trained (its phases) and the figures of its weights.

Every model module offers, TransformerLens-style:
- `run_with_cache(tokens (B, T), query (B,) | None) -> (logits, cache)`: logits (B, T, N) at every position, or
  (B, N) at each sequence's query when `query` is given. A model that reads a continuous task's inputs (`reads`)
  gets them in place of the tokens, (B, T, d_in) float, and returns its predictions (B, T, d_out) the same way;
  `cache` maps activation names to tensors, among them
  `blocks.{i}.attn.hook_pattern` (B, H, T_q, T): the causal attention pattern of layer i, with T_q = 1 for a layer
  that ran at the query only (none for a model without attention; trainables/cache.py reads them).
- `matrices() -> {name: tensor}`: weights that probes read by name (the one-step model's W_KQ and W_V).
"""
from __future__ import annotations

from torch import nn

from trainables.optim import OptimConfig, Phase
from trainables.registry import Registry


class ModelSpec:
    name: str
    config: type  # the `model:` section's dataclass
    needs_query: bool = False  # computes its output at one query position per sequence only
    uses_optim: bool = True  # trained by `optim:`; False: its phases are configured under `model:`
    vectorize: bool = True  # packed members train as one vmapped population (False: one after another in a trial)

    def build(self, cfg, d_vocab: int, n_ctx: int) -> nn.Module:
        """The model for a vocabulary of d_vocab tokens and sequences of up to n_ctx. A model that reads continuous
        inputs takes a keyword `d_in` too (their width; d_vocab is then the output width d_out): see build_model."""
        raise NotImplementedError

    def reads(self, cfg) -> str:
        """What the model reads: "tokens" (token ids, the default) or "inputs" (a continuous task's real-valued
        inputs, Batch.inputs)."""
        return "tokens"

    def validate(self, cfg, d_vocab: int, n_ctx: int) -> None:
        """Raise ConfigError (full dotted keys) for a model that cannot be built for this vocabulary and context."""

    def phases(self, cfg, optim: OptimConfig, model: nn.Module) -> list[Phase]:
        return [Phase(optim.build(model.parameters()), optim.max_steps, optim.batch_size, optim.lr_at, optim.clip_norm)]

    def batch_sizes(self, cfg, optim: OptimConfig) -> dict[str, int]:
        """The config key of each training batch -> its size (what trainables/memory.py weighs)."""
        return {"optim.batch_size": optim.batch_size}

    def activation_floats(self, cfg, d_vocab: int, n_ctx: int, scored: int, d_in: int | None = None) -> float | None:
        """Optional, for trainables/memory.py (which passes `d_in=` for a continuous task): what a training step
        holds per sequence of n_ctx positions (`scored` of them scored; 1: at a query) at its peak beyond the batch
        (saved activations, gradients, temporaries), in float32-sized units of 4 bytes. None, the default: memory.py
        measures it."""
        return None

    def figures(self, arrays: dict) -> dict:
        """Media key -> Figure of the model's weights saved in attention.npz (the report)."""
        return {}

    def images(self, arrays: dict) -> dict:
        """Media key -> (uint8 image, caption) of the same weights, without matplotlib (W&B)."""
        return {}


def build_model(spec: ModelSpec, cfg, d_vocab: int, n_ctx: int, d_in: int | None = None) -> nn.Module:
    """spec.build for a task's dims, with the input width of a continuous task (Task.input_width) as the keyword
    `d_in`; a token task's model is built as before, so a model plugin that reads tokens needs no `d_in`."""
    return spec.build(cfg, d_vocab, n_ctx) if d_in is None else spec.build(cfg, d_vocab, n_ctx, d_in=d_in)


# The built-ins, named as a plugin package names its models in its entry points (trainables/registry.py).
MODELS = Registry("model", ModelSpec, required=("build",), builtins={
    "one_step": "trainables.models.one_step:SPEC",
    "transformer": "trainables.models.transformer:SPEC",
})
