"""Configurable causal transformer for the practical experiments (SPEC §3), attention readable after every forward.

Names follow TransformerLens: d_vocab, n_ctx, d_model, n_layers, n_heads, d_head, W_Q, W_K, W_V, W_O. Every layer's
attention pattern is in the cache `run_with_cache` returns (`blocks.{i}.attn.hook_pattern`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from trainables.errors import require
from trainables.models import ModelSpec

POSITIONAL = ("onehot_abs", "learned_abs", "random_abs", "relative", "rotary", "none")
EMBEDDINGS = ("onehot", "learned", "linear")


@dataclass
class TransformerConfig:
    """Architecture of the practical transformer; training settings are in `optim`."""

    name: str = "transformer"
    n_layers: int = 2
    n_heads: int = 1
    embedding: str = "onehot"  # onehot: x_t = [e_{z_t} ; p_t if onehot_abs ; e_{z_{t-1}} if prev_token] | learned |
    # linear: a continuous task's inputs read in by W_in (d_in, d_model), outputs read out by W_U (d_model, d_out)
    d_model: int = 64  # learned and linear: the residual width (onehot derives it from N, L and the features)
    n_ctx: int = 0  # the longest sequence the model reads (its positional table's size); 0: the task's longest
    d_head: int = 0  # per-head query/key/value width; 0 means d_model // n_heads
    positional: str = "onehot_abs"  # onehot_abs | learned_abs | random_abs (frozen) | relative | rotary | none
    prev_token: bool = False  # add the previous token as a feature, so one layer can implement an induction head
    tied_kq: bool = True  # one W_KQ per head (score = x_q W_KQ x_k^T, as in the theory) instead of separate W_Q, W_K
    mlp: bool = False  # a 4 d_model ReLU MLP after each attention layer
    layer_norm: bool = False  # pre-LayerNorm on each residual branch and before the unembedding
    init_std: float = 0.02  # std of the normal initialisation of every matrix


def residual_width(cfg: TransformerConfig, vocab_size: int, max_len: int) -> int:
    """d_model implied by the config: for one-hot embeddings, the sum of the concatenated one-hot parts."""
    if cfg.embedding != "onehot":
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
        # A head as wide as the residual stream (the paper's one-head model) attends over the inputs and maps them by
        # W_V W_O (D x D) once: the same function, without projecting every position's value first.
        self.fold_ov = d_head == d_model
        if cfg.positional == "relative":
            self.relative_bias = nn.Parameter(torch.zeros(H, max_len))  # one learned score per head and offset i - j
        if cfg.positional == "rotary":
            inv_freq = 10000 ** (-torch.arange(0, d_key, 2, dtype=torch.get_default_dtype()) / d_key)
            self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention from the rows of x at `positions` to every row of x: x (B, T, D); positions (1, T_q) (every
        row: arange(T)) or (B, 1) (each sequence's query) -> residual update (B, T_q, D) and the causal pattern
        (B, H, T_q, T)."""
        T = x.shape[1]
        x_query = x if positions.shape[0] == 1 else x[torch.arange(len(x), device=x.device), positions[:, 0], None]
        q = torch.einsum("bqd,hde->bhqe", x_query, self.W_Q)  # (B, H, T_q, d_key)
        k = x[:, None] if self.tied_kq else torch.einsum("btd,hde->bhte", x, self.W_K)  # (B, 1 or H, T, d_key)
        if self.positional == "rotary":
            q, k = self._rotate(q, positions), self._rotate(k, torch.arange(T, device=x.device)[None])
        scores = (q @ k.transpose(-1, -2)) * self.scale  # (B, H, T_q, T)
        offset = positions[..., None] - torch.arange(T, device=x.device)  # (B or 1, T_q, T): query minus key position
        if self.positional == "relative":
            scores = scores + self.relative_bias[:, offset.clamp(min=0)].transpose(0, 1)  # (B or 1, H, T_q, T)
        pattern = scores.masked_fill((offset < 0)[:, None], float("-inf")).softmax(dim=-1)  # causal: keys <= query
        if self.fold_ov:
            attended = pattern @ x[:, None]  # (B, H, T_q, D)
            return torch.einsum("bhqd,hde->bqe", attended, self.W_V @ self.W_O), pattern  # (B, T_q, D), heads summed
        v = torch.einsum("btd,hde->bhte", x, self.W_V)  # (B, H, T, d_head)
        return torch.einsum("bhqe,hed->bqd", pattern @ v, self.W_O), pattern  # (B, T_q, D), heads summed

    def _rotate(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotary embedding of x (B, H, T_x, E) at positions (B or 1, T_x): each consecutive pair of features turns by
        position * frequency."""
        angle = (positions[..., None] * self.inv_freq)[:, None]  # (B or 1, 1, T_x, E/2)
        cos, sin = angle.cos(), angle.sin()
        even, odd = x[..., 0::2], x[..., 1::2]  # (B, H, T_x, E/2)
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)


class Block(nn.Module):
    def __init__(self, cfg: TransformerConfig, d_model: int, max_len: int):
        super().__init__()
        norm = (lambda: nn.LayerNorm(d_model)) if cfg.layer_norm else nn.Identity
        self.ln_attn, self.attn = norm(), Attention(cfg, d_model, max_len)
        self.ln_mlp = norm()
        self.mlp = (nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.ReLU(), nn.Linear(4 * d_model, d_model))
                    if cfg.mlp else None)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x (B, T, D) -> the residual stream at `positions` (B, T_q, D) and the layer's pattern (B, H, T_q, T)."""
        update, pattern = self.attn(self.ln_attn(x), positions)
        x = (x if positions.shape[0] == 1 else x[torch.arange(len(x), device=x.device), positions[:, 0], None]) + update
        if self.mlp is not None:
            x = x + self.mlp(self.ln_mlp(x))
        return x, pattern


def one_hot(index: torch.Tensor, classes: int) -> torch.Tensor:
    """(...) -> (..., classes) bool; an index outside 0..classes-1 gives all False. F.one_hot checks its input's range,
    which reads it back to the host every call."""
    return index[..., None] == torch.arange(classes, device=index.device)


class Transformer(nn.Module):
    def __init__(self, cfg: TransformerConfig, vocab_size: int, max_len: int, d_in: int | None = None):
        super().__init__()
        max_len = cfg.n_ctx or max_len
        self.cfg, self.d_vocab, self.n_ctx = cfg, vocab_size, max_len
        d_model = residual_width(cfg, vocab_size, max_len)
        if cfg.embedding == "linear":
            self.W_in = nn.Parameter(torch.randn(d_in, d_model) * cfg.init_std)
        if cfg.embedding == "learned":
            self.W_E = nn.Parameter(torch.randn(vocab_size, d_model) * cfg.init_std)
            self.W_E_prev = nn.Parameter(torch.randn(vocab_size, d_model) * cfg.init_std) if cfg.prev_token else None
        if cfg.positional == "learned_abs":
            self.W_pos = nn.Parameter(torch.randn(max_len, d_model) * cfg.init_std)
        if cfg.positional == "random_abs":
            # Wang & Sato's APE (after Bietti): fixed Gaussian positions with entries N(0, 1/d_model), so each has
            # norm ~1 and distinct positions are nearly orthogonal. A buffer: drawn from the seeded initialisation,
            # saved in checkpoints, never trained.
            self.register_buffer("W_pos", torch.randn(max_len, d_model) / math.sqrt(d_model))
        self.blocks = nn.ModuleList(Block(cfg, d_model, max_len) for _ in range(cfg.n_layers))
        self.ln_final = nn.LayerNorm(d_model) if cfg.layer_norm else nn.Identity()
        self.W_U = nn.Parameter(torch.randn(d_model, vocab_size) * cfg.init_std)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, T) tokens, or (B, T, d_in) inputs with embedding=linear -> (B, T, d_model) residual stream input."""
        B, T = tokens.shape[:2]
        if self.cfg.embedding == "linear":
            x = tokens @ self.W_in
            return x + self.W_pos[:T] if self.cfg.positional in ("learned_abs", "random_abs") else x
        previous = F.pad(tokens, (1, 0), value=-1)[:, :T]  # (B, T), -1 where there is no previous token
        if self.cfg.embedding == "onehot":
            parts = [one_hot(tokens, self.d_vocab)]
            if self.cfg.positional == "onehot_abs":
                parts.append(one_hot(torch.arange(T, device=tokens.device), self.n_ctx).expand(B, T, self.n_ctx))
            if self.cfg.prev_token:
                parts.append(one_hot(previous, self.d_vocab))  # all-zero at t = 0, where previous is -1
            x = torch.cat(parts, dim=-1).to(self.W_U.dtype)
        else:
            x = self.W_E[tokens]
            if self.cfg.prev_token:
                x = x + self.W_E_prev[previous.clamp(min=0)] * (previous >= 0)[..., None]
        if self.cfg.positional in ("learned_abs", "random_abs"):
            x = x + self.W_pos[:T]
        return x

    def run_with_cache(self, tokens: torch.Tensor,
                       query: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Logits and the cache of named activations (`blocks.{i}.attn.hook_pattern`: (B, H, T_q, T)): without `query`,
        logits (B, T, N) at every position; with `query` (B,), the last layer and the unembedding run at each
        sequence's query only, since nothing else is scored: logits (B, N), the last pattern (B, H, 1, T)."""
        x = self.embed(tokens)  # (B, T, d_model); tokens: (B, T), or (B, T, d_in) inputs
        every_row = torch.arange(tokens.shape[1], device=tokens.device)[None]  # (1, T)
        cache = {}
        for i, block in enumerate(self.blocks):
            last = i == len(self.blocks) - 1
            x, cache[f"blocks.{i}.attn.hook_pattern"] = block(x, query[:, None] if last and query is not None
                                                              else every_row)
        logits = self.ln_final(x) @ self.W_U  # (B, T, N), or (B, 1, N) at the query
        return (logits if query is None else logits[:, 0]), cache

    def forward(self, tokens: torch.Tensor, query: torch.Tensor | None = None) -> torch.Tensor:
        return self.run_with_cache(tokens, query)[0]

    def matrices(self) -> dict[str, torch.Tensor]:
        return {}


class TransformerSpec(ModelSpec):
    """A small causal transformer: layers, heads, embeddings and positional schemes configurable."""

    name = "transformer"
    config = TransformerConfig

    def build(self, cfg: TransformerConfig, d_vocab: int, n_ctx: int, d_in: int | None = None) -> Transformer:
        return Transformer(cfg, d_vocab, n_ctx, d_in)

    def reads(self, cfg: TransformerConfig) -> str:
        return "inputs" if cfg.embedding == "linear" else "tokens"

    def validate(self, cfg: TransformerConfig, d_vocab: int, n_ctx: int) -> None:
        require(
            ("model.n_ctx", cfg.n_ctx >= 0, "must be >= 0 (0: the task's longest sequence)"),
            ("model.n_ctx", not cfg.n_ctx or n_ctx <= cfg.n_ctx,
             f"is {cfg.n_ctx}, but the task's sequences are up to {n_ctx} positions long"),
            ("model.n_layers", cfg.n_layers >= 1, "must be >= 1"),
            ("model.n_heads", cfg.n_heads >= 1, "must be >= 1"),
            ("model.embedding", cfg.embedding in EMBEDDINGS, f"must be one of {', '.join(EMBEDDINGS)}"),
            ("model.positional", cfg.positional in POSITIONAL, f"must be one of {', '.join(POSITIONAL)}"),
            ("model.positional", cfg.positional != "onehot_abs" or cfg.embedding == "onehot",
             "onehot_abs concatenates a one-hot position and needs model.embedding=onehot (use learned_abs)"),
            ("model.d_model", cfg.embedding == "onehot" or cfg.d_model >= 1, "must be >= 1"),
            ("model.prev_token", not (cfg.prev_token and cfg.embedding == "linear"),
             "adds the previous token's embedding; model.embedding=linear reads real-valued inputs, not tokens"),
            ("model.d_head", cfg.d_head >= 0, "must be >= 0 (0 means d_model // n_heads)"),
            ("model.init_std", cfg.init_std > 0, "must be > 0"),
        )
        d_model = residual_width(cfg, d_vocab, cfg.n_ctx or n_ctx)
        d_head = head_width(cfg, d_model)
        d_key = d_model if cfg.tied_kq else d_head
        require(
            ("model.n_heads", d_head >= 1, f"d_model = {d_model} leaves no width per head; set model.d_head"),
            ("model.positional", cfg.positional != "rotary" or d_key % 2 == 0,
             f"rotary needs an even key width, got {d_key} (change model.d_head or model.d_model)"),
        )


SPEC = TransformerSpec()
