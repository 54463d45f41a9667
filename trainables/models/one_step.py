"""The one-step model of SPEC §2 (Kawata et al., Definition 3): one attention layer over fixed one-hot features.

x_t = [p_t ; e_{z_t} ; e_{z_{t-1}}] in R^D, D = L + 2N, and f(X) = W_V X softmax(X^T W_KQ x_T) in R^N. The
previous-token feature is hard-coded, so a single W_KQ can hold an induction head: key "previous token = w" matched
with query "current token = w". Algorithm 1 (one W_V step, then one W_KQ step) is its two training phases (SPEC
below); train.py runs them like any other phases.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from trainables.errors import require
from trainables.models import ModelSpec
from trainables.optim import SGD, Phase


@dataclass
class OneStepConfig:
    """The one-step model and its training algorithm (Algorithm 1: both weights start at zero)."""

    name: str = "one_step"
    eta_V: float = 1e3  # learning rate of the single gradient step on W_V
    eta_KQ: float = 1e4  # learning rate of the single gradient step on W_KQ, taken at the updated W_V
    n_samples_V: int = 8192  # M_V: fresh training sequences for the W_V step
    n_samples_KQ: int = 8192  # M_KQ: fresh training sequences for the W_KQ step


class OneStepModel(nn.Module):
    """f(X) = W_V X softmax(X^T W_KQ x_T), computed without materialising the one-hot X.

    Every x_t has exactly three hot features (position t, token z_t, previous token z_{t-1}), so x_t^T W_KQ x_T is a sum
    of 9 entries of W_KQ and X softmax(.) is a scatter of the attention weights onto those features: gathers and
    scatter-adds over (B, T, 3) indices instead of (B, T, D) one-hot tensors (D = L + 2N). Autograd differentiates
    them into the same gradients, as sparse adds. `OneHotOneStepModel` below is Definition 3 written out with X; tests
    and bench/core.py hold this model to it.
    """

    def __init__(self, vocab_size: int, max_len: int):
        super().__init__()
        self.d_vocab, self.n_ctx = vocab_size, max_len
        d_model = max_len + 2 * vocab_size
        self.W_KQ = nn.Parameter(torch.zeros(d_model, d_model))  # rows: key features, columns: query features
        self.W_V = nn.Parameter(torch.zeros(vocab_size, d_model))

    def features(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The hot features of x_t = [p_t ; e_{z_t} ; e_{z_{t-1}}]: indices (B, T, 3) into the D features, and weights
        (B, T, 3): 1, except 0 for the previous-token part at t = 0 (e_{z_0} = 0)."""
        B, T = tokens.shape
        L, N = self.n_ctx, self.d_vocab
        position = torch.arange(T, device=tokens.device).expand(B, T)
        previous = F.pad(tokens, (1, 0))[:, :T]  # (B, T) shifted right; t = 0 holds a placeholder weighted 0
        hot = torch.stack([position, L + tokens, L + N + previous], dim=-1)  # (B, T, 3)
        weight = torch.ones(B, T, 3, dtype=self.W_V.dtype, device=tokens.device)
        weight[:, 0, 2] = 0
        return hot, weight

    def run_with_cache(self, tokens: torch.Tensor, query: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Logits at the query (B, N) and the attention it paid, cached as `blocks.0.attn.hook_pattern` (B, 1, 1, T);
        positions after each sequence's query are padding and get no attention."""
        hot, weight = self.features(tokens)  # (B, T, 3) each
        B, T, _ = hot.shape
        rows = torch.arange(B, device=tokens.device)
        query_hot, query_weight = hot[rows, query], weight[rows, query]  # (B, 3): the features of x_T
        # (B, D): W_KQ x_T, the weighted sum of W_KQ's three columns of the query's features (a gather, not
        # F.embedding_bag, which vmap runs one member at a time)
        w_query = (self.W_KQ.T[query_hot] * query_weight[..., None]).sum(1)
        scores = (w_query.gather(1, hot.flatten(1)).view(B, T, 3) * weight).sum(-1)  # (B, T): x_t^T W_KQ x_T
        after_query = torch.arange(T, device=tokens.device)[None, :] > query[:, None]  # (B, T)
        attention = scores.masked_fill(after_query, float("-inf")).softmax(dim=-1)  # (B, T)
        context = torch.zeros(B, self.W_V.shape[1], dtype=self.W_V.dtype, device=tokens.device).scatter_add(
            1, hot.flatten(1), (attention[..., None] * weight).flatten(1))  # (B, D): X softmax(.)
        logits = context @ self.W_V.T  # (B, N)
        return logits, {"blocks.0.attn.hook_pattern": attention[:, None, None, :]}

    def forward(self, tokens: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        return self.run_with_cache(tokens, query)[0]

    def matrices(self) -> dict[str, torch.Tensor]:
        return {"W_KQ": self.W_KQ, "W_V": self.W_V}


class OneHotOneStepModel(OneStepModel):
    """Definition 3 as written: the one-hot X (B, T, D) materialised, then f(X) = W_V X softmax(X^T W_KQ x_T). The
    reference the gather formulation above is tested and benchmarked against; not used for training."""

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, T) tokens -> (B, T, D) features [p_t ; e_{z_t} ; e_{z_{t-1}}] with e_{z_0} = 0."""
        hot, weight = self.features(tokens)
        B, T, _ = hot.shape
        return torch.zeros(B, T, self.W_KQ.shape[0], dtype=self.W_V.dtype,
                           device=tokens.device).scatter_(2, hot, weight)

    def run_with_cache(self, tokens: torch.Tensor, query: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        X = self.embed(tokens)  # (B, T, D)
        rows = torch.arange(len(tokens), device=tokens.device)
        x_query = X[rows, query]  # (B, D)
        scores = torch.einsum("btd,bd->bt", X, x_query @ self.W_KQ.T)  # (B, T): x_t^T W_KQ x_T
        after_query = torch.arange(X.shape[1], device=tokens.device)[None, :] > query[:, None]  # (B, T)
        attention = scores.masked_fill(after_query, float("-inf")).softmax(dim=-1)  # (B, T)
        logits = torch.einsum("btd,bt->bd", X, attention) @ self.W_V.T  # (B, N)
        return logits, {"blocks.0.attn.hook_pattern": attention[:, None, None, :]}


class OneStepSpec(ModelSpec):
    """The theory's one-step model (W_KQ, W_V on one-hot features), trained by Algorithm 1's two phases."""

    name = "one_step"
    config = OneStepConfig
    needs_query = True
    uses_optim = False
    # Its two steps are already one large batch of gathers and scatter-adds each; vmapped, those fall back to slow
    # per-member loops (bench/population.py: packed 0.74x of one by one), so packed members run one after another.
    vectorize = False

    def build(self, cfg: OneStepConfig, d_vocab: int, n_ctx: int) -> OneStepModel:
        return OneStepModel(d_vocab, n_ctx)

    def validate(self, cfg: OneStepConfig, d_vocab: int, n_ctx: int) -> None:
        require(*((f"model.{k}", getattr(cfg, k) > 0, "must be > 0")
                  for k in ("eta_V", "eta_KQ", "n_samples_V", "n_samples_KQ")))

    def batch_sizes(self, cfg: OneStepConfig, optim) -> dict[str, int]:
        return {"model.n_samples_V": cfg.n_samples_V, "model.n_samples_KQ": cfg.n_samples_KQ}

    def phases(self, cfg: OneStepConfig, optim, model: OneStepModel) -> list[Phase]:
        """Algorithm 1: from W_KQ = W_V = 0, one plain gradient step on W_V, then one on W_KQ at the new W_V, each
        on fresh samples. Plain SGD without momentum makes each step exactly W <- W - eta * grad."""
        return [Phase(SGD([model.W_V], lr=cfg.eta_V), 1, cfg.n_samples_V),
                Phase(SGD([model.W_KQ], lr=cfg.eta_KQ), 1, cfg.n_samples_KQ)]

    def figures(self, arrays: dict) -> dict:
        """W_KQ (D x D, rows = key features, columns = query features) with the blocks of [p_t ; e_{z_t} ; e_{z_{t-1}}]:
        the shortcut is a peak in the position x position block, the induction head one in the (key prev token) x
        (query token) block (Lemma 7)."""
        if "W_KQ" not in arrays or "W_V" not in arrays:
            return {}
        from trainables import figures

        N = arrays["W_V"].shape[0]  # W_V: (N, D)
        L = arrays["W_KQ"].shape[0] - 2 * N
        blocks = [("position", L), ("token", N), ("prev token", N)]
        return {"mech/W_KQ": figures.block_matrix(arrays["W_KQ"], blocks, "One-step W_KQ", "key feature",
                                                  "query feature")}

    def images(self, arrays: dict) -> dict:
        if "W_KQ" not in arrays:
            return {}
        from trainables import figures

        W = np.asarray(arrays["W_KQ"], dtype=float)
        limit = max(float(np.abs(W).max()), 1e-12)  # symmetric: white is zero whatever the signs
        N = arrays["W_V"].shape[0]
        L = W.shape[0] - 2 * N
        return {"mech/W_KQ": (figures.heatmap_image(W, -limit, limit, "RdBu_r", cell=4),
                              f"W_KQ, rows key features, columns query features: blocks position (0-{L - 1}), token "
                              f"({L}-{L + N - 1}), previous token ({L + N}-{L + 2 * N - 1}); red > 0 > blue")}


SPEC = OneStepSpec()
