"""The MQAR task: its batches (shapes, which keys each split draws, targets that are the values paired with the keys
earlier in the sequence, draws from the generator only), its validation errors by key, its metrics, and how headsweep
finds it (entry point, module path) with the Task defaults derived from its knob."""
import dataclasses
from importlib.metadata import PackageNotFoundError, distribution

import pytest
import torch
from omegaconf import OmegaConf

from headsweep_zoology import mqar
from headsweep_zoology.data import CONTEXT, QUERY, MqarConfig, pair_of_query, query_positions, seq_len
from trainables import config
from trainables.errors import ConfigError
from trainables.tasks import PAD_LABEL, TASKS, view_of

TASK = mqar.TASK
CFG = MqarConfig(n_keys=20, n_values=12, n_pairs=5, n_queries=3, n_train_keys=9)
VARIANTS = [CFG, dataclasses.replace(CFG, teacher_forcing=True), dataclasses.replace(CFG, n_test_keys=6),
            dataclasses.replace(CFG, n_queries=5, n_pairs=5, n_train_keys=5, n_keys=10)]


def draw(cfg=CFG, n=64, split="train", seed=0):
    return TASK.sample(cfg, n, torch.Generator().manual_seed(seed), split)


def pairs(cfg, batch):
    """(B, P) keys and values of each sequence's context."""
    return batch.tokens[:, 0 : 2 * cfg.n_pairs : 2], batch.tokens[:, 1 : 2 * cfg.n_pairs : 2]


@pytest.mark.parametrize("cfg", VARIANTS, ids=["plain", "teacher_forcing", "n_test_keys", "all_keys_asked"])
@pytest.mark.parametrize("split", ["train", "heldout"])
def test_a_batch_has_the_shapes_dtypes_and_labels_headsweep_reads(cfg, split):
    TASK.validate(cfg)
    batch = draw(cfg, split=split)
    d_vocab, n_ctx = TASK.dims(cfg)
    assert batch.tokens.shape == batch.targets.shape == batch.loss_mask.shape == batch.labels.shape == (64, n_ctx)
    assert n_ctx == seq_len(cfg) and d_vocab == 1 + cfg.n_keys + cfg.n_values
    assert batch.tokens.dtype == batch.targets.dtype == batch.labels.dtype == torch.long
    assert batch.loss_mask.dtype == torch.bool and batch.query is None and batch.info == {}
    assert 1 <= batch.tokens.min() and batch.tokens.max() < d_vocab  # token 0 (padding) is never drawn
    assert torch.equal(batch.loss_mask, batch.labels == QUERY)
    assert (batch.loss_mask.sum(1) == cfg.n_queries).all() and not TASK.query_only(cfg)
    assert (batch.labels[:, : 2 * cfg.n_pairs] == CONTEXT).all()
    assert torch.equal(batch.loss_mask.nonzero()[:, 1].reshape(64, -1)[0], query_positions(cfg))
    padded = TASK.sample(cfg, 64, torch.Generator().manual_seed(0), split, pad_to=n_ctx + 3)
    assert padded.tokens.shape == (64, n_ctx + 3) and (padded.labels[:, n_ctx:] == PAD_LABEL).all()
    assert torch.equal(padded.scored_targets(), batch.scored_targets())


@pytest.mark.parametrize("cfg", VARIANTS, ids=["plain", "teacher_forcing", "n_test_keys", "all_keys_asked"])
def test_training_keys_come_from_the_first_n_train_keys_and_ood_keys_never_do(cfg):
    train_keys, train_values = pairs(cfg, draw(cfg, n=512))
    assert train_keys.min() >= 1 and train_keys.max() <= cfg.n_train_keys
    assert len(train_keys.unique()) == cfg.n_train_keys  # every training key is used
    held = cfg.n_test_keys or cfg.n_keys - cfg.n_train_keys
    ood_keys, ood_values = pairs(cfg, draw(cfg, n=512, split="heldout"))
    assert ood_keys.min() == cfg.n_keys - held + 1 and ood_keys.max() == cfg.n_keys  # the last `held` keys, all
    assert ood_keys.min() > cfg.n_train_keys
    for values in (train_values, ood_values):  # values: every value token, in either split
        assert values.min() == cfg.n_keys + 1 and values.max() == cfg.n_keys + cfg.n_values
    for keys in (train_keys, ood_keys):  # distinct keys within a sequence
        assert (keys.sort(1).values.diff(dim=1) > 0).all()


@pytest.mark.parametrize("cfg", VARIANTS, ids=["plain", "teacher_forcing", "n_test_keys", "all_keys_asked"])
@pytest.mark.parametrize("split", ["train", "heldout"])
def test_each_target_is_the_value_paired_with_its_query_key_earlier_in_the_sequence(cfg, split):
    batch = draw(cfg, split=split)
    rows = query_positions(cfg)
    for tokens, targets in zip(batch.tokens.tolist(), batch.targets.tolist()):
        context = dict(zip(tokens[0 : 2 * cfg.n_pairs : 2], tokens[1 : 2 * cfg.n_pairs : 2]))
        asked = [tokens[r] for r in rows.tolist()]
        assert len(set(asked)) == cfg.n_queries and set(asked) <= set(context)  # distinct keys of the context
        assert [targets[r] for r in rows.tolist()] == [context[k] for k in asked]
        if cfg.teacher_forcing:  # each query but the last is followed by its answer
            assert [tokens[r + 1] for r in rows.tolist()[:-1]] == [context[k] for k in asked[:-1]]
    assert torch.equal(batch.tokens.gather(1, 2 * pair_of_query(cfg, batch) + 1), batch.targets[:, rows])


def test_queries_are_in_random_order_and_values_repeat():
    batch = draw(dataclasses.replace(CFG, n_queries=5), n=256)
    order = pair_of_query(dataclasses.replace(CFG, n_queries=5), batch)
    assert len({tuple(o) for o in order.tolist()}) > 50  # not one fixed order
    _, values = pairs(CFG, batch)
    assert any(len(set(v)) < CFG.n_pairs for v in values.tolist())  # drawn with replacement


def test_a_batch_is_a_function_of_the_generator_alone():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    a, b = draw(seed=7), draw(seed=7)
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is never touched
    assert all(torch.equal(getattr(a, f), getattr(b, f)) for f in ("tokens", "targets", "loss_mask", "labels"))
    assert not torch.equal(a.tokens, draw(seed=8).tokens)


@pytest.mark.parametrize("overrides, key", [
    ({"n_pairs": 0}, "task.n_pairs"),
    ({"n_queries": 6}, "task.n_queries"),
    ({"n_queries": 0}, "task.n_queries"),
    ({"n_values": 0}, "task.n_values"),
    ({"n_train_keys": 4}, "task.n_train_keys"),  # fewer than n_pairs
    ({"n_train_keys": 16}, "task.n_train_keys"),  # leaves 4 held-out keys < n_pairs = 5
    ({"n_train_keys": 12, "n_test_keys": 10}, "task.n_train_keys"),  # overlaps the held-out keys
    ({"n_test_keys": 3}, "task.n_test_keys"),
    ({"n_keys": 9, "n_train_keys": 5}, "task.n_keys"),
])
def test_a_bad_config_names_its_full_dotted_key(overrides, key):
    with pytest.raises(ConfigError) as error:
        TASK.validate(dataclasses.replace(CFG, **overrides))
    assert error.value.key == key and str(error.value).startswith(f"{key}: ")


def test_the_limits_themselves_are_valid():
    for overrides in ({"n_train_keys": 5}, {"n_train_keys": 15}, {"n_train_keys": 14, "n_test_keys": 6},
                      {"n_queries": 5}):
        TASK.validate(dataclasses.replace(CFG, **overrides))


def load_transformer(**task):
    """A whole config of the task (by module path: no install needed) with a small transformer."""
    return config.from_layers([OmegaConf.create({"task": {"name": "headsweep_zoology.mqar:TASK", **task},
                                                 "model": {"name": "transformer", "n_layers": 2},
                                                 "logging": {"wandb": False}})])


def test_a_whole_config_with_a_bad_knob_is_refused_by_key():
    with pytest.raises(ConfigError, match=r"^task\.n_train_keys: "):
        load_transformer(n_keys=16, n_pairs=4, n_train_keys=14)


def _installed() -> bool:
    try:
        distribution("headsweep-zoology")
        return True
    except PackageNotFoundError:
        return False


@pytest.mark.skipif(not _installed(), reason="pip install examples/headsweep-zoology registers the entry points")
def test_headsweep_finds_the_task_and_the_model_by_their_entry_points():
    from headsweep_zoology import base_conv
    from trainables.models import MODELS

    assert "mqar" in TASKS and TASKS["mqar"] is TASK
    assert "base_conv" in MODELS and MODELS["base_conv"] is base_conv.SPEC
    assert TASKS.source("mqar").origin.startswith("package headsweep-zoology")


def test_headsweep_finds_the_task_by_module_path():
    assert TASKS["headsweep_zoology.mqar:TASK"] is TASK
    cfg = load_transformer()
    assert isinstance(cfg.task, MqarConfig) and cfg.task.name == "headsweep_zoology.mqar:TASK"


def test_the_task_defaults_derive_from_its_knob_and_success_metric():
    assert TASK.eval_splits(CFG).keys() == {"id", "ood"} and TASK.eval_splits(CFG)["id"] == "train"
    assert TASK.diversity_axis == "data/n_train_keys" and not TASK.small_is_diverse
    assert TASK.diversity(CFG) == {"data/n_train_keys": 9.0}
    view = view_of(TASK)  # how the task is shown: its view's defaults, but for the axis's name
    assert view.headline == ("ood/acc", "id/acc", "data/n_train_keys") and view.diversity_label.startswith("distinct")
    shown = {m for section in view.dashboard for panel in section.panels for m in panel.metrics}
    assert {"ood/acc", "id/acc", "data/n_train_keys"} <= shown  # the base class's dashboard, from the headline
    assert config.select(load_transformer(), TASK.knobs[0]) == 16  # the knob is a key of the config


def _perfect_logits(cfg, batch):
    """(B, T, d_vocab) logits that predict every target."""
    return torch.nn.functional.one_hot(batch.targets, TASK.dims(cfg)[0]).double() * 10


def test_metrics_of_a_perfect_model_and_an_attention_probe_only_where_there_is_attention():
    batch = draw(split="heldout")
    logits = _perfect_logits(CFG, batch)
    metrics = TASK.metrics(CFG, "ood", batch, logits, {})  # a cache without attention
    assert metrics == {"ood/value_rate": 1.0, "ood/in_context_rate": 1.0, "ood/acc_first_query": 1.0,
                       "ood/acc_last_query": 1.0}
    B, T = batch.tokens.shape
    uniform = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
    induction = uniform.expand(B, 2, T, T).clone()  # head 1 attends to the matching value at every query
    rows, columns = query_positions(CFG), 2 * pair_of_query(CFG, batch) + 1
    induction[:, 1, rows] = 0.0
    induction[torch.arange(B)[:, None], 1, rows[None], columns] = 1.0
    cache = {"blocks.0.attn.hook_pattern": uniform.expand(B, 2, T, T), "blocks.1.attn.hook_pattern": induction}
    assert TASK.metrics(CFG, "ood", batch, logits, cache)["ood/attn_value_share"] == pytest.approx(1.0)
    cache["blocks.1.attn.hook_pattern"] = uniform.expand(B, 2, T, T)
    expected = (1 / (rows + 1).double()).mean().item()  # uniform attention: 1 / (position + 1) on any key
    assert TASK.metrics(CFG, "ood", batch, logits, cache)["ood/attn_value_share"] == pytest.approx(expected)


def test_metrics_tell_a_wrong_pair_from_a_non_value():
    batch = draw()
    logits = _perfect_logits(CFG, batch)
    rows = query_positions(CFG)
    wrong = logits.clone()
    wrong[:, rows] = 0
    wrong[:, rows, 1] = 10.0  # predicts key 1 at every query: not a value
    metrics = TASK.metrics(CFG, "id", batch, wrong, {})
    assert metrics["id/value_rate"] == 0.0 and metrics["id/in_context_rate"] == 0.0
    assert metrics["id/acc_first_query"] == 0.0
