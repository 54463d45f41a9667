"""Metric functions on hand-built batches: loss/accuracy, shortcut rates, attention scores, per-pair accuracy, W_KQ."""
import math

import pytest
import torch

from trainables.tasks.trigger_copy import metrics
from trainables.train import loss_and_accuracy
from trainables.tasks import Batch
from trainables.tasks.trigger_copy import TASK
from trainables.tasks.trigger_copy import data as tc
from trainables.tasks.lengths import LengthsConfig
from trainables.tasks.trigger_copy.data import TriggerCopyConfig

CFG = TriggerCopyConfig(vocab_size=16, max_len=14, n_triggers=3, lengths=LengthsConfig(low=2, high=5))
NEVER = -1  # a prediction no token equals


def draw(split, n, seed=0):
    return TASK.sample(CFG, n, torch.Generator().manual_seed(seed), split)


def subset(batch: Batch, mask: torch.Tensor) -> Batch:
    """The sequences of `batch` selected by a (B,) bool mask, as a Batch."""
    return Batch(batch.tokens[mask], batch.targets[mask], batch.loss_mask[mask], batch.labels[mask], batch.query[mask],
                 {k: v[mask] for k, v in batch.info.items()})


def token_at(batch: Batch, index: torch.Tensor) -> torch.Tensor:
    return batch.tokens[torch.arange(len(index)), index]


# --- loss and accuracy --------------------------------------------------------------------------------------------


def test_loss_and_accuracy_match_a_manual_computation():
    """Loss is the mean of -log softmax(logits)[target]; accuracy the fraction whose argmax is the target."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(6, 5, generator=g)
    targets = logits.argmax(-1).clone()
    targets[[1, 4]] = (targets[[1, 4]] + 1) % 5  # exactly 2 of 6 wrong
    manual_loss = sum(-math.log(math.exp(logits[i, targets[i]]) / sum(math.exp(x) for x in logits[i]))
                      for i in range(6)) / 6
    out = loss_and_accuracy(logits, targets, "ood")
    assert set(out) == {"ood/loss", "ood/acc"}
    assert out["ood/loss"] == pytest.approx(manual_loss, rel=1e-6)
    assert out["ood/acc"] == pytest.approx(4 / 6)


# --- shortcut rates -----------------------------------------------------------------------------------------------


def test_pseudo_rate_is_one_for_the_shortcut_answer():
    """Predicting the token at index (l1+l2)//2 + 1 (1-indexed position l̄ + 2) gives pseudo rate 1."""
    batch = draw("displaced", 64, seed=1)
    predictions = token_at(batch, (batch.info["l1"] + batch.info["l2"]) // 2 + 1)
    assert not torch.equal(predictions, batch.scored_targets())  # the shortcut answer differs from o on displaced data
    assert metrics.shortcut_rates(predictions, batch, l_min=2)["ood/pseudo_rate"] == 1.0


def test_pseudo_rate_counts_half_when_half_agree():
    """The rate is a fraction: matching the shortcut answer on every other sequence gives 1/2."""
    batch = draw("displaced", 64, seed=1)
    predictions = token_at(batch, (batch.info["l1"] + batch.info["l2"]) // 2 + 1)
    predictions[::2] = NEVER
    assert metrics.shortcut_rates(predictions, batch, l_min=2)["ood/pseudo_rate"] == 0.5


def test_pseudo_rate_only_counts_even_total_length():
    """Sequences with odd l1 + l2 have no pseudo answer: they do not enter the rate, whatever they predict."""
    batch = draw("all_pairs", 2 * len(tc.valid_pairs(CFG.max_len)), seed=2)
    even = (batch.info["l1"] + batch.info["l2"]) % 2 == 0
    assert 0 < int(even.sum()) < len(even)
    pseudo = token_at(batch, (batch.info["l1"] + batch.info["l2"]) // 2 + 1)
    right_on_even = torch.where(even, pseudo, torch.full_like(pseudo, NEVER))
    right_on_odd = torch.where(even, torch.full_like(pseudo, NEVER), pseudo)
    assert metrics.shortcut_rates(right_on_even, batch, l_min=2)["ood/pseudo_rate"] == 1.0
    assert metrics.shortcut_rates(right_on_odd, batch, l_min=2)["ood/pseudo_rate"] == 0.0


def test_accuracy_splits_by_whether_the_first_trigger_sits_where_training_put_one():
    """A model right exactly where l1 is in the support S = {2..5} (a position-local induction head) scores 1 on
    the seen positions and 0 on the new ones; the share of seen positions is counted over the batch."""
    batch = draw("displaced", 256, seed=3)
    seen = torch.isin(batch.info["l1"], torch.tensor([2, 3, 4, 5]))
    assert 0 < int(seen.sum()) < len(seen)
    result = metrics.accuracy_by_trigger_position(seen, batch, [2, 3, 4, 5])
    assert result == {"ood/seen_pos_share": pytest.approx(seen.double().mean().item()), "ood/acc_seen_pos": 1.0,
                      "ood/acc_new_pos": 0.0}
    only_new = metrics.accuracy_by_trigger_position(torch.ones(int((~seen).sum()), dtype=torch.bool),
                                                    subset(batch, ~seen), [2, 3, 4, 5])
    assert only_new["ood/seen_pos_share"] == 0.0 and math.isnan(only_new["ood/acc_seen_pos"])


def test_pseudo_rate_is_nan_without_even_sequences():
    """With only odd l1 + l2 there is nothing to count: the pseudo rate is NaN (the leftmost rate is still defined)."""
    batch = draw("all_pairs", len(tc.valid_pairs(CFG.max_len)), seed=3)
    odd = subset(batch, (batch.info["l1"] + batch.info["l2"]) % 2 == 1)
    out = metrics.shortcut_rates(odd.scored_targets(), odd, l_min=2)
    assert math.isnan(out["ood/pseudo_rate"])
    assert not math.isnan(out["ood/leftmost_rate"])


def test_leftmost_rate_reads_index_l_min_plus_one():
    """Predicting the token at index l_min + 1 (1-indexed position l_min + 2) gives leftmost rate 1, half of them
    1/2."""
    batch = draw("displaced", 64, seed=4)
    l_min = 3
    predictions = batch.tokens[:, l_min + 1].clone()
    assert metrics.shortcut_rates(predictions, batch, l_min=l_min)["ood/leftmost_rate"] == 1.0
    predictions[1::2] = NEVER
    assert metrics.shortcut_rates(predictions, batch, l_min=l_min)["ood/leftmost_rate"] == 0.5


def test_leftmost_rate_is_not_off_by_one():
    """Tokens at the neighbouring indices l_min and l_min + 2 are not what the leftmost rate reads."""
    batch = draw("displaced", 256, seed=5)
    l_min = 3
    for index in (l_min, l_min + 2):
        assert metrics.shortcut_rates(batch.tokens[:, index], batch, l_min=l_min)["ood/leftmost_rate"] < 0.5


# --- mechanism scores ---------------------------------------------------------------------------------------------


def attention_on(batch: Batch, heads: int, head: int, index: torch.Tensor, rows=None) -> torch.Tensor:
    """(B, H, T) attention, all mass on `index` in `head` (for `rows`, default all), on index 0 elsewhere."""
    B, T = batch.tokens.shape
    attention = torch.zeros(B, heads, T)
    attention[:, :, 0] = 1.0
    rows = torch.arange(B) if rows is None else rows
    attention[rows, head, :] = 0.0
    attention[rows, head, index[rows]] = 1.0
    return attention


def test_induction_score_is_max_over_heads():
    """All mass on the output index l1 + 1 in head 1 only gives induction score 1 (max over heads, not the mean)."""
    batch = draw("displaced", 32, seed=6)
    out = metrics.mechanism_scores(attention_on(batch, 3, 1, batch.info["l1"] + 1), batch)
    assert out["mech/induction_score"] == pytest.approx(1.0)
    assert out["mech/positional_score"] == pytest.approx(0.0)  # displaced: l1 + 1 is never the index l + 1


def test_induction_score_averages_over_sequences():
    """Mass on l1 + 1 in half the sequences gives induction score 1/2."""
    batch = draw("displaced", 32, seed=6)
    attention = attention_on(batch, 2, 0, batch.info["l1"] + 1, rows=torch.arange(0, 32, 2))
    assert metrics.mechanism_scores(attention, batch)["mech/induction_score"] == pytest.approx(0.5)


def test_positional_score_reads_index_half_total_plus_one():
    """All mass on index (l1+l2)//2 + 1 in head 2 gives positional score 1 and induction score 0."""
    batch = draw("displaced", 32, seed=7)
    out = metrics.mechanism_scores(attention_on(batch, 3, 2, (batch.info["l1"] + batch.info["l2"]) // 2 + 1), batch)
    assert out["mech/positional_score"] == pytest.approx(1.0)
    assert out["mech/induction_score"] == pytest.approx(0.0)


def test_positional_score_only_counts_even_total_length():
    """Positional mass on odd-l1+l2 sequences is ignored; with no even sequence the score is NaN."""
    batch = draw("all_pairs", len(tc.valid_pairs(CFG.max_len)), seed=8)
    even = (batch.info["l1"] + batch.info["l2"]) % 2 == 0
    attention = attention_on(batch, 2, 1, (batch.info["l1"] + batch.info["l2"]) // 2 + 1,
                             rows=torch.nonzero(even).flatten())
    assert metrics.mechanism_scores(attention, batch)["mech/positional_score"] == pytest.approx(1.0)
    odd = subset(batch, ~even)
    out = metrics.mechanism_scores(attention[~even], odd)
    assert math.isnan(out["mech/positional_score"])


# --- accuracy by pair ---------------------------------------------------------------------------------------------


def test_accuracy_by_pair_cells_are_per_pair_accuracy():
    """Cell [l1, l2] is the accuracy over the sequences with that pair; cells no sequence fell in are NaN."""
    pairs = tc.valid_pairs(CFG.max_len)
    batch = draw("all_pairs", 3 * len(pairs), seed=9)
    correct = torch.rand(len(batch.info["l1"]), generator=torch.Generator().manual_seed(10)) < 0.6
    matrix = metrics.accuracy_by_pair(correct, batch, CFG.max_len)
    assert matrix.shape == (CFG.max_len, CFG.max_len) and matrix.dtype == torch.float64
    valid = {tuple(p) for p in pairs.tolist()}
    for a in range(CFG.max_len):
        for b in range(CFG.max_len):
            if (a, b) in valid:
                mask = (batch.info["l1"] == a) & (batch.info["l2"] == b)
                assert matrix[a, b].item() == pytest.approx(correct[mask].double().mean().item()), (a, b)
            else:
                assert math.isnan(matrix[a, b].item()), (a, b)


def test_accuracy_by_pair_is_nan_for_valid_pairs_that_got_no_sequence():
    """A batch covering only some pairs leaves the other (valid) cells NaN, and all-correct cells at 1."""
    batch = draw("all_pairs", len(tc.valid_pairs(CFG.max_len)), seed=11)
    part = subset(batch, batch.info["l1"] <= 2)
    matrix = metrics.accuracy_by_pair(torch.ones(len(part.info["l1"]), dtype=torch.bool), part, CFG.max_len)
    assert bool((matrix[1:3, 1:CFG.max_len - 5] == 1.0).all())
    assert bool(torch.isnan(matrix[3:]).all())


# --- W_KQ peaks ---------------------------------------------------------------------------------------------------


def test_kq_peaks_read_the_positional_block_and_the_trigger_diagonal():
    """Positional peak = max of W_KQ[:L, :L]; induction peak = mean_w W_KQ[L+N+w, L+w] (rows key, columns query)."""
    L, N, n_trg = 10, 8, 3
    W = torch.zeros(L + 2 * N, L + 2 * N)
    for w, value in zip(range(n_trg), (2.0, 4.0, 6.0)):
        W[L + N + w, L + w] = value  # key: previous token w; query: current token w
        W[L + w, L + N + w] = 100.0  # the transposed entry: must not be read
    W[4, 9] = 5.0  # key p_5, query p_10
    W[L + N + n_trg, L + n_trg] = 50.0  # a non-trigger token's diagonal: must not be read
    W[L, 0] = 70.0  # outside the position-position block
    out = metrics.kq_peaks(W, vocab_size=N, max_len=L, n_triggers=n_trg)
    assert out == {"mech/kq_positional_peak": pytest.approx(5.0), "mech/kq_induction_peak": pytest.approx(4.0)}
