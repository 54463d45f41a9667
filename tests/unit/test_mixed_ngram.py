"""Mixed n-gram task (SPEC §6): the generator's invariants (the lazy rule where labelled lazy, the in-context target
where labelled in-context, the Bernoulli share), the OOD periods, the component metrics and the transition step on
hand-made curves. The population sampler (issue gpu-ready): a member's batches whatever it is packed with, per-member
distributions, and the same operations, none read back, for any member count."""
import dataclasses
import math

import pytest
import torch

from tests.conftest import CONFIGS
from tests.unit.samplers import assert_drawn_as_alone, draw_op_counts, same_batches
from trainables import config
from trainables.errors import ConfigError
from trainables.population import pack_key
from trainables.streams import GeneratorDraws, Streams
from trainables.tasks import TASKS
from trainables.tasks.mixed_ngram import data as mx
from trainables.tasks.mixed_ngram import metrics
from trainables.tasks.mixed_ngram.data import ICL, ICL_FIRST, LAZY, NOISE, PAD, MixedNgramConfig

CFG = MixedNgramConfig(n_lazy_tokens=4, n_icl_tokens=12, seq_len=24, alpha=0.4, period_low=2, period_high=5,
                       ood_period_high=12)


def draw(cfg, n, split="train", seed=0, pad_to=None):
    return TASKS["mixed_ngram"].sample(cfg, n, torch.Generator().manual_seed(seed), split, pad_to)


def sequences(batch) -> torch.Tensor:
    """(B, T + 1): the tokens read plus the last target."""
    return torch.cat([batch.tokens, batch.targets[:, -1:]], 1)


def test_the_rule_table_depends_on_rule_seed_only_and_on_all_three_tokens():
    table = mx.rule_table(CFG)
    assert table.shape == (4, 4, 4) and 0 <= table.min() and table.max() < 4
    assert torch.equal(table, mx.rule_table(MixedNgramConfig(n_lazy_tokens=4, alpha=0.9, seq_len=40)))
    assert not torch.equal(table, mx.rule_table(MixedNgramConfig(n_lazy_tokens=4, rule_seed=1)))
    for axis in range(3):  # changing any one of the three context tokens changes the answer somewhere
        assert (table != table.roll(1, dims=axis)).any()


def test_the_lazy_rule_holds_wherever_a_target_is_labelled_lazy():
    batch = draw(CFG, 400, seed=1)
    z, table, lazy = sequences(batch), mx.rule_table(CFG), batch.labels == LAZY
    rows, t = lazy.nonzero(as_tuple=True)  # position t predicts z_{t+1} from z_{t-2}, z_{t-1}, z_t
    assert (t >= 2).all() and len(rows) > 1000
    assert torch.equal(batch.targets[rows, t], table[z[rows, t - 2], z[rows, t - 1], z[rows, t]])
    # lazy sequences live in A, and about lazy_noise of their targets are fresh tokens (NOISE)
    lazy_rows = batch.info["in_context"] == 0
    assert (z[lazy_rows] < CFG.n_lazy_tokens).all()
    labels = batch.labels[lazy_rows][:, 2:]
    assert set(labels.unique().tolist()) == {NOISE, LAZY}
    assert (labels == NOISE).double().mean().item() == pytest.approx(CFG.lazy_noise, abs=0.03)


def test_the_in_context_target_is_the_token_after_the_most_recent_earlier_occurrence():
    batch = draw(CFG, 300, seed=2)
    z = sequences(batch)
    for b in (batch.info["in_context"] == 1).nonzero().flatten().tolist():
        k, seen = int(batch.info["period"][b]), {}
        assert CFG.period_low <= k <= CFG.period_high
        assert (z[b] >= CFG.n_lazy_tokens).all() and len(set(z[b, :k].tolist())) == k  # a distinct prefix of B
        for t in range(CFG.seq_len):
            token = int(z[b, t])
            if token in seen:
                assert batch.labels[b, t] == ICL and batch.targets[b, t] == z[b, seen[token] + 1]
            else:
                assert batch.labels[b, t] == ICL_FIRST
            seen[token] = t
    assert torch.equal(batch.loss_mask, (batch.labels == LAZY) | (batch.labels == ICL))


@pytest.mark.parametrize("alpha", [0.0, 0.1, 0.5, 1.0])
def test_the_in_context_share_of_sequences_is_alpha(alpha):
    cfg = MixedNgramConfig(alpha=alpha)
    share = draw(cfg, 4000, seed=3).info["in_context"].double().mean().item()
    assert share == pytest.approx(alpha, abs=0.025)  # 3.2 standard errors at alpha = 0.5


def test_ood_sequences_are_in_context_with_periods_never_seen_in_training():
    batch = draw(CFG, 500, "ood", seed=4)
    assert (batch.info["in_context"] == 1).all()
    periods = set(batch.info["period"].tolist())
    assert periods == set(range(CFG.period_high + 1, CFG.ood_period_high + 1))
    assert set(batch.labels.unique().tolist()) == {ICL_FIRST, ICL}


def test_a_batch_is_a_function_of_the_seed_and_padding_keeps_it():
    a, b, padded = draw(CFG, 64, seed=5), draw(CFG, 64, seed=5), draw(CFG, 64, seed=5, pad_to=30)
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, draw(CFG, 64, seed=6).tokens)
    assert torch.equal(padded.tokens[:, :CFG.seq_len], a.tokens) and (padded.labels[:, CFG.seq_len:] == PAD).all()
    assert torch.equal(padded.scored_targets(), a.scored_targets())


def test_component_metrics_slice_by_label():
    batch = draw(CFG, 50, seed=7)
    logits = torch.zeros(*batch.tokens.shape, CFG.vocab_size)
    logits.scatter_(2, batch.targets[..., None], 10.0)  # a perfect predictor...
    icl = batch.labels == ICL
    logits[icl] = 0.0  # ...except on in-context targets, where it is uniform
    result = metrics.component_metrics(logits, batch)
    assert result["lazy"][1] == 1.0 and result["lazy"][0] < 1e-3
    assert result["icl"][0] == pytest.approx(math.log(CFG.vocab_size))
    lazy_batch = draw(MixedNgramConfig(alpha=0.0), 8)
    only_lazy = metrics.component_metrics(torch.zeros(*lazy_batch.tokens.shape, 16), lazy_batch)
    assert only_lazy["lazy"][0] == pytest.approx(math.log(16))
    assert math.isnan(only_lazy["icl"][0]) and math.isnan(only_lazy["icl"][1])


def test_the_induction_score_reads_the_token_after_the_previous_occurrence():
    batch = draw(CFG, 20, "ood", seed=8)
    B, T = batch.tokens.shape
    ideal = torch.zeros(B, 1, T, T)  # one head that attends exactly where an induction head should
    for b in range(B):
        k = int(batch.info["period"][b])
        for t in range(T):
            ideal[b, 0, t, t - k + 1 if t >= k else t] = 1.0
    previous = torch.zeros(B, 1, T, T)
    previous[:, 0, torch.arange(1, T), torch.arange(T - 1)] = 1.0
    previous[:, 0, 0, 0] = 1.0
    cache = {"blocks.0.attn.hook_pattern": previous, "blocks.1.attn.hook_pattern": ideal}
    assert metrics.induction_score(cache, batch) == 1.0 and metrics.previous_token_score(cache, batch) == 1.0
    swapped = {"blocks.0.attn.hook_pattern": ideal, "blocks.1.attn.hook_pattern": previous}
    assert metrics.induction_score(swapped, batch) < 0.2  # k >= 6 here: t - k + 1 is never t - 1


# A population whose members differ in every member field: alpha, noise, rule table, training and OOD periods.
MEMBERS = [dataclasses.replace(CFG, alpha=alpha, lazy_noise=noise, rule_seed=seed, period_low=low, period_high=high,
                               ood_period_high=ood)
           for alpha, noise, seed, low, high, ood in [(0.1, 0.0, 0, 2, 3, 12), (0.5, 0.2, 1, 3, 6, 7),
                                                      (0.9, 0.5, 2, 5, 5, 10), (1.0, 0.1, 3, 2, 8, 9),
                                                      (0.0, 0.3, 4, 4, 7, 11)]]
KEYS = [11, 7, 2**40 + 3, 0, 5]


def test_the_members_of_a_pack_differ_in_distributions_only():
    shapes = {f.name for f in dataclasses.fields(MixedNgramConfig)} - set(TASKS["mixed_ngram"].member_fields)
    assert shapes == {"name", "n_lazy_tokens", "n_icl_tokens", "seq_len"}
    load = lambda *overrides: pack_key(config.load(CONFIGS / "debug_mixed_ngram.yaml", list(overrides)))
    assert load("task.alpha=0.1", "task.rule_seed=3", "task.period_high=3") == load("task.alpha=0.9", "seed=1")
    assert load("task.seq_len=20") != load()


def test_a_member_draws_the_same_batches_whatever_it_is_packed_with():
    batch = assert_drawn_as_alone(mx.sampler, MEMBERS, KEYS, 64)
    assert batch.tokens.shape == (len(MEMBERS), 64, CFG.seq_len)


def test_the_id_set_is_drawn_by_the_training_sampler():
    generator = torch.Generator().manual_seed(3)
    trained = mx.sampler([CFG], "cpu")(50, GeneratorDraws(generator)).member(0)
    assert same_batches(draw(CFG, 50, seed=3), trained)


def test_each_member_draws_from_its_own_distribution():
    batch = mx.sampler(MEMBERS, "cpu")(4000, Streams(KEYS))
    for p, cfg in enumerate(MEMBERS):
        mine = batch.member(p)
        in_context, period = mine.info["in_context"] == 1, mine.info["period"]
        assert in_context.double().mean().item() == pytest.approx(cfg.alpha, abs=0.025)
        if in_context.any():
            assert set(period[in_context].tolist()) == set(range(cfg.period_low, cfg.period_high + 1))
        assert (period[~in_context] == 0).all()
        lazy = mine.labels[~in_context][:, 2:]  # the targets of rule tokens or fresh ones
        if lazy.numel():
            assert (lazy == NOISE).double().mean().item() == pytest.approx(cfg.lazy_noise, abs=0.03)
        z, table = sequences(mine), mx.rule_table(cfg)  # the member's own rule where labelled lazy
        rows, t = (mine.labels == LAZY).nonzero(as_tuple=True)
        assert torch.equal(mine.targets[rows, t], table[z[rows, t - 2], z[rows, t - 1], z[rows, t]])
        assert set(mine.labels[in_context].unique().tolist()) <= {ICL_FIRST, ICL}
        assert set(mine.labels[~in_context].unique().tolist()) <= {NOISE, LAZY}
        assert torch.equal(mine.loss_mask, (mine.labels == LAZY) | (mine.labels == ICL))


def test_a_draw_dispatches_the_same_operations_for_any_member_count_and_reads_nothing_back():
    counts = draw_op_counts(mx.sampler, [[MEMBERS[p % len(MEMBERS)] for p in range(members)]
                                               for members in (1, 8, 64)], 16)
    assert counts[0] == counts[1] == counts[2]


def test_a_draw_traces_as_one_graph():
    """fullgraph=True fails on any graph break: a value read back, data-dependent control flow. The eager backend
    compiles no kernels, and a short sequence keeps the unrolled chain small."""
    cfgs = [dataclasses.replace(cfg, seq_len=8, n_icl_tokens=6, period_low=2, period_high=3, ood_period_high=4)
            for cfg in MEMBERS[:3]]
    sampler = mx.sampler(cfgs, "cpu")
    traced = torch.compile(sampler, fullgraph=True, backend="eager")(8, Streams(KEYS[:3]))
    assert same_batches(traced, sampler(8, Streams(KEYS[:3])))


STEPS = list(range(100, 2100, 100))  # 20 evaluations


def test_a_clean_drop_is_found_where_the_curve_crosses_the_midpoint():
    curve = [3.0] * 9 + [2.0, 0.5] + [0.05] * 9  # plateau, abrupt drop at steps 1000-1100
    assert metrics.drop_step(STEPS, curve) == 1100  # midpoint 1.525: first at or below it from 1100 on


def test_no_drop_gives_nan():
    flat = [3.0 + 0.05 * (-1) ** i for i in range(20)]
    assert math.isnan(metrics.drop_step(STEPS, flat))
    assert math.isnan(metrics.drop_step(STEPS, [3.0] * 10 + [2.0] * 10))  # a third off: not a drop
    assert math.isnan(metrics.drop_step(STEPS, [math.nan] * 20))


def test_a_noisy_curve_counts_the_drop_from_which_the_loss_stays_down():
    noise = torch.empty(20).uniform_(-0.2, 0.2, generator=torch.Generator().manual_seed(0)).tolist()
    curve = [3.0 + e for e in noise[:12]] + [0.1 + abs(e) / 4 for e in noise[12:]]
    curve[4] = 1.0  # a dip on the plateau, back up at the next evaluation: not the transition
    assert metrics.drop_step(STEPS, curve) == 1300


def test_a_rise_before_the_plateau_and_a_drop_before_the_first_evaluation():
    rise = [2.5, 2.9, 3.0, 3.0, 3.0, 0.2, 0.1]
    assert metrics.drop_step(STEPS[:7], rise) == 600  # the start level is the plateau's 3.0, not 2.5
    assert metrics.drop_step(STEPS[:3], [0.2, 0.1, 0.05]) == 200  # midpoint 0.125
    assert math.isnan(metrics.drop_step(STEPS[:3], [0.06, 0.05, 0.05]))  # a drop before the first evaluation: unseen


def test_the_transition_summary_of_a_history():
    history = [{"step": s, "lazy/loss": lazy, "icl/loss": icl} for s, lazy, icl in zip(
        STEPS, [1.4, 0.3] + [0.01] * 18, [3.0] * 11 + [0.4] + [0.01] * 8)]
    summary = TASKS["mixed_ngram"].summary(CFG, history)
    assert summary == {"lazy/fit_step": 200, "icl/transition_step": 1200, "icl/plateau_steps": 1000}
    no_icl = [{"step": r["step"], "lazy/loss": r["lazy/loss"], "icl/loss": math.nan} for r in history]
    assert math.isnan(TASKS["mixed_ngram"].summary(CFG, no_icl)["icl/plateau_steps"])


@pytest.mark.parametrize("override, key", [
    ("task.alpha=1.5", "task.alpha"),
    ("task.ood_period_high=10", "task.ood_period_high"),  # not beyond period_high = 10
    ("task.ood_period_high=21", "task.ood_period_high"),  # more than the 20 in-context tokens
    ("task.seq_len=30", "task.ood_period_high"),  # a period of 16 is not repeated in 30 tokens
    ("task.period_low=1", "task.period_low"),
    ("task.lazy_noise=1.0", "task.lazy_noise"),
])
def test_bad_configs_name_the_key(override, key):
    with pytest.raises(ConfigError) as error:
        config.load(None, ["task.name=mixed_ngram", override])
    assert error.value.key == key


def test_diversity_reports_alpha_and_the_in_context_share_of_targets():
    measures = TASKS["mixed_ngram"].diversity(MixedNgramConfig(alpha=0.0))
    assert measures == {"data/alpha": 0.0, "data/icl_target_share": 0.0}
    batch = draw(CFG, 4000, seed=9)
    measured = (batch.labels == ICL).sum().item() / batch.loss_mask.sum().item()
    assert TASKS["mixed_ngram"].diversity(CFG)["data/icl_target_share"] == pytest.approx(measured, abs=0.02)


def test_figures_draw_every_head_and_one_panel_per_run():
    from trainables.tasks.mixed_ngram.figures import all_figures, component_curves

    batch = draw(CFG, 3, "ood", seed=10)
    patterns = torch.full((3, 2, 2, CFG.seq_len, CFG.seq_len), 1.0 / CFG.seq_len).tril().numpy()
    drawn = all_figures({"patterns": patterns, "period": batch.info["period"].numpy()})
    assert sorted(drawn) == [f"attention/pattern_L{layer}H{head}" for layer in (0, 1) for head in (0, 1)]
    records = [{"step": s, "lazy/loss": 1.0 / s, "icl/loss": 3.0 if s < 500 else 0.01} for s in range(100, 1100, 100)]
    assert len(component_curves({f"run {i}": records for i in range(5)}).axes) == 5  # two rows, three slots removed
