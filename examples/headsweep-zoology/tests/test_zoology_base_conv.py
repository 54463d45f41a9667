"""The gated-convolution model: shapes, the query path, causality, a cache without attention, validation by key, and
packed training (a vmapped population over functional_call) that ends each member where training it alone would."""
import math
from pathlib import Path

import pytest
import torch

from headsweep_zoology.base_conv import SPEC, BaseConv, BaseConvConfig, kernel_lengths
from trainables import config, readouts
from trainables.cache import patterns
from trainables.errors import ConfigError
from trainables.train import Logger, train, train_members

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
D_VOCAB, N_CTX = 13, 12
VARIANTS = [BaseConvConfig(d_model=16), BaseConvConfig(d_model=8, n_layers=3, short_kernel=2, mlp=False),
            BaseConvConfig(d_model=8, short_kernel=0)]
IDS = ["default", "short2-3layers-nomlp", "all-long"]


def make(cfg: BaseConvConfig, seed: int = 0) -> BaseConv:
    torch.manual_seed(seed)
    return SPEC.build(cfg, D_VOCAB, N_CTX)


@pytest.mark.parametrize("cfg", VARIANTS, ids=IDS)
def test_shapes_cache_and_the_query_path(cfg):
    model = make(cfg)
    tokens = torch.randint(D_VOCAB, (3, 9))
    logits, cache = model.run_with_cache(tokens)
    assert logits.shape == (3, 9, D_VOCAB) and torch.equal(model(tokens), logits)
    assert list(cache) == [f"blocks.{i}.hook_out" for i in range(cfg.n_layers)]
    assert all(v.shape == (3, 9, cfg.d_model) for v in cache.values())
    query = torch.tensor([8, 0, 4])
    at_query, _ = model.run_with_cache(tokens, query)
    assert at_query.shape == (3, D_VOCAB) and torch.allclose(at_query, logits[torch.arange(3), query], atol=1e-6)


@pytest.mark.parametrize("cfg", VARIANTS, ids=IDS)
def test_changing_a_later_token_never_changes_an_earlier_output(cfg):
    model = make(cfg)
    tokens = torch.randint(D_VOCAB, (2, N_CTX))
    logits = model(tokens)
    for j in (0, 5, N_CTX - 1):
        changed = tokens.clone()
        changed[:, j] = (changed[:, j] + 1) % D_VOCAB
        again = model(changed)
        assert torch.allclose(logits[:, :j], again[:, :j], atol=1e-6)
        assert not torch.allclose(logits[:, j], again[:, j])  # and the change does reach position j


def test_a_long_filter_reaches_the_first_token_and_a_short_one_does_not():
    one_short_layer = make(BaseConvConfig(d_model=8, n_layers=1, short_kernel=3))
    tokens = torch.randint(D_VOCAB, (2, N_CTX))
    changed = tokens.clone()
    changed[:, 0] = (changed[:, 0] + 1) % D_VOCAB
    assert torch.allclose(one_short_layer(tokens)[:, 3:], one_short_layer(changed)[:, 3:], atol=1e-6)
    one_long_layer = make(BaseConvConfig(d_model=8, n_layers=1, short_kernel=0))
    assert not torch.allclose(one_long_layer(tokens)[:, -1], one_long_layer(changed)[:, -1])
    assert kernel_lengths(BaseConvConfig(n_layers=4, short_kernel=3), 20) == [3, 20, 3, 20]


def test_the_model_has_no_attention_and_no_probe_matrices():
    model = make(BaseConvConfig(d_model=8))
    _, cache = model.run_with_cache(torch.randint(D_VOCAB, (2, 7)))
    assert patterns(cache) == [] and not any("attn" in name for name in cache)
    assert model.matrices() == {} and readouts.matrices(model) == {}


@pytest.mark.parametrize("overrides, key", [({"d_model": 0}, "model.d_model"), ({"n_layers": 0}, "model.n_layers"),
                                            ({"short_kernel": -1}, "model.short_kernel"),
                                            ({"init_std": 0.0}, "model.init_std")])
def test_a_bad_model_config_names_its_full_dotted_key(overrides, key):
    with pytest.raises(ConfigError) as error:
        SPEC.validate(BaseConvConfig(**overrides), D_VOCAB, N_CTX)
    assert error.value.key == key


def test_the_activation_estimate_grows_with_every_dimension():
    base = SPEC.activation_floats(BaseConvConfig(), D_VOCAB, N_CTX, 4)
    assert base > 0
    for cfg, n_ctx, scored in [(BaseConvConfig(d_model=128), N_CTX, 4), (BaseConvConfig(n_layers=4), N_CTX, 4),
                               (BaseConvConfig(), 2 * N_CTX, 4), (BaseConvConfig(), N_CTX, 8)]:
        assert SPEC.activation_floats(cfg, D_VOCAB, n_ctx, scored) > base
    assert SPEC.activation_floats(BaseConvConfig(mlp=False), D_VOCAB, N_CTX, 4) < base


TINY = ["optim.max_steps=20", "eval.every=10", "eval.n_id=64", "eval.n_ood=64", "eval.n_examples=2"]


def assert_same_metrics(got: dict, expected: dict) -> None:
    assert set(got) - {"seconds"} == set(expected) - {"seconds"}
    for key, value in expected.items():
        if key != "seconds":
            assert got[key] == (pytest.approx(value, rel=1e-6, abs=1e-6) if isinstance(value, float) else value), key


def test_packed_members_end_where_each_would_alone():
    """Two members that differ in seed and training keys train as one vmapped population (population.Stack): each
    ends with the metrics and weights it gets alone. In float64, as the repo's own check of models with LayerNorm:
    a batched matmul rounds differently from a single one, and Adam can turn that into a visible step."""
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        cfgs = [config.load(CONFIGS / "debug_base_conv.yaml", TINY + extra)
                for extra in (["seed=0"], ["seed=1", "task.n_train_keys=5"])]
        final = {}
        packed = train_members(cfgs, [Logger(), Logger()], [None, None],
                               on_checkpoint=lambda staged: final.update(staged))
        for index, cfg in enumerate(cfgs):
            saved = {}
            alone = train(cfg, on_checkpoint=lambda state: saved.update(state))
            assert_same_metrics(packed[index].metrics, alone.metrics)
            assert final[index]["step"] == saved["step"] == 20
            for name, value in saved["model"].items():
                assert (final[index]["model"][name] - value).abs().max() <= 1e-8, name
        assert packed[0].metrics["ood/acc"] != packed[1].metrics["ood/acc"]  # two different runs, not one twice
    finally:
        torch.set_default_dtype(default)


@pytest.mark.parametrize("name, attention", [("debug_mqar.yaml", True), ("debug_base_conv.yaml", False)])
def test_a_short_run_of_each_debug_config_measures_what_its_model_has(name, attention):
    result = train(config.load(CONFIGS / name, TINY))
    metrics = result.metrics
    assert metrics["status"] == "completed" and metrics["steps"] == 20
    assert all(math.isfinite(metrics[k]) for k in ("ood/acc", "id/acc", "ood/in_context_rate", "data/n_train_keys"))
    assert ("ood/attn_value_share" in metrics) == attention and ("id/attn_value_share" in metrics) == attention
    assert ("patterns" in result.arrays) == attention and result.arrays["tokens"].shape[0] == 2
