"""The practical transformer (SPEC §3): shapes, causality, readable attention, and every option builds and trains."""
import itertools

import pytest
import torch

from trainables import config
from trainables.models.transformer import POSITIONAL, Transformer, TransformerConfig, residual_width
from trainables.train import train
from tests.conftest import CONFIGS

N, L = 12, 16  # even one-hot widths, as rotary needs
VARIANTS = [
    TransformerConfig(embedding=embedding, positional=positional, tied_kq=tied, prev_token=prev, n_heads=heads,
                      mlp=mlp, layer_norm=mlp, d_model=24)
    for embedding, positional, tied, prev, heads, mlp in itertools.product(
        ["onehot", "learned"], POSITIONAL, [True, False], [False, True], [1, 2], [False, True])
    if not (positional == "onehot_abs" and embedding == "learned")
]


def make(cfg: TransformerConfig, seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return Transformer(cfg, N, L)


@pytest.mark.parametrize("cfg", VARIANTS[::5], ids=lambda c: f"{c.embedding}-{c.positional}-tied{c.tied_kq}-prev{c.prev_token}")
def test_shapes_and_attention_patterns(cfg):
    model = make(cfg)
    tokens = torch.randint(N, (3, 9))
    logits, patterns = model.run(tokens)
    assert logits.shape == (3, 9, N) and len(patterns) == cfg.n_layers
    for p in patterns:
        assert p.shape == (3, cfg.n_heads, 9, 9)
        assert torch.allclose(p.sum(-1), torch.ones(3, cfg.n_heads, 9))
        assert (p.triu(diagonal=1) == 0).all()  # no attention to later positions


@pytest.mark.parametrize("cfg", VARIANTS, ids=lambda c: f"{c.embedding}-{c.positional}-tied{c.tied_kq}-prev{c.prev_token}-h{c.n_heads}-mlp{c.mlp}")
def test_changing_a_later_token_never_changes_an_earlier_output(cfg):
    model = make(cfg)
    tokens = torch.randint(N, (2, 10))
    logits, _ = model.run(tokens)
    for j in (3, 7):
        changed = tokens.clone()
        changed[:, j] = (changed[:, j] + 1) % N
        logits2, _ = model.run(changed)
        assert torch.allclose(logits[:, :j], logits2[:, :j], atol=1e-6)
        assert not torch.allclose(logits[:, j:], logits2[:, j:])  # and the change does reach position j


def test_forward_reads_the_query_row_of_run():
    model = make(TransformerConfig(n_layers=2, n_heads=2, positional="relative"))
    tokens = torch.randint(N, (4, 8))
    query = torch.tensor([7, 3, 5, 0])
    logits, attention = model(tokens, query)
    full_logits, patterns = model.run(tokens)
    assert torch.equal(logits, full_logits[torch.arange(4), query])
    assert torch.equal(attention[1], patterns[1][torch.arange(4), :, query])  # (B, H, T)


def test_onehot_width_is_the_sum_of_its_parts():
    assert residual_width(TransformerConfig(positional="onehot_abs", prev_token=True), N, L) == N + L + N
    assert residual_width(TransformerConfig(positional="rotary"), N, L) == N
    assert residual_width(TransformerConfig(embedding="learned", d_model=40), N, L) == 40


@pytest.mark.parametrize("positional", POSITIONAL)
def test_every_positional_scheme_trains(positional):
    """Training lowers the ID loss far below chance (log N) within a few hundred steps, for each scheme."""
    overrides = [f"model.positional={positional}", "optim.max_steps=150", "eval.every=150", "eval.n_id=128",
                 "eval.n_ood=64", "eval.n_pairs_per_cell=1"]
    if positional != "onehot_abs":
        overrides += ["model.prev_token=true"]  # without absolute positions, a previous-token feature helps it learn fast
    result = train(config.load(CONFIGS / "debug.yaml", overrides))
    assert result.metrics["id/loss"] < 0.5 * torch.log(torch.tensor(12.0)).item()
    assert result.metrics["status"] == "completed" and result.metrics["steps"] == 150
