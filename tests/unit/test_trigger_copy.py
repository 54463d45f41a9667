"""Trigger-copy generator (SPEC §1): sequence geometry per split, OOD protocols, reproducibility, marginals."""
import math
from collections import Counter

import pytest
import torch

from trainables.tasks.trigger_copy import TASK
from trainables.tasks.trigger_copy import data as tc
from trainables.tasks.lengths import LengthsConfig, distribution
from trainables.tasks.trigger_copy.data import FILLER, OUTPUT, PAD, QUERY, TRIGGER, TriggerCopyConfig

CONFIGS = {
    "paper": TriggerCopyConfig(),  # N=32, L=36, N_trg=4, Unif{3..15}
    "small_power": TriggerCopyConfig(vocab_size=10, max_len=20, n_triggers=3,
                                     lengths=LengthsConfig(family="power", low=1, high=7, exponent=2.0)),
    "weights": TriggerCopyConfig(vocab_size=12, max_len=24, n_triggers=5,
                                 lengths=LengthsConfig(family="weights", weights=[0, 2, 0, 1, 0, 0, 3])),
}


def draw(cfg, n, split="train", seed=0):
    return TASK.sample(cfg, n, torch.Generator().manual_seed(seed), split)


def check_geometry(cfg: TriggerCopyConfig, batch) -> None:
    """Every sequence is (f_1..f_l1, t, o, g_1..g_l2, t) then padding, with labels to match."""
    n_trg = cfg.n_triggers
    B, width = batch.tokens.shape
    assert batch.labels.shape == batch.targets.shape == batch.loss_mask.shape == (B, width)
    assert batch.scored_targets().shape == batch.info["l1"].shape == batch.info["l2"].shape == (B,)
    assert width == int(batch.query.max()) + 1
    assert torch.equal(batch.loss_mask, batch.labels == QUERY)  # exactly one scored position: the query
    for b in range(B):
        l1, l2 = int(batch.info["l1"][b]), int(batch.info["l2"][b])
        T, q = l1 + l2 + 3, int(batch.query[b])
        tokens, labels = batch.tokens[b].tolist(), batch.labels[b].tolist()
        assert l1 >= 1 and l2 >= 1
        assert q == T - 1 and T <= cfg.max_len - 1
        trigger, output = tokens[l1], tokens[l1 + 1]
        assert 0 <= trigger < n_trg and tokens[q] == trigger
        assert output == int(batch.scored_targets()[b]) and n_trg <= output < cfg.vocab_size
        assert labels[l1] == TRIGGER and labels[l1 + 1] == OUTPUT and labels[q] == QUERY
        for i in range(T):
            if i not in (l1, l1 + 1, q):
                assert labels[i] == FILLER and n_trg <= tokens[i] < cfg.vocab_size
        assert all(t == 0 for t in tokens[T:]) and all(lab == PAD for lab in labels[T:])


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("split", tc.SPLITS)
def test_geometry_of_every_sequence(name, split):
    """Positions, tokens and labels of every sequence follow the layout of SPEC §1, in every split."""
    cfg = CONFIGS[name]
    check_geometry(cfg, draw(cfg, 300, split, seed=1))


@pytest.mark.parametrize("name", CONFIGS)
def test_train_split_has_equal_lengths_in_the_support(name):
    """train: l1 == l2 == l with l in S, so T = 2l + 3 <= L - 1."""
    cfg = CONFIGS[name]
    batch = draw(cfg, 500, "train", seed=2)
    support = set(distribution(cfg.lengths, cfg.n_triggers))
    assert torch.equal(batch.info["l1"], batch.info["l2"])
    assert set(batch.info["l1"].tolist()) == support  # 500 draws reach every length of these small supports
    assert int(batch.query.max()) + 1 <= cfg.max_len - 1


@pytest.mark.parametrize("name", CONFIGS)
def test_displaced_keeps_training_length_and_moves_the_trigger(name):
    """displaced: l1 + l2 = 2l with l in S \\ {min S}, l1 != l2, 1 <= l1 <= 2l - 1; every such (l, l1) occurs."""
    cfg = CONFIGS[name]
    batch = draw(cfg, 3000, "displaced", seed=3)
    support = sorted(distribution(cfg.lengths, cfg.n_triggers))
    total = batch.info["l1"] + batch.info["l2"]
    assert bool((total % 2 == 0).all())
    l = total // 2
    assert set(l.tolist()) == set(support[1:])
    assert bool((batch.info["l1"] != batch.info["l2"]).all())
    assert bool(((batch.info["l1"] >= 1) & (batch.info["l1"] <= 2 * l - 1)).all())
    seen = set(zip(l.tolist(), batch.info["l1"].tolist()))
    assert seen == {(m, a) for m in support[1:] for a in range(1, 2 * m) if a != m}


def test_displaced_falls_back_to_the_whole_support_when_it_has_one_length():
    """With S = {5}, S \\ {min S} is empty, so l = 5 always and l1 ranges over {1..9} \\ {5}."""
    cfg = TriggerCopyConfig(vocab_size=10, max_len=20, n_triggers=2,
                            lengths=LengthsConfig(family="weights", weights=[0, 0, 0, 0, 1.0]))
    batch = draw(cfg, 500, "displaced", seed=4)
    assert bool((batch.info["l1"] + batch.info["l2"] == 10).all())
    assert set(batch.info["l1"].tolist()) == {1, 2, 3, 4, 6, 7, 8, 9}
    check_geometry(cfg, batch)


@pytest.mark.parametrize("max_len", range(6, 31))
def test_valid_pairs_equals_brute_force(max_len):
    """valid_pairs(L) is every (l1, l2) with l1, l2 >= 1 and l1 + l2 + 3 <= L - 1, in lexicographic order."""
    brute = [(a, b) for a in range(1, max_len) for b in range(1, max_len) if a + b + 3 <= max_len - 1]
    assert [tuple(p) for p in tc.valid_pairs(max_len).tolist()] == brute


@pytest.mark.parametrize("repeats", [1, 3])
def test_all_pairs_covers_every_pair_equally(repeats):
    """all_pairs with n = k * P gives every valid pair exactly k times (stratified, not i.i.d.)."""
    cfg = TriggerCopyConfig(vocab_size=16, max_len=20, n_triggers=2)
    pairs = [tuple(p) for p in tc.valid_pairs(cfg.max_len).tolist()]
    batch = draw(cfg, repeats * len(pairs), "all_pairs", seed=5)
    counts = Counter(zip(batch.info["l1"].tolist(), batch.info["l2"].tolist()))
    assert counts == Counter({p: repeats for p in pairs})


@pytest.mark.parametrize("split", tc.SPLITS)
def test_pad_to_widens_the_batch_without_changing_a_draw(split):
    """Members of one shape batch together: padding to a fixed width changes no token, label or target."""
    cfg = CONFIGS["paper"]
    plain = draw(cfg, 64, split, seed=5)
    padded = TASK.sample(cfg, 64, torch.Generator().manual_seed(5), split, pad_to=cfg.max_len - 1)
    width = plain.tokens.shape[1]
    assert padded.tokens.shape == (64, cfg.max_len - 1)
    for name in ("tokens", "labels", "targets", "loss_mask"):
        assert torch.equal(getattr(padded, name)[:, :width], getattr(plain, name))
    assert (padded.labels[:, width:] == PAD).all() and not padded.loss_mask[:, width:].any()
    assert torch.equal(padded.scored_targets(), plain.scored_targets())
    with pytest.raises(ValueError, match="cannot pad"):
        TASK.sample(cfg, 64, torch.Generator().manual_seed(5), split, pad_to=width - 1 if width > 5 else 4)


@pytest.mark.parametrize("split", tc.SPLITS)
def test_same_seed_gives_identical_batches(split):
    """A batch is a function of the seed: every field is equal for equal seeds."""
    cfg = CONFIGS["paper"]
    a, b = draw(cfg, 200, split, seed=7), draw(cfg, 200, split, seed=7)
    for field in ("tokens", "labels", "targets", "loss_mask", "query"):
        assert torch.equal(getattr(a, field), getattr(b, field)), field
    assert a.info.keys() == b.info.keys() == {"l1", "l2"}
    assert all(torch.equal(a.info[k], b.info[k]) for k in a.info)


@pytest.mark.parametrize("split", tc.SPLITS)
def test_different_seed_gives_different_tokens(split):
    """Changing the seed changes the sampled tokens."""
    cfg = CONFIGS["paper"]
    a, b = draw(cfg, 200, split, seed=7), draw(cfg, 200, split, seed=8)
    assert a.tokens.shape != b.tokens.shape or not torch.equal(a.tokens, b.tokens)
    assert not torch.equal(a.targets, b.targets)


def test_train_length_frequencies_match_q():
    """Over 20000 train sequences, the frequency of each l is within 4 standard errors of q_l (power, a = 2)."""
    cfg = CONFIGS["small_power"]
    q = distribution(cfg.lengths, cfg.n_triggers)
    n = 20000
    counts = Counter(draw(cfg, n, "train", seed=9).info["l1"].tolist())
    assert set(counts) == set(q)
    for l, p in q.items():
        assert abs(counts[l] / n - p) <= 4 * math.sqrt(p * (1 - p) / n), l


def test_outputs_fillers_and_triggers_are_uniform():
    """Outputs and fillers are uniform over non-triggers, triggers uniform over triggers (4 standard errors)."""
    cfg = CONFIGS["small_power"]
    n = 20000
    batch = draw(cfg, n, "train", seed=10)

    def check_uniform(values, categories):
        counts = Counter(values)
        assert set(counts) == set(categories)  # every token appears
        total, p = len(values), 1 / len(categories)
        for c in categories:
            assert abs(counts[c] / total - p) <= 4 * math.sqrt(p * (1 - p) / total), c

    others = range(cfg.n_triggers, cfg.vocab_size)
    check_uniform(batch.scored_targets().tolist(), others)
    check_uniform(batch.tokens[batch.labels == FILLER].tolist(), others)
    check_uniform(batch.tokens[batch.labels == TRIGGER].tolist(), range(cfg.n_triggers))


def test_unknown_split_raises_value_error():
    """A split that is not train/displaced/all_pairs is a ValueError naming the split."""
    with pytest.raises(ValueError, match="split"):
        draw(CONFIGS["paper"], 4, "ood")
