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

import torch
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
        return [Phase(optim.build(model.parameters()), optim.max_steps, optim.batch_size)]

    def batch_sizes(self, cfg, optim: OptimConfig) -> dict[str, int]:
        """The config key of each training batch -> its size (what trainables/memory.py weighs)."""
        return {"optim.batch_size": optim.batch_size}

    def activation_floats(self, cfg, d_vocab: int, n_ctx: int, scored: int, d_in: int | None = None) -> float:
        """Floats a forward pass keeps per sequence of n_ctx positions (`scored` of them unembedded): a rough upper
        bound of the activations autograd holds, for trainables/memory.py (which passes `d_in=` for a continuous
        task). By default measured: what autograd saves for a forward of two sequences minus one (the weights it
        saves are no sequence's), once per config."""
        key = (id(self), repr(cfg), d_vocab, n_ctx, scored, d_in)
        if key not in _measured:
            with torch.random.fork_rng(devices=[]):
                model = build_model(self, cfg, d_vocab, n_ctx, d_in)
            saved = [_saved_floats(model, n, n_ctx, scored == 1, d_in) for n in (1, 2)]
            _measured[key] = float(saved[1] - saved[0])
        return _measured[key]

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


_measured: dict[tuple, float] = {}  # ModelSpec.activation_floats' measurements, per model config and shape


def _saved_floats(model: nn.Module, n: int, n_ctx: int, at_query: bool, d_in: int | None = None) -> int:
    """Elements of the tensors autograd saves, plus the logits, for one forward of n sequences of n_ctx tokens (or
    of n_ctx continuous inputs of width d_in)."""
    saved = 0

    def count(tensor: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        saved += tensor.numel()
        return tensor

    model_input = torch.zeros(n, n_ctx, dtype=torch.long) if d_in is None else torch.zeros(n, n_ctx, d_in)
    query = torch.full((n,), n_ctx - 1) if at_query else None
    with torch.autograd.graph.saved_tensors_hooks(count, lambda tensor: tensor):
        logits, _ = model.run_with_cache(model_input, query)
    return saved + logits.numel()


# The built-ins, named as a plugin package names its models in its entry points (trainables/registry.py).
MODELS = Registry("model", ModelSpec, required=("build",), builtins={
    "one_step": "trainables.models.one_step:SPEC",
    "transformer": "trainables.models.transformer:SPEC",
})
