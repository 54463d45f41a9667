"""Bigram task with triggers (SPEC §4): the bigram estimated from a text, the corpus, the generator's labels and
splits, the metrics on hand-built inputs, validation, and the threshold search over its diversity knob. The population
sampler (issue gpu-ready): a member's batches whatever it is packed with, each member's own output pool, sampled
triggers distributed as draws without replacement, and the same operations, none read back, for any member count."""
import dataclasses
import itertools
import math

import pytest
import torch

from sweep.storage.out_dir import OutDir
from sweep.search import bisection, loop
from sweep.search import studies as search_studies
from sweep.search.config import load_search
from tests.conftest import CONFIGS
from tests.unit.conftest import fake_executor
from tests.unit.samplers import assert_drawn_as_alone, draw_op_counts, same_batches
from trainables import config
from trainables.errors import ConfigError
from trainables.population import pack_key
from trainables.streams import GeneratorDraws, Streams
from trainables.tasks import Batch
from trainables.tasks.bigram_trigger import TASK, corpus, metrics
from trainables.tasks.bigram_trigger import bigram as bg
from trainables.tasks.bigram_trigger import data
from trainables.tasks.bigram_trigger.data import BigramTriggerConfig

SMALL = BigramTriggerConfig(bigram="synthetic", synthetic_vocab=12, synthetic_concentration=0.5, seq_len=64,
                            test_len=96, n_triggers=3, n_train_outputs=7)
TEXT = BigramTriggerConfig(seq_len=64, test_len=96, n_triggers=4, n_train_outputs=40)


def draw(cfg, n, split="train", seed=0):
    return TASK.sample(cfg, n, torch.Generator().manual_seed(seed), split)


def draws(seed=0) -> GeneratorDraws:
    return GeneratorDraws(torch.Generator().manual_seed(seed))


# --- the bigram and the corpus ----------------------------------------------------------------------------------------

def test_bigram_estimated_from_a_tiny_text_by_hand():
    """'aabaa': pairs aa, ab, ba, aa -> pi_b(.|a) = (2/3, 1/3), pi_b(.|b) = (1, 0); pi_u = (4/5, 1/5)."""
    bigram = bg.estimate("aabaa")
    assert bigram.alphabet == "ab"
    assert torch.allclose(bigram.pi_b, torch.tensor([[2 / 3, 1 / 3], [1.0, 0.0]], dtype=torch.float64))
    assert torch.allclose(bigram.pi_u, torch.tensor([0.8, 0.2], dtype=torch.float64))
    h_a = -(2 / 3) * math.log(2 / 3) - (1 / 3) * math.log(1 / 3)
    assert bg.entropy_floor(bigram) == pytest.approx(0.8 * h_a + 0.2 * 0.0)  # E_{pi_u} H(pi_b), by hand


def test_a_character_without_successor_gets_a_uniform_row():
    bigram = bg.estimate("aab")  # 'b' occurs only last
    assert torch.allclose(bigram.pi_b[1], torch.tensor([0.5, 0.5], dtype=torch.float64))


def test_the_shipped_text_bigram():
    text = corpus.read()
    bigram = bg.text_bigram()
    assert 1_100_000 <= len(text) <= 1_200_000 and not any(c.isdigit() for c in text)  # verse numbers are gone
    assert bigram.alphabet == "".join(sorted(set(text))) and bigram.vocab_size == 62
    assert torch.allclose(bigram.pi_b.sum(1), torch.ones(62, dtype=torch.float64))
    assert bigram.alphabet[int(bigram.by_frequency()[0])] == " "  # the most frequent character
    assert 2.0 < bg.entropy_floor(bigram) < 2.5  # nats: about 3.2 bits per character, as English bigrams go


def test_the_synthetic_bigram_is_a_function_of_its_seed_and_its_marginal_is_stationary():
    bigram = bg.synthetic(12, 0.5, seed=3)
    assert torch.allclose(bigram.pi_b.sum(1), torch.ones(12, dtype=torch.float64))
    assert torch.allclose(bigram.pi_u @ bigram.pi_b, bigram.pi_u, atol=1e-10)
    assert torch.equal(bg.synthetic(12, 0.5, seed=3).pi_b, bigram.pi_b)
    assert not torch.equal(bg.synthetic(12, 0.5, seed=4).pi_b, bigram.pi_b)


def test_corpus_cleaning_drops_headings_and_verse_numbers_and_stops_at_a_book():
    raw = ("\nGenesis 1\n\n  1 In the beginning God created the heaven and the\nearth.\n  2 And the earth was void.\n"
           "\nGenesis 2\n\n  1 Thus the heavens were finished.\n\nExodus 1\n\n  1 Now these are the names.\n")
    assert corpus.clean(raw, target_chars=10) == ("In the beginning God created the heaven and the earth.\n"
                                                  "And the earth was void.\n\nThus the heavens were finished.\n")
    assert corpus.clean(raw, target_chars=10**6).endswith("finished.\n\nNow these are the names.\n")


# --- the generator --------------------------------------------------------------------------------------------------

def test_labels_count_each_triggers_occurrences_and_recalled_targets_are_its_output():
    """draw_chain with triggers and outputs set by hand: at a trigger the target is its output and the label is the
    occurrence count of that trigger so far; everywhere else the label is 0 and the target a bigram draw."""
    bigram = bg.synthetic_bigram(12, 0.5, 0)
    triggers = torch.tensor([[0, 1, 2], [3, 4, 5]])
    outputs = torch.tensor([[7, 8, 0], [9, 3, 10]])  # outputs may be other triggers (0, 3), as in Bietti's code
    z, labels = data.draw_chain(data.Tables.of(bigram, "cpu"), triggers[None], outputs[None], 200, draws())
    z, labels = z[0], labels[0]  # member 0's (2, 201) and (2, 200)
    for b in range(2):
        output_of = dict(zip(triggers[b].tolist(), outputs[b].tolist()))
        seen = dict.fromkeys(output_of, 0)
        for t in range(200):
            current, target, label = int(z[b, t]), int(z[b, t + 1]), int(labels[b, t])
            if current in output_of:
                seen[current] += 1
                assert target == output_of[current] and label == seen[current]
            else:
                assert label == 0 and bigram.pi_b[current, target] > 0
        assert max(seen.values()) >= 3  # the check saw recalls


def test_ordinary_targets_follow_the_bigram():
    """Label-0 transitions out of a frequent token match its pi_b row (empirical frequencies within 0.03)."""
    cfg = BigramTriggerConfig(**{**vars(SMALL), "triggers": "fixed", "n_triggers": 1})
    batch = draw(cfg, 400, seed=1)
    bigram = bg.of(cfg)
    source = int(bigram.by_frequency()[1])  # the most frequent non-trigger token
    at = (batch.tokens == source) & (batch.labels == 0)
    frequencies = torch.bincount(batch.targets[at], minlength=12).double() / at.sum()
    assert at.sum() > 1000 and (frequencies - bigram.pi_b[source]).abs().max() < 0.03


@pytest.mark.parametrize("cfg", [SMALL, TEXT], ids=["synthetic", "text"])
def test_every_split_is_next_token_prediction_with_its_lengths_and_masks(cfg):
    for split in data.SPLITS:
        batch = draw(cfg, 16, split)
        T = cfg.test_len if split == "long" else cfg.seq_len
        assert batch.tokens.shape == batch.targets.shape == batch.labels.shape == (16, T)
        assert torch.equal(batch.targets[:, :-1], batch.tokens[:, 1:]) and batch.query is None
        recall_only = split in ("late_pairs", "long")
        assert torch.equal(batch.loss_mask, batch.labels >= 2 if recall_only else torch.ones(16, T, dtype=torch.bool))
        assert torch.equal(draw(cfg, 16, split).tokens, batch.tokens)  # a function of the seed
    recall = BigramTriggerConfig(**{**vars(cfg), "loss_on": "recall"})
    batch = draw(recall, 16)
    assert torch.equal(batch.loss_mask, batch.labels >= 2) and batch.loss_mask.any()


def test_fixed_triggers_are_the_most_frequent_and_sampled_ones_are_distinct():
    bigram = bg.text_bigram()
    tables = data.Tables.of(bigram, "cpu")
    fixed = data.draw_triggers(tables, 5, "fixed", 3, draws())[0]  # member 0's (3, 5)
    assert [bigram.alphabet[i] for i in fixed[0]] == [" ", "e", "t", "h", "a"] and torch.equal(fixed[0], fixed[2])
    sampled = data.draw_triggers(tables, 5, "sampled", 200, draws())[0]
    assert all(len(set(row.tolist())) == 5 for row in sampled) and len({tuple(r.tolist()) for r in sampled}) > 100


def test_ood_outputs_come_only_from_held_out_tokens_and_pools_nest():
    cfg = BigramTriggerConfig(**{**vars(SMALL), "n_triggers": 4})
    train_pool, held_out = data.output_pool(cfg, "train"), data.output_pool(cfg, "heldout")
    assert int(train_pool.sum()) == 7 and torch.equal(held_out, ~train_pool)
    bigger = data.output_pool(BigramTriggerConfig(**{**vars(cfg), "n_train_outputs": 9}), "train")
    assert (bigger | train_pool).equal(bigger)  # the knob only adds training outputs
    for split, pool in (("train", train_pool), ("heldout", held_out)):
        batch = draw(cfg, 64, split, seed=2)
        recalled = batch.targets[batch.labels >= 1]  # every output that followed a trigger
        assert len(recalled) > 100 and pool[recalled].all()
    triggers = torch.tensor([[0, 1, 2, 3]]).expand(500, 4)
    outputs = data.draw_outputs(data.Tables.of(bg.of(cfg), "cpu"), triggers[None], held_out[None], "bigram",
                                draws())[0]
    assert held_out[outputs].all() and (outputs != triggers).all()  # never its own trigger


def test_late_pairs_have_no_trigger_in_the_first_quarter():
    cfg = BigramTriggerConfig(**{**vars(TEXT), "triggers": "fixed"})
    batch = draw(cfg, 64, "late_pairs", seed=3)
    quarter = cfg.seq_len // 4
    triggers = bg.text_bigram().by_frequency()[:cfg.n_triggers]
    assert not torch.isin(batch.tokens[:, :quarter], triggers).any()
    assert (batch.labels[:, :quarter] == 0).all() and (batch.labels[:, quarter:] >= 2).any(1).all()
    assert torch.isin(batch.tokens[:, quarter:], triggers).any()  # they are back afterwards


# --- the population sampler (issue gpu-ready) ------------------------------------------------------------------------

MEMBERS = [dataclasses.replace(SMALL, n_train_outputs=k) for k in (7, 2, 9, 4)]  # the knob differs within a pack
KEYS = [11, 5, 2**40 + 3, 7]
PACKED = {"sampled-uniform": {}, "fixed-bigram-recall": {"triggers": "fixed", "outputs": "bigram", "loss_on": "recall"}}


def test_the_members_of_a_pack_differ_in_their_output_pools_only():
    shared = {f.name for f in dataclasses.fields(BigramTriggerConfig)} - set(TASK.member_fields)
    assert {"bigram", "seq_len", "test_len", "n_triggers", "triggers", "outputs", "loss_on"} <= shared
    load = lambda *overrides: pack_key(config.load(CONFIGS / "debug_bigram_trigger.yaml", list(overrides)))
    assert load("task.n_train_outputs=10", "task.n_readout=8") == load("task.n_train_outputs=40", "seed=1")
    assert load("task.seq_len=40") != load() and load("task.triggers=sampled") != load()


@pytest.mark.parametrize("settings", PACKED.values(), ids=PACKED.keys())
def test_a_member_draws_the_same_batches_whatever_it_is_packed_with(settings):
    members = [dataclasses.replace(cfg, **settings) for cfg in MEMBERS]
    batch = assert_drawn_as_alone(data.sampler, members, KEYS, 16)
    assert batch.tokens.shape == (len(members), 16, SMALL.seq_len)


def test_the_id_set_is_drawn_by_the_training_sampler():
    trained = data.sampler([SMALL], "cpu")(50, draws(3)).member(0)
    assert same_batches(draw(SMALL, 50, seed=3), trained)


@pytest.mark.parametrize("outputs", data.OUTPUTS)
def test_each_member_copies_outputs_from_its_own_pool_and_never_its_trigger(outputs):
    members = [dataclasses.replace(cfg, outputs=outputs) for cfg in MEMBERS]
    batch = data.sampler(members, "cpu")(64, Streams(KEYS))
    for p, cfg in enumerate(members):
        mine, pool = batch.member(p), data.output_pool(cfg, "train")
        recalled = mine.labels >= 1  # the targets that followed a trigger
        assert recalled.sum() > 100 and pool[mine.targets[recalled]].all()
        assert (mine.targets[recalled] != mine.tokens[recalled]).all()  # an output is never its own trigger
        assert len(mine.targets[recalled].unique()) == cfg.n_train_outputs  # and every token of the pool is used


def test_sampled_triggers_are_distributed_as_draws_without_replacement():
    """Gumbel-top-k against the exact inclusion probabilities of two successive draws without replacement from pi_u
    (P(i drawn) = p_i + sum_{j != i} p_j p_i / (1 - p_j)), and the first trigger against pi_u itself."""
    bigram = bg.synthetic(6, 1.0, seed=2)
    p = bigram.pi_u
    exact = torch.zeros(6, dtype=torch.float64)
    for i, j in itertools.permutations(range(6), 2):
        exact[[i, j]] += p[i] * p[j] / (1 - p[i])
    triggers = data.draw_triggers(data.Tables.of(bigram, "cpu"), 2, "sampled", 40_000, draws())[0]  # (n, 2)
    assert (triggers[:, 0] != triggers[:, 1]).all()
    included = torch.bincount(triggers.flatten(), minlength=6).double() / len(triggers)
    first = torch.bincount(triggers[:, 0], minlength=6).double() / len(triggers)
    assert (included - exact).abs().max() < 0.01 and (first - p).abs().max() < 0.01


def test_a_draw_dispatches_the_same_operations_for_any_member_count_and_reads_nothing_back():
    counts = draw_op_counts(data.sampler, [[MEMBERS[p % len(MEMBERS)] for p in range(members)]
                                                 for members in (1, 8, 64)], 16)
    assert counts[0] == counts[1] == counts[2]
    assert counts[0]["aten.searchsorted.Tensor"] <= SMALL.seq_len + 3  # one per time step of the chain


def test_a_draw_traces_as_one_graph():
    """fullgraph=True fails on any graph break: a value read back, data-dependent control flow. The eager backend
    compiles no kernels, and a short sequence keeps the unrolled chain small."""
    cfgs = [dataclasses.replace(cfg, seq_len=8) for cfg in MEMBERS[:3]]
    sampler = data.sampler(cfgs, "cpu")
    traced = torch.compile(sampler, fullgraph=True, backend="eager")(8, Streams(KEYS[:3]))
    assert same_batches(traced, sampler(8, Streams(KEYS[:3])))


# --- metrics on hand-built inputs -------------------------------------------------------------------------------

def _batch(tokens, labels, targets=None) -> Batch:
    tokens, labels = torch.tensor(tokens), torch.tensor(labels)
    targets = torch.tensor(targets) if targets is not None else torch.zeros_like(tokens)
    return Batch(tokens, targets, torch.ones_like(tokens, dtype=torch.bool), labels)


def test_recall_metrics_read_label_2_and_up_by_half():
    batch = _batch([[0] * 8], [[0, 2, 1, 2, 0, 3, 2, 0]], [[1, 1, 1, 1, 1, 1, 1, 1]])
    predicted = torch.tensor([[1, 1, 0, 0, 1, 1, 0, 1]])  # right at recall positions 1 and 5; wrong at 3 and 6
    logits = torch.nn.functional.one_hot(predicted, 4).float() * 10
    result = metrics.recall_metrics(logits, batch)
    assert result["head/acc"] == 0.5 and result["head/acc_early"] == 0.5 and result["head/acc_late"] == 0.5
    no_recall = torch.tensor([1, 0, 1, 0, 1, 0, 0, 1]).bool()
    assert torch.equal(metrics.accuracy_by_position(logits, batch).isnan(), no_recall)


def test_bigram_excess_is_the_loss_over_the_rows_entropies_by_hand():
    bigram = bg.estimate("aabaa")  # pi_b(.|a) = (2/3, 1/3), pi_b(.|b) = (1, 0)
    batch = _batch([[0, 0, 1]], [[0, 0, 2]], [[0, 1, 0]])  # label-0 positions: a -> a, a -> b
    logits = torch.log(torch.tensor([[[0.5, 0.5], [0.5, 0.5], [0.9, 0.1]]]))
    result = metrics.bigram_metrics(logits, batch, bigram)
    h_a = -(2 / 3) * math.log(2 / 3) - (1 / 3) * math.log(1 / 3)
    assert result["bigram/loss"] == pytest.approx(math.log(2))
    assert result["bigram/excess"] == pytest.approx(math.log(2) - h_a)
    # one label-0 position in each half (T = 3: t < 1 is early): the halves average to the whole
    assert result["bigram/loss_early"] == pytest.approx(math.log(2))
    assert (result["bigram/loss_early"] + result["bigram/loss_late"]) / 2 == pytest.approx(result["bigram/loss"])


def test_previous_token_probe_splits_early_and_late_and_picks_the_best_head():
    T = 8
    previous = torch.zeros(T, T)
    previous[0, 0] = 1
    previous[torch.arange(1, T), torch.arange(T - 1)] = 1  # every query on t - 1
    early_only = previous.clone()
    early_only[T // 2:] = 0
    early_only[T // 2:, 0] = 1  # late queries look at position 0 instead
    uniform = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
    first = torch.stack([uniform, early_only])[None]  # (1, H=2, T, T): head 1 is the previous-token head
    last = torch.stack([previous, previous])[None]  # the last layer is not a candidate
    hits = metrics.previous_token_hits([first, last])
    scores = metrics.previous_token_scores(hits)
    assert scores["attn/prev_token_early"] == 1.0 and scores["attn/prev_token_late"] == 0.0
    assert scores["attn/prev_token"] == pytest.approx(3 / 7)  # queries 1..7, of which 1..3 hit
    by_position = metrics.previous_token_by_position(hits)
    assert math.isnan(by_position[0]) and by_position[1:].tolist() == [1, 1, 1, 0, 0, 0, 0]


def test_induction_mass_is_attention_on_what_followed_the_earlier_occurrences():
    """Trigger 5 at positions 1 and 4 (label 2 at 4): the keys after its earlier occurrence are position 2."""
    batch = _batch([[0, 5, 7, 3, 5, 7]], [[0, 1, 0, 0, 2, 0]])
    second = torch.zeros(1, 1, 6, 6)
    second[0, 0, :, 0] = 1.0
    second[0, 0, 4] = torch.tensor([0.1, 0.1, 0.7, 0.1, 0.0, 0.0])
    first = torch.eye(6)[None, None]
    assert metrics.induction_mass([first, second], batch)["attn/induction"] == pytest.approx(0.7)


def test_first_step_is_when_a_metric_first_reaches_its_mark():
    history = [{"step": 50, "head/acc": 0.1}, {"step": 100, "head/acc": 0.6}, {"step": 150, "head/acc": 0.9}]
    assert metrics.first_step(history, "head/acc", lambda v: v >= 0.5) == 100
    assert math.isnan(metrics.first_step(history, "head/acc", lambda v: v >= 0.95))


# --- the task -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("override, key", [
    ("task.test_len=32", "task.test_len"),  # the debug config's seq_len: not longer
    ("task.n_train_outputs=61", "task.n_train_outputs"),
    ("task.n_train_outputs=1", "task.n_train_outputs"),
    ("task.bigram=shakespeare", "task.bigram"),
    ("task.triggers=random", "task.triggers"),
    ("task.n_triggers=61", "task.n_triggers"),
])
def test_bad_settings_fail_naming_their_key(override, key):
    with pytest.raises(ConfigError) as error:
        config.load(CONFIGS / "debug_bigram_trigger.yaml", [override])
    assert error.value.key == key


def test_dims_cover_the_longest_split_and_the_diversity_is_the_knob():
    cfg = config.load(CONFIGS / "debug_bigram_trigger.yaml", []).task
    assert TASK.dims(cfg) == (62, cfg.test_len)
    assert TASK.diversity(cfg)["data/n_train_outputs"] == cfg.n_train_outputs


def test_the_threshold_search_finds_the_smallest_number_of_training_outputs(tmp_path, monkeypatch):
    """configs/bigram_output_diversity_search.yaml with the real search loop and the fake executor of
    tests/unit/conftest.py (which writes ood/acc: the success metric is pointed at it)."""
    needed = 29
    calls = fake_executor(monkeypatch, lambda point, m: 1.0 if m["data/n_train_outputs"] >= needed else 0.0)
    overrides = ["search.success.metric=ood/acc", "search.success.seeds=[0]", "search.success.min_seeds=1"]
    base, search = load_search(CONFIGS / "bigram_output_diversity_search.yaml", overrides)
    all_slices = search_studies.slices(base, search, base.name)
    storage = search_studies.storage_for(None, tmp_path)
    studies = {sl.study_name: search_studies.open_study(sl, search, storage) for sl in all_slices}
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    for sl in all_slices:
        pooled = bisection.evidence(studies[sl.study_name].get_trials(), search.knob.key)
        assert bisection.minimal_value(sl.values, pooled, 1.0) == needed
    assert 0 < sum(map(len, calls)) <= len(all_slices) * search.budget.per_slice
