"""Configurable causal transformer for the practical experiments (SPEC §3), attention readable after every forward.

Names follow TransformerLens: d_vocab, n_ctx, d_model, n_layers, n_heads, d_head, W_Q, W_K, W_V, W_O. Every layer
returns its attention pattern (B, H, T, T); `forward` hands back the query row of each.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

POSITIONAL = ("onehot_abs", "learned_abs", "relative", "rotary", "none")
EMBEDDINGS = ("onehot", "learned")


@dataclass
class TransformerConfig:
    """Architecture of the practical transformer; training settings are in `optim`."""

    name: str = "transformer"
    n_layers: int = 2
    n_heads: int = 1
    embedding: str = "onehot"  # onehot: x_t = [e_{z_t} ; p_t if onehot_abs ; e_{z_{t-1}} if prev_token] | learned
    d_model: int = 64  # embedding=learned only: the residual width (onehot derives it from N, L and the features)
    d_head: int = 0  # per-head query/key/value width; 0 means d_model // n_heads
    positional: str = "onehot_abs"  # onehot_abs | learned_abs | relative | rotary | none
    prev_token: bool = False  # add the previous token as a feature, so one layer can implement an induction head
    tied_kq: bool = True  # one W_KQ per head (score = x_q W_KQ x_k^T, as in the theory) instead of separate W_Q, W_K
    mlp: bool = False  # a 4 d_model ReLU MLP after each attention layer
    layer_norm: bool = False  # pre-LayerNorm on each residual branch and before the unembedding
    init_std: float = 0.02  # std of the normal initialisation of every matrix


def residual_width(cfg: TransformerConfig, vocab_size: int, max_len: int) -> int:
    """d_model implied by the config: for one-hot embeddings, the sum of the concatenated one-hot parts."""
    if cfg.embedding == "learned":
        return cfg.d_model
    return vocab_size + (max_len if cfg.positional == "onehot_abs" else 0) + (vocab_size if cfg.prev_token else 0)


def head_width(cfg: TransformerConfig, d_model: int) -> int:
    return cfg.d_head or d_model // cfg.n_heads


class Attention(nn.Module):
    def __init__(self, cfg: TransformerConfig, d_model: int, max_len: int):
        super().__init__()
        H, d_head = cfg.n_heads, head_width(cfg, d_model)
        self.tied_kq, self.positional = cfg.tied_kq, cfg.positional
        # Tied: the query is x W_KQ and the key is x itself, so the score is the bilinear form of the theory.
        d_key = d_model if cfg.tied_kq else d_head
        self.W_Q = nn.Parameter(torch.randn(H, d_model, d_key) * cfg.init_std)  # W_KQ when tied
        self.W_K = None if cfg.tied_kq else nn.Parameter(torch.randn(H, d_model, d_key) * cfg.init_std)
        self.W_V = nn.Parameter(torch.randn(H, d_model, d_head) * cfg.init_std)
        self.W_O = nn.Parameter(torch.randn(H, d_head, d_model) * cfg.init_std)
        self.scale = 1 / math.sqrt(d_key)
        if cfg.positional == "relative":
            self.relative_bias = nn.Parameter(torch.zeros(H, max_len))  # one learned score per head and offset i - j
        if cfg.positional == "rotary":
            inv_freq = 10000 ** (-torch.arange(0, d_key, 2).float() / d_key)
            self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, T, D) -> residual update (B, T, D) and the causal pattern (B, H, T, T)."""
        T = x.shape[1]
        q = torch.einsum("btd,hde->bhte", x, self.W_Q)  # (B, H, T, d_key)
        k = x[:, None].expand(-1, q.shape[1], -1, -1) if self.tied_kq else torch.einsum("btd,hde->bhte", x, self.W_K)
        if self.positional == "rotary":
            q, k = self._rotate(q), self._rotate(k)
        scores = (q @ k.transpose(-1, -2)) * self.scale  # (B, H, T_query, T_key)
        offset = torch.arange(T, device=x.device)[:, None] - torch.arange(T, device=x.device)[None, :]  # (T, T)
        if self.positional == "relative":
            scores = scores + self.relative_bias[:, offset.clamp(min=0)]  # (H, T, T) broadcast over B
        pattern = scores.masked_fill(offset < 0, float("-inf")).softmax(dim=-1)  # causal: keys j <= query i
        v = torch.einsum("btd,hde->bhte", x, self.W_V)  # (B, H, T, d_head)
        out = torch.einsum("bhqt,bhte,hed->bqd", pattern, v, self.W_O)  # (B, T, D), heads summed
        return out, pattern

    def _rotate(self, x: torch.Tensor) -> torch.Tensor:
        """Rotary embedding on (B, H, T, E): rotate each consecutive pair of features by position * frequency."""
        angle = torch.arange(x.shape[2], device=x.device)[:, None] * self.inv_freq[None, :]  # (T, E/2)
        cos, sin = angle.cos(), angle.sin()
        even, odd = x[..., 0::2], x[..., 1::2]  # (B, H, T, E/2)
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg: TransformerConfig, d_model: int, max_len: int):
        super().__init__()
        norm = (lambda: nn.LayerNorm(d_model)) if cfg.layer_norm else nn.Identity
        self.ln_attn, self.attn = norm(), Attention(cfg, d_model, max_len)
        self.ln_mlp = norm()
        self.mlp = (
            nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))
            if cfg.mlp
            else None
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        update, pattern = self.attn(self.ln_attn(x))
        x = x + update
        if self.mlp is not None:
            x = x + self.mlp(self.ln_mlp(x))
        return x, pattern


class Transformer(nn.Module):
    def __init__(self, cfg: TransformerConfig, vocab_size: int, max_len: int):
        super().__init__()
        self.cfg, self.d_vocab, self.n_ctx = cfg, vocab_size, max_len
        d_model = residual_width(cfg, vocab_size, max_len)
        if cfg.embedding == "learned":
            self.W_E = nn.Parameter(torch.randn(vocab_size, d_model) * cfg.init_std)
            self.W_E_prev = nn.Parameter(torch.randn(vocab_size, d_model) * cfg.init_std) if cfg.prev_token else None
        if cfg.positional == "learned_abs":
            self.W_pos = nn.Parameter(torch.randn(max_len, d_model) * cfg.init_std)
        self.blocks = nn.ModuleList(Block(cfg, d_model, max_len) for _ in range(cfg.n_layers))
        self.ln_final = nn.LayerNorm(d_model) if cfg.layer_norm else nn.Identity()
        self.W_U = nn.Parameter(torch.randn(d_model, vocab_size) * cfg.init_std)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, T) -> (B, T, d_model) residual stream input."""
        B, T = tokens.shape
        previous = F.pad(tokens, (1, 0), value=-1)[:, :T]  # (B, T), -1 where there is no previous token
        if self.cfg.embedding == "onehot":
            parts = [F.one_hot(tokens, self.d_vocab)]
            if self.cfg.positional == "onehot_abs":
                parts.append(F.one_hot(torch.arange(T, device=tokens.device), self.n_ctx).expand(B, T, self.n_ctx))
            if self.cfg.prev_token:
                parts.append(F.one_hot(previous + 1, self.d_vocab + 1)[..., 1:])  # all-zero at t = 0
            x = torch.cat(parts, dim=-1).float()
        else:
            x = self.W_E[tokens]
            if self.cfg.prev_token:
                x = x + self.W_E_prev[previous.clamp(min=0)] * (previous >= 0)[..., None]
        if self.cfg.positional == "learned_abs":
            x = x + self.W_pos[:T]
        return x

    def run(self, tokens: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Logits at every position (B, T, N) and each layer's causal attention pattern (B, H, T, T)."""
        x = self.embed(tokens)
        patterns = []
        for block in self.blocks:
            x, pattern = block(x)
            patterns.append(pattern)
        return self.ln_final(x) @ self.W_U, patterns

    def forward(self, tokens: torch.Tensor, query: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Logits at each sequence's query (B, N) and each layer's attention from it, [(B, H, T)] per layer."""
        logits, patterns = self.run(tokens)
        rows = torch.arange(len(tokens), device=tokens.device)
        return logits[rows, query], [p[rows, :, query] for p in patterns]
