"""The practical transformer (SPEC §3): shapes, causality, attention readable from the cache, the query-only path equal
to the full one, and every option builds and trains."""
import itertools

import pytest
import torch

from trainables import config
from trainables.cache import pattern_at, patterns
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


@pytest.mark.parametrize("cfg", VARIANTS[::5],
                         ids=lambda c: f"{c.embedding}-{c.positional}-tied{c.tied_kq}-prev{c.prev_token}")
def test_shapes_and_attention_patterns(cfg):
    model = make(cfg)
    tokens = torch.randint(N, (3, 9))
    logits, cache = model.run_with_cache(tokens)
    assert logits.shape == (3, 9, N) and len(patterns(cache)) == cfg.n_layers
    assert list(cache) == [f"blocks.{i}.attn.hook_pattern" for i in range(cfg.n_layers)]
    for p in patterns(cache):
        assert p.shape == (3, cfg.n_heads, 9, 9)
        assert torch.allclose(p.sum(-1), torch.ones(3, cfg.n_heads, 9))
        assert (p.triu(diagonal=1) == 0).all()  # no attention to later positions


@pytest.mark.parametrize("cfg", VARIANTS,
                         ids=lambda c: (f"{c.embedding}-{c.positional}-tied{c.tied_kq}-prev{c.prev_token}"
                                        f"-h{c.n_heads}-mlp{c.mlp}"))
def test_changing_a_later_token_never_changes_an_earlier_output(cfg):
    model = make(cfg)
    tokens = torch.randint(N, (2, 10))
    logits = model(tokens)
    for j in (3, 7):
        changed = tokens.clone()
        changed[:, j] = (changed[:, j] + 1) % N
        logits2 = model(changed)
        assert torch.allclose(logits[:, :j], logits2[:, :j], atol=1e-6)
        assert not torch.allclose(logits[:, j:], logits2[:, j:])  # and the change does reach position j


@pytest.mark.parametrize("cfg", VARIANTS[1::3],
                         ids=lambda c: f"{c.embedding}-{c.positional}-tied{c.tied_kq}-h{c.n_heads}-mlp{c.mlp}")
def test_the_query_path_equals_the_query_rows_of_the_full_run(cfg):
    """With `query`, the last layer and the unembedding run at the query only: same numbers, fewer of them."""
    model = make(TransformerConfig(**{**vars(cfg), "n_layers": 2}))
    tokens = torch.randint(N, (4, 8))
    query = torch.tensor([7, 3, 5, 0])
    rows = torch.arange(4)
    logits, cache = model.run_with_cache(tokens, query)
    full_logits, full_cache = model.run_with_cache(tokens)
    assert logits.shape == (4, N) and cache["blocks.1.attn.hook_pattern"].shape == (4, cfg.n_heads, 1, 8)
    assert torch.allclose(logits, full_logits[rows, query], atol=1e-6)
    for layer in (0, 1):  # pattern_at reads the query row wherever the layer ran
        assert torch.allclose(pattern_at(cache, layer, query), pattern_at(full_cache, layer, query), atol=1e-6)
    assert torch.allclose(pattern_at(full_cache, 1, query), full_cache["blocks.1.attn.hook_pattern"][rows, :, query])


def test_onehot_width_is_the_sum_of_its_parts():
    assert residual_width(TransformerConfig(positional="onehot_abs", prev_token=True), N, L) == N + L + N
    assert residual_width(TransformerConfig(positional="rotary"), N, L) == N
    assert residual_width(TransformerConfig(embedding="learned", d_model=40), N, L) == 40


@pytest.mark.parametrize("positional", POSITIONAL)
def test_every_positional_scheme_trains(positional):
    """Training lowers the ID loss far below chance (log N) within a few hundred steps, for each scheme."""
    overrides = [f"model.positional={positional}", "optim.max_steps=150", "eval.every=150", "eval.n_id=128",
                 "eval.n_ood=64", "task.n_pairs_per_cell=1"]
    if positional != "onehot_abs":
        # without absolute positions, a previous-token feature helps it learn fast
        overrides += ["model.prev_token=true"]
    result = train(config.load(CONFIGS / "debug.yaml", overrides))
    assert result.metrics["id/loss"] < 0.5 * torch.log(torch.tensor(12.0)).item()
    assert result.metrics["status"] == "completed" and result.metrics["steps"] == 150


def test_random_absolute_positions_are_frozen_and_drawn_from_the_seed():
    """random_abs (Wang & Sato's APE): a buffer, not a parameter, so no gradient reaches it and no optimizer moves it;
    the same seed draws the same positions, another seed others; checkpoints carry it."""
    cfg = TransformerConfig(embedding="learned", positional="random_abs", d_model=24)
    model = make(cfg, seed=0)
    assert "W_pos" in dict(model.named_buffers()) and "W_pos" not in dict(model.named_parameters())
    assert not model.W_pos.requires_grad and "W_pos" in model.state_dict()
    before = model.W_pos.clone()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.randint(N, (2, L))).sum().backward()
    optimizer.step()
    assert model.W_pos.grad is None and torch.equal(model.W_pos, before)
    assert torch.equal(make(cfg, seed=0).W_pos, before) and not torch.equal(make(cfg, seed=1).W_pos, before)
    assert model.W_pos.norm(dim=1).mean().item() == pytest.approx(1.0, abs=0.2)  # N(0, 1/d): norm ~1 per position
