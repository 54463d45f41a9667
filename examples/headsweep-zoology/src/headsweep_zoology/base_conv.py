"""A gated-convolution sequence model without attention, in the spirit of Zoology's BaseConv (Arora et al. 2023):
`model.name: base_conv` (entry point) or `model.name: "headsweep_zoology.base_conv:SPEC"` (module path).

Each block mixes positions by a causal convolution and gates it elementwise, then an optional MLP mixes channels:

    u = LN(x);   x = x + (u W_1 + b_1) * conv_h(u W_2 + b_2);   x = x + MLP(LN(x))

where conv_h is a depthwise causal convolution with a learned filter h (d_model, K) per layer: channel d at position
t reads sum_{s <= t} h[d, t - s] v[s, d] for t - s < K. As in Zoology's MQAR models, even layers (0, 2, ...) use a
short filter (model.short_kernel, e.g. 3: a token and its predecessors, which binds a key to its value) and odd layers
a long one over the whole context (the lookup); short_kernel 0 makes every filter long.

The convolution is an einsum against a (d_model, T, T) Toeplitz matrix gathered from the filter: no in-place ops on
parameters, no data-dependent control flow, no .item(), so packed members train as one torch.func.vmap over
functional_call (headsweep's population.Stack). T is at most a few hundred in these tasks, where the O(T^2) matrix
costs less than an FFT convolution's padding and transforms.

The model has no attention: its cache holds each block's output (`blocks.{i}.hook_out`) and no
`blocks.{i}.attn.hook_pattern`, so headsweep's attention probes and figures leave it out.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from trainables.errors import require
from trainables.models import ModelSpec


@dataclass
class BaseConvConfig:
    """Architecture of the gated-convolution model; training settings are in `optim`."""

    name: str = "base_conv"
    d_model: int = 64  # residual width (learned token embeddings, no positional embedding: the filters see order)
    n_layers: int = 2  # gated-convolution blocks
    short_kernel: int = 3  # filter length of even layers (odd layers: the whole context); 0 = every layer long
    mlp: bool = True  # a 4 d_model ReLU MLP after each convolution (Zoology's channel mixer)
    init_std: float = 0.02  # std of the embedding and unembedding; projections and filters use 1/sqrt(fan-in)


def kernel_lengths(cfg: BaseConvConfig, n_ctx: int) -> list[int]:
    """The causal filter length of each layer."""
    return [min(cfg.short_kernel, n_ctx) if cfg.short_kernel and i % 2 == 0 else n_ctx for i in range(cfg.n_layers)]


class GatedConv(nn.Module):
    """x (B, T, D) -> the gated, causally convolved update (B, T, D)."""

    def __init__(self, d_model: int, kernel: int):
        super().__init__()
        scale = 1 / math.sqrt(d_model)
        self.W_gate = nn.Parameter(torch.randn(d_model, d_model) * scale)
        self.b_gate = nn.Parameter(torch.zeros(d_model))
        self.W_in = nn.Parameter(torch.randn(d_model, d_model) * scale)
        self.b_in = nn.Parameter(torch.zeros(d_model))
        self.filter = nn.Parameter(torch.randn(d_model, kernel) / math.sqrt(kernel))  # h[d, lag]

    def toeplitz(self, T: int) -> torch.Tensor:
        """(D, T, T): M[d, t, s] = h[d, t - s] where 0 <= t - s < K, else 0 (causal)."""
        position = torch.arange(T, device=self.filter.device)
        lag = position[:, None] - position[None, :]  # (T, T)
        inside = (lag >= 0) & (lag < self.filter.shape[1])
        taps = self.filter[:, lag.clamp(0, self.filter.shape[1] - 1)]  # (D, T, T), a gather: vmap-safe
        return torch.where(inside, taps, torch.zeros((), dtype=taps.dtype, device=taps.device))

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        gate = u @ self.W_gate + self.b_gate  # (B, T, D)
        value = u @ self.W_in + self.b_in  # (B, T, D)
        mixed = torch.einsum("dts,bsd->btd", self.toeplitz(u.shape[1]), value)  # causal depthwise convolution
        return gate * mixed


class Block(nn.Module):
    def __init__(self, cfg: BaseConvConfig, kernel: int):
        super().__init__()
        D = cfg.d_model
        self.ln_conv, self.conv = nn.LayerNorm(D), GatedConv(D, kernel)
        self.ln_mlp = nn.LayerNorm(D) if cfg.mlp else None
        self.mlp = nn.Sequential(nn.Linear(D, 4 * D), nn.ReLU(), nn.Linear(4 * D, D)) if cfg.mlp else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.conv(self.ln_conv(x))
        if self.mlp is not None:
            x = x + self.mlp(self.ln_mlp(x))
        return x


class BaseConv(nn.Module):
    def __init__(self, cfg: BaseConvConfig, d_vocab: int, n_ctx: int):
        super().__init__()
        self.cfg, self.d_vocab, self.n_ctx = cfg, d_vocab, n_ctx
        self.W_E = nn.Parameter(torch.randn(d_vocab, cfg.d_model) * cfg.init_std)
        self.blocks = nn.ModuleList(Block(cfg, kernel) for kernel in kernel_lengths(cfg, n_ctx))
        self.ln_final = nn.LayerNorm(cfg.d_model)
        self.W_U = nn.Parameter(torch.randn(cfg.d_model, d_vocab) * cfg.init_std)

    def run_with_cache(self, tokens: torch.Tensor,
                       query: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Logits (B, T, d_vocab) at every position, or (B, d_vocab) at each sequence's query when `query` (B,) is
        given; the cache holds `blocks.{i}.hook_out` (B, T, d_model), the residual stream after block i."""
        x = self.W_E[tokens]  # (B, T, D)
        cache = {}
        for i, block in enumerate(self.blocks):
            x = cache[f"blocks.{i}.hook_out"] = block(x)
        if query is not None:  # every block must run at every position (the convolutions read them all)
            x = x[torch.arange(len(x), device=x.device), query][:, None]  # (B, 1, D)
        logits = self.ln_final(x) @ self.W_U
        return (logits if query is None else logits[:, 0]), cache

    def forward(self, tokens: torch.Tensor, query: torch.Tensor | None = None) -> torch.Tensor:
        return self.run_with_cache(tokens, query)[0]

    def matrices(self) -> dict[str, torch.Tensor]:
        """Named weights for probes: none that a task reads (the filters are in the checkpoint)."""
        return {}


class BaseConvSpec(ModelSpec):
    """Gated causal convolutions without attention, after Zoology's BaseConv: short and long filters, alternating."""

    name = "base_conv"
    config = BaseConvConfig

    def build(self, cfg: BaseConvConfig, d_vocab: int, n_ctx: int) -> BaseConv:
        return BaseConv(cfg, d_vocab, n_ctx)

    def validate(self, cfg: BaseConvConfig, d_vocab: int, n_ctx: int) -> None:
        require(
            ("model.d_model", cfg.d_model >= 1, "must be >= 1"),
            ("model.n_layers", cfg.n_layers >= 1, "must be >= 1"),
            ("model.short_kernel", cfg.short_kernel >= 0, "must be >= 0 (0: every layer's filter is long)"),
            ("model.init_std", cfg.init_std > 0, "must be > 0"),
        )

    def activation_floats(self, cfg: BaseConvConfig, d_vocab: int, n_ctx: int, scored: int) -> float:
        # Per block: the LayerNorm's output, the two projections, the convolution's output, the gated product and the
        # residual (6 T D); the MLP's LayerNorm, hidden layer twice (pre and post ReLU) and output (10 T D). The
        # (D, T, T) Toeplitz matrix is built once per forward, shared by the batch, so not counted per sequence.
        T, D = n_ctx, cfg.d_model
        block = 6 * T * D + 10 * T * D * cfg.mlp
        return T * D + cfg.n_layers * block + 3 * scored * d_vocab


SPEC = BaseConvSpec()
