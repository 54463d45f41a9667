"""A model without attention: each position sees the running mean of the embeddings before it (a causal average,
no query-key scores), then an MLP. Its cache holds no attention pattern."""
from dataclasses import dataclass

import torch
from torch import nn

from trainables.models import ModelSpec


@dataclass
class MeanMixerConfig:
    name: str = "mean_mixer"
    d_model: int = 32


class MeanMixer(nn.Module):
    def __init__(self, cfg: MeanMixerConfig, d_vocab: int, n_ctx: int):
        super().__init__()
        self.embed = nn.Embedding(d_vocab, cfg.d_model)
        self.position = nn.Parameter(torch.randn(n_ctx, cfg.d_model) * 0.02)
        self.mlp = nn.Sequential(nn.Linear(2 * cfg.d_model, 4 * cfg.d_model), nn.ReLU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model))
        self.unembed = nn.Linear(cfg.d_model, d_vocab)

    def run_with_cache(self, tokens, query=None):
        x = self.embed(tokens) + self.position[: tokens.shape[1]]  # (B, T, d)
        counts = torch.arange(1, tokens.shape[1] + 1, device=tokens.device)[:, None]  # (T, 1)
        mean = x.cumsum(1) / counts  # (B, T, d): causal average
        hidden = x + self.mlp(torch.cat([x, mean], -1))  # (B, T, d)
        logits = self.unembed(hidden)  # (B, T, N)
        if query is not None:
            logits = logits[torch.arange(len(query), device=query.device), query]  # (B, N)
        return logits, {"hook_mean": mean}

    def forward(self, tokens, query=None):
        return self.run_with_cache(tokens, query)[0]


class MeanMixerSpec(ModelSpec):
    """A causal running mean and an MLP: no attention at all."""

    name = "mean_mixer"
    config = MeanMixerConfig

    def build(self, cfg, d_vocab, n_ctx):
        return MeanMixer(cfg, d_vocab, n_ctx)


SPEC = MeanMixerSpec()
