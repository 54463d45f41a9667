"""Markov n-gram task (SPEC §5): the generator (parents, first tokens, pool vs fresh tables, OOD tables, seeds), the
in-context strategies against brute-force counting, Chen et al.'s chi-square mutual information on cases with a
known answer, the lag probe on hand-built attention, and the search over the pool size with the fake executor. The
population sampler (issue gpu-ready): a member's batches whatever it is packed with (pool sizes, fresh tables and
alphas mixed), its own pool, the same operations, none read back, for any member count, one traced graph, and the
static-shape Gamma sampler against Gamma(alpha)."""
import dataclasses
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from sweep.search import bisection, loop
from sweep.search import studies as search_studies
from sweep.search.config import load_search
from sweep.storage.out_dir import OutDir
from tests.conftest import CONFIGS
from tests.unit.samplers import assert_drawn_as_alone, draw_op_counts, same_batches
from tests.unit.conftest import fake_executor
from trainables import config
from trainables.errors import ConfigError
from trainables.population import pack_key
from trainables.streams import Draws, GeneratorDraws, Streams
from trainables.tasks import TASKS
from trainables.tasks.markov_ngram import data, metrics, mutual_info
from trainables.tasks.markov_ngram.data import CHAIN, PAD, PRIMED, MarkovNgramConfig
from trainables.train import init_state, train

TASK = TASKS["markov_ngram"]
SMALL = MarkovNgramConfig(vocab_size=3, order=3, alpha=0.3, seq_len=20, pool_size=4, loss_on="all")


def draw(cfg, n, split="train", seed=0, pad_to=None):
    return TASKS["markov_ngram"].sample(cfg, n, torch.Generator().manual_seed(seed), split, pad_to)


def uniforms(shape, seed):
    """float64 uniforms in [0, 1), the chain's one per token."""
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def table_of(cfg, sequence):
    """Transition counts of one full sequence: {(context tuple, next token)}, over its chain tokens."""
    n = cfg.order
    return {(tuple(sequence[j - n + 1:j]), sequence[j]) for j in range(n - 1, len(sequence))}


# --- generator ------------------------------------------------------------------------------------------------------

def test_tokens_follow_the_table_of_their_parents():
    """A table with one deterministic row per context: every chain token is the row's token for its n-1 parents."""
    cfg = MarkovNgramConfig(vocab_size=3, order=3, seq_len=30)
    C = data.n_contexts(cfg)
    rule = torch.randint(3, (4, C), generator=torch.Generator().manual_seed(1))  # (B, C) the next token per context
    tables = torch.nn.functional.one_hot(rule, 3).double()  # (B, C, S) deterministic rows
    sequences = data.chains(cfg, tables, uniforms((4, cfg.seq_len + 1), seed=2))
    for b in range(4):
        x = sequences[b].tolist()
        for j in range(2, len(x)):
            context = x[j - 1] + 3 * x[j - 2]  # lag 1 least significant
            assert x[j] == rule[b, context]


def test_context_index_puts_the_lag_one_token_last():
    assert data.context_index(torch.tensor([[2, 1]]), 3).tolist() == [2 * 3 + 1]
    assert data.context_index(torch.tensor([[1, 0, 2]]), 4).tolist() == [1 * 16 + 0 * 4 + 2]


def test_batch_layout_scores_chain_tokens_and_the_last_position():
    """The model reads x_0..x_{L-1}, targets are x_1..x_L; `all` scores every chain target, `last` position L-1."""
    batch = draw(SMALL, 8)
    L = SMALL.seq_len
    assert batch.tokens.shape == batch.targets.shape == (8, L) and batch.query is None
    assert torch.equal(batch.tokens[:, 1:], batch.targets[:, :-1])
    assert (batch.labels[:, :1] == PRIMED).all() and (batch.labels[:, 1:] == CHAIN).all()  # n = 3: x_1 is a first token
    assert torch.equal(batch.loss_mask, batch.labels == CHAIN)
    last = draw(replace(SMALL, loss_on="last"), 8)
    assert torch.equal(last.query, torch.full((8,), L - 1)) and torch.equal(last.tokens, batch.tokens)
    assert last.loss_mask.sum().item() == 8 and last.loss_mask[:, L - 1].all()
    assert torch.equal(last.scored_targets(), batch.targets[:, L - 1])


def test_padding_keeps_the_draws():
    plain, padded = draw(SMALL, 8, seed=3), draw(SMALL, 8, seed=3, pad_to=SMALL.seq_len + 5)
    L = SMALL.seq_len
    assert torch.equal(padded.tokens[:, :L], plain.tokens) and (padded.labels[:, L:] == PAD).all()
    assert not padded.loss_mask[:, L:].any() and torch.equal(padded.scored_targets(), plain.scored_targets())
    with pytest.raises(ValueError, match="cannot pad"):
        draw(SMALL, 8, pad_to=L - 1)


def test_first_tokens_are_uniform():
    """The first n-1 tokens are uniform: frequencies within 4 standard errors of 1/S."""
    cfg = replace(SMALL, pool_size=0)
    first = draw(cfg, 6000, seed=4).tokens[:, :2].flatten()
    freq = torch.bincount(first, minlength=3).double() / len(first)
    assert (freq - 1 / 3).abs().max() < 4 * math.sqrt((1 / 3) * (2 / 3) / len(first))



def test_stationary_is_the_left_eigenvector_of_eigenvalue_one():
    """Dirichlet tables of the task's default alpha against numpy's eigendecomposition."""
    tables = data.draw_tables(MarkovNgramConfig(vocab_size=5, order=2), 64, torch.Generator().manual_seed(3))
    mu = data.stationary(tables).numpy()  # (64, 5)
    for table, got in zip(tables.numpy(), mu):
        values, vectors = np.linalg.eig(table.T)
        expected = np.real(vectors[:, np.argmin(np.abs(values - 1))])
        assert np.allclose(got, expected / expected.sum(), atol=1e-8)


def test_stationary_of_a_reducible_chain_is_a_distribution():
    """Two closed classes (a block-diagonal P, what tiny alpha gives when entries underflow to 0): mu P = mu, each
    class holding its share of a uniform start; it was NaN. And tiny-alpha tables, zeros in most of them."""
    A = torch.tensor([[0.3, 0.7], [0.6, 0.4]], dtype=torch.float64)
    B = torch.tensor([[0.2, 0.5, 0.3], [0.1, 0.1, 0.8], [0.5, 0.25, 0.25]], dtype=torch.float64)
    P = torch.block_diag(A, B)  # (5, 5)
    mu = data.stationary(P[None])[0]
    assert torch.allclose(mu @ P, mu, atol=1e-8) and math.isclose(mu.sum().item(), 1.0)
    assert torch.allclose(mu[:2], 2 / 5 * data.stationary(A[None])[0], atol=1e-6)
    tiny_alpha = MarkovNgramConfig(vocab_size=3, order=2, alpha=1e-3)
    tables = data.draw_tables(tiny_alpha, 256, torch.Generator().manual_seed(0))  # (256, 3, 3)
    assert (tables == 0).any(-1).any(-1).float().mean() > 0.5
    mu = data.stationary(tables)  # (256, 3)
    assert torch.isfinite(mu).all() and torch.allclose(mu.sum(-1), torch.ones(256, dtype=torch.float64))
    assert torch.allclose(torch.einsum("bi,bij->bj", mu, tables), mu, atol=1e-8)

def test_stationary_first_token_follows_the_chains_stationary_law():
    """first=stationary (order 2): one fixed table, the first token's frequencies match mu with mu P = mu."""
    cfg = MarkovNgramConfig(vocab_size=3, order=2, seq_len=4, first="stationary")
    table = torch.tensor([[0.8, 0.1, 0.1], [0.3, 0.3, 0.4], [0.05, 0.05, 0.9]], dtype=torch.float64)
    mu = data.stationary(table[None])[0]
    assert torch.allclose(mu @ table, mu) and math.isclose(mu.sum().item(), 1.0)
    first = data.chains(cfg, table.expand(20000, 3, 3), uniforms((20000, cfg.seq_len + 1), seed=5))[:, 0]
    freq = torch.bincount(first, minlength=3).double() / len(first)
    assert (freq - mu).abs().max() < 4 * math.sqrt(0.25 / len(first))


@pytest.mark.parametrize("alpha", [0.3, 2.0])  # both branches of the gamma sampler (shape below 1, and not)
def test_rows_are_dirichlet_with_the_right_mean_and_spread(alpha):
    """Dirichlet(alpha) rows: mean 1/S, variance (1/S)(1 - 1/S)/(S alpha + 1), all positive and normalised."""
    cfg = MarkovNgramConfig(vocab_size=3, order=2, alpha=alpha)
    rows = data.draw_tables(cfg, 4000, torch.Generator().manual_seed(6)).reshape(-1, 3)  # (12000, 3)
    assert (rows > 0).all() and torch.allclose(rows.sum(-1), torch.ones(len(rows), dtype=torch.float64))
    variance = (1 / 3) * (2 / 3) / (3 * alpha + 1)
    assert (rows.mean(0) - 1 / 3).abs().max() < 4 * math.sqrt(variance / len(rows))
    assert abs(rows.var(0).mean().item() - variance) < 0.05 * variance


def test_pool_tables_are_shared_and_fresh_tables_are_not():
    """pool_size k: every training sequence uses one of the k pool tables (the same pool for every seed); OOD tables
    differ from all of them; pool_size 0: a fresh table per sequence."""
    pool = data.pool(SMALL)
    assert pool.shape == (4, 9, 3) and torch.equal(pool, data.pool(replace(SMALL, seq_len=50)))
    assert not torch.equal(pool, data.pool(replace(SMALL, pool_seed=1)))
    batch = draw(SMALL, 64, seed=7)
    assert set(batch.info["table"].tolist()) == {0, 1, 2, 3}
    # every transition a sequence makes is possible under its own table and all tokens agree with a pool table draw
    sequences = metrics.full_sequences(batch, SMALL.seq_len)
    for b in range(4):
        table = pool[batch.info["table"][b]]
        for context, token in table_of(SMALL, sequences[b].tolist()):
            assert table[data.context_index(torch.tensor(context), 3), token] > 0
    ood = draw(SMALL, 64, "ood", seed=7)
    assert (ood.info["table"] == -1).all()
    ood_tables = data.draw_tables(SMALL, 64, torch.Generator().manual_seed(0))
    assert all(not torch.allclose(t, p) for t in ood_tables for p in pool)


def test_a_single_table_pool_repeats_its_transition_statistics():
    """With one deterministic-ish table in the pool, all training sequences share transition frequencies."""
    cfg = replace(SMALL, pool_size=1, alpha=0.05, seq_len=200)
    batch = draw(cfg, 200, seed=8)
    sequences = metrics.full_sequences(batch, cfg.seq_len)
    table = data.pool(cfg)[0]
    c = metrics.contexts(sequences, 3, 3)[:, 2:].flatten()  # the context of every chain token
    counts = torch.zeros(9, 3, dtype=torch.float64)
    counts.index_put_((c, sequences[:, 2:].flatten()), torch.ones(len(c), dtype=torch.float64), accumulate=True)
    seen = counts.sum(1) > 200  # contexts visited often enough to estimate
    empirical = counts[seen] / counts[seen].sum(1, keepdim=True)
    assert (empirical - table[seen]).abs().max() < 0.05


@pytest.mark.parametrize("split", data.SPLITS)
def test_same_seed_same_batch_other_seed_other_batch(split):
    cfg = replace(SMALL, pool_size=0) if split == "ood" else SMALL
    a, b, c = draw(cfg, 32, split, seed=9), draw(cfg, 32, split, seed=9), draw(cfg, 32, split, seed=10)
    for name in ("tokens", "targets", "loss_mask", "labels"):
        assert torch.equal(getattr(a, name), getattr(b, name))
    assert torch.equal(a.info["table"], b.info["table"]) and not torch.equal(a.tokens, c.tokens)


# --- the population sampler ---------------------------------------------------------------------------------------

# Pools of several sizes and seeds, fresh tables, several alphas (both branches of the Gamma sampler): one pack.
MEMBERS = [replace(SMALL, pool_size=size, pool_seed=seed, alpha=alpha)
           for size, seed, alpha in [(4, 0, 0.3), (0, 0, 0.3), (16, 2, 1.5), (1, 1, 0.3), (0, 0, 2.0)]]
KEYS = [11, 7, 2**40 + 3, 0, 5]


def test_the_members_of_a_pack_differ_in_their_data_distribution_only():
    shapes = {f.name for f in dataclasses.fields(MarkovNgramConfig)} - set(TASK.member_fields)
    assert shapes == {"name", "vocab_size", "order", "seq_len", "first", "loss_on"}
    load = lambda *overrides: pack_key(config.load(CONFIGS / "debug_markov_ngram.yaml", list(overrides)))
    assert load("task.pool_size=0", "task.alpha=1.5", "task.pool_seed=3") == load("task.pool_size=64", "seed=1")
    assert load("task.seq_len=20") != load() and load("task.loss_on=last") != load()


def test_a_member_draws_the_same_batches_whatever_it_is_packed_with():
    batch = assert_drawn_as_alone(data.sampler, MEMBERS, KEYS, 32)
    assert batch.tokens.shape == (len(MEMBERS), 32, SMALL.seq_len)


def test_the_id_set_is_drawn_by_the_training_sampler():
    for cfg in MEMBERS[:2]:  # a pool, fresh tables
        trained = data.sampler([cfg], "cpu")(50, GeneratorDraws(torch.Generator().manual_seed(3))).member(0)
        assert same_batches(draw(cfg, 50, seed=3), trained)


def likelihoods(cfg, sequences, tables):
    """(B, K) log-likelihood of each sequence's chain tokens under each of K tables."""
    n = cfg.order
    contexts = metrics.contexts(sequences, n, cfg.vocab_size)[:, n - 1:]  # (B, L+2-n): each chain token's context
    rows = tables[:, contexts]  # (K, B, L+2-n, S)
    chosen = rows.gather(-1, sequences[None, :, n - 1:, None].expand(len(tables), -1, -1, 1))[..., 0]
    return chosen.log().sum(-1).T


def test_each_member_draws_from_its_own_pool_or_fresh_tables():
    """info["table"] covers the member's pool (-1: fresh), and each sequence is within a few nats as likely under the
    pool table it names as under the likeliest (near-deterministic rows, alpha 0.05: under a wrong table a sequence
    mostly loses tens to thousands of nats; it may not, when the chain settles where two tables agree)."""
    members = [replace(cfg, alpha=0.05, seq_len=40) for cfg in MEMBERS]
    batch = data.sampler(members, "cpu")(200, Streams(KEYS))
    for p, cfg in enumerate(members):
        mine = batch.member(p)
        table = mine.info["table"]
        if not cfg.pool_size:
            assert (table == -1).all()
            continue
        assert set(table.tolist()) == set(range(cfg.pool_size))
        sequences = metrics.full_sequences(mine, cfg.seq_len)
        log_p = likelihoods(cfg, sequences, data.pool(cfg))  # (B, pool_size)
        near_best = lambda named: log_p.gather(1, named[:, None])[:, 0] > log_p.max(1).values - 5.0  # (B,)
        assert near_best(table).all()
        if cfg.pool_size > 1:  # the check tells tables apart: naming the next table fails it for most sequences
            assert near_best((table + 1) % cfg.pool_size).double().mean() < 0.5


@pytest.mark.parametrize("sizes, counts", [((1, 4, 16), (1, 8, 64)),  # pools only
                                           ((0,), (1, 8, 64)),  # fresh tables only
                                           ((0, 4, 16), (2, 8, 64))])  # both: two members at least
def test_a_draw_dispatches_the_same_operations_for_any_member_count_and_reads_nothing_back(sizes, counts):
    populations = [[replace(SMALL, pool_size=sizes[p % len(sizes)], alpha=(0.3, 1.5)[p % 2]) for p in range(members)]
                   for members in counts]
    found = draw_op_counts(data.sampler, populations, 16)
    assert found[0] == found[1] == found[2]


@pytest.mark.parametrize("cfgs", [[replace(cfg, seq_len=6) for cfg in MEMBERS[:3]],
                                  [MarkovNgramConfig(order=2, seq_len=6, first="stationary", pool_size=size)
                                   for size in (0, 3)]],
                         ids=["uniform", "stationary"])
def test_a_draw_traces_as_one_graph(cfgs):
    """fullgraph=True fails on any graph break: a value read back, data-dependent control flow. The eager backend
    compiles no kernels, and a short sequence keeps the unrolled chain small."""
    sampler, keys = data.sampler(cfgs, "cpu"), KEYS[:len(cfgs)]
    traced = torch.compile(sampler, fullgraph=True, backend="eager")(8, Streams(keys))
    assert same_batches(traced, sampler(8, Streams(keys)))


def test_gamma_draws_have_the_moments_of_gamma_alpha():
    """log_gamma for four members at once, alpha < 1 (boosted) and >= 1: the mean and variance of G (both alpha) and
    of log G (digamma(alpha), trigamma(alpha): the small tail the boost makes) within 4 standard errors."""
    alpha = torch.tensor([0.1, 0.3, 1.0, 4.0], dtype=torch.float64)
    log_g = data.log_gamma(alpha, Streams([1, 2, 3, 4]), 100_000)  # (4, N)
    g, N = log_g.exp(), log_g.shape[1]
    a = alpha
    assert ((g.mean(1) - a).abs() < 4 * (a / N).sqrt()).all()
    assert ((g.var(1) - a).abs() < 4 * ((2 * a**2 + 6 * a) / N).sqrt()).all()  # var(s^2) = (mu_4 - a^2) / N
    trigamma = torch.polygamma(1, a)
    assert ((log_g.mean(1) - torch.digamma(a)).abs() < 4 * (trigamma / N).sqrt()).all()
    assert ((log_g.var(1) / trigamma - 1).abs() < 0.05).all()


class Fixed(Draws):
    """The same bits for every element of a call, call after call from a list (cycled)."""

    members = 1

    def __init__(self, values):
        self.values, self.calls = values, 0

    def bits(self, *shape):
        self.calls += 1
        return torch.full((1, *shape), self.values[(self.calls - 1) % len(self.values)], dtype=torch.int64)


def test_gamma_falls_back_to_d_when_every_proposal_is_rejected():
    """Normal proposals of -6.8 (radius sqrt(-2 log u) at the smallest u, times cos(pi)) make v = (1 + c x)^3 < 0: all
    rejected, the variate is d = alpha - 1/3 (v = 1), finite."""
    log_g = data.log_gamma(torch.tensor([2.0], dtype=torch.float64), Fixed([0, 2**31, 2**31, 2**31]), 5)
    assert torch.allclose(log_g, torch.full((1, 5), math.log(2.0 - 1 / 3), dtype=torch.float64))


# --- the in-context strategies --------------------------------------------------------------------------------------

def brute_force_probs(sequence: list[int], t: int, k: int, S: int, alpha: float) -> list[float]:
    """The add-alpha k-gram estimate of x_{t+1} from x_0..x_t by direct counting."""
    context = tuple(sequence[t + 2 - k:t + 1]) if k > 1 else ()
    counts = [0] * S
    for j in range(k - 1, t + 1):
        if tuple(sequence[j - k + 1:j]) == context:
            counts[sequence[j]] += 1
    return [(counts[y] + alpha) / (sum(counts) + S * alpha) for y in range(S)]


@pytest.mark.parametrize("loss_on", data.LOSS_ON)
@pytest.mark.parametrize("order", [2, 3])
def test_strategies_equal_brute_force_counting(loss_on, order):
    """Every in-context k-gram estimate (k = n: the Bayes predictor) at every scored position, and the losses built
    from them, equal direct counting over the sequence so far."""
    cfg = MarkovNgramConfig(vocab_size=3, order=order, alpha=0.5, seq_len=16, loss_on=loss_on)
    batch = draw(cfg, 6, "ood", seed=11)
    sequences = metrics.full_sequences(batch, cfg.seq_len)
    positions = metrics.scored_positions(batch)
    assert positions.tolist() == ([cfg.seq_len - 1] if loss_on == "last" else list(range(order - 2, cfg.seq_len)))
    expected_losses = {}
    for k in range(1, order + 1):
        probs = metrics.in_context_probs(sequences, positions, k, 3, cfg.alpha)  # (B, P, S)
        nll = []
        for b in range(6):
            x = sequences[b].tolist()
            for i, t in enumerate(positions.tolist()):
                expected = brute_force_probs(x, t, k, 3, cfg.alpha)
                assert probs[b, i].tolist() == pytest.approx(expected, abs=1e-12)
                nll.append(-math.log(expected[x[t + 1]]))
        expected_losses[metrics.strategy_name(k, order)] = sum(nll) / len(nll)
    losses = metrics.strategy_losses(batch, cfg.seq_len, order, 3, cfg.alpha)
    assert losses == pytest.approx(expected_losses, abs=1e-12)
    assert list(losses)[-1] == "bayes"


def test_bayes_predictor_beats_the_lower_orders_on_long_trigram_sequences():
    cfg = MarkovNgramConfig(vocab_size=3, order=3, alpha=0.3, seq_len=128, loss_on="all")
    losses = metrics.strategy_losses(draw(cfg, 256, "ood", seed=12), cfg.seq_len, 3, 3, cfg.alpha)
    assert losses["bayes"] < losses["bigram"] < losses["unigram"] < math.log(3)


def test_task_metrics_gap_is_model_loss_minus_bayes_loss():
    """A model that outputs the Bayes predictor's log-probabilities has gap 0 and sits at the Bayes stage."""
    cfg = replace(SMALL, pool_size=0)
    batch = draw(cfg, 16, "ood", seed=13)
    sequences = metrics.full_sequences(batch, cfg.seq_len)
    positions = torch.arange(cfg.seq_len)
    logits = metrics.in_context_probs(sequences, positions, 3, 3, cfg.alpha).log().float()  # (B, T, S)
    _, cache = _uniform_cache(batch, heads=2)
    result = TASK.metrics(cfg, "ood", batch, logits, cache)
    assert result["ood/gap"] == pytest.approx(0.0, abs=1e-6) and result["ood/stage"] == 3.0
    uniform = TASK.metrics(cfg, "id", batch, torch.zeros_like(logits), cache)
    assert uniform["id/stage"] == 0.0 and uniform["id/gap"] == pytest.approx(math.log(3) - result["ood/bayes_loss"])


def _uniform_cache(batch, heads):
    B, T = batch.tokens.shape
    causal = torch.tril(torch.ones(T, T))
    pattern = (causal / causal.sum(1, keepdim=True)).expand(B, heads, T, T)
    return None, {"blocks.0.attn.hook_pattern": pattern, "blocks.1.attn.hook_pattern": pattern}


# --- chi-square mutual information ----------------------------------------------------------------------------------

def test_chi2_mutual_information_of_a_symmetric_binary_chain():
    """Order 2, S = 2, flip probability p (stationary law uniform): standard I({1}) = (1-2p)^2 = I({1,2}) (a tie),
    I({2}) = (1-2p)^4; modified ~I({1}) = (1-2p)^2 / 2 > ~I({1,2}) = ((1-p)^2 + p^2)(1-2p)^2 / 2: the argmax is {1}."""
    p = 0.2
    table = torch.tensor([[[1 - p, p], [p, 1 - p]]], dtype=torch.float64)
    values = mutual_info.chi2_mutual_information(table, order=2)
    assert list(values) == [(1,), (2,), (1, 2)]
    r = (1 - 2 * p) ** 2
    assert values[(1,)] == pytest.approx((r, r / 2))
    assert values[(2,)][0] == pytest.approx(r**2)
    assert values[(1, 2)] == pytest.approx((r, ((1 - p) ** 2 + p**2) * r / 2))
    assert mutual_info.argmax(values) == (1,)


def test_chi2_mutual_information_is_zero_without_dependence():
    table = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64).expand(1, 9, 3)  # every context: the same row
    values = mutual_info.chi2_mutual_information(table, order=3)
    assert all(abs(a) < 1e-12 and abs(b) < 1e-12 for a, b in values.values())


def test_modified_chi2_selects_the_parents_where_the_standard_one_ties():
    """SPEC §5: for n = 3 (tables from the Dirichlet prior) the modified criterion's argmax is {1, 2}, while the
    standard criterion ties {1, 2} with {1, 2, 3}."""
    cfg = MarkovNgramConfig(vocab_size=3, order=3, alpha=0.3)
    values = mutual_info.chi2_mutual_information(data.draw_tables(cfg, 256, torch.Generator().manual_seed(14)), 3)
    assert mutual_info.argmax(values) == (1, 2)
    assert values[(1, 2)][0] == pytest.approx(values[(1, 2, 3)][0], rel=1e-9)
    assert values[(1, 2)][1] > 1.2 * values[(1, 2, 3)][1]


def test_window_joint_is_the_stationary_law_of_consecutive_tokens():
    """The joint of (x_t, x_{t-1}, .., x_{t-W}) sums to 1, has the same marginal for every token, and
    mu(x_t | x_{t-1}, x_{t-2}) is the table's row."""
    cfg = MarkovNgramConfig(vocab_size=3, order=3, alpha=0.5)
    tables = data.draw_tables(cfg, 2, torch.Generator().manual_seed(15))
    joint = mutual_info.window_joint(tables, 3, 3)  # (K, y, lag1, lag2, lag3)
    assert joint.shape == (2, 3, 3, 3, 3)
    assert torch.allclose(joint.sum((1, 2, 3, 4)), torch.ones(2, dtype=torch.float64))
    marginals = [joint.sum(tuple(d for d in range(1, 5) if d != keep)) for keep in range(1, 5)]
    assert all(torch.allclose(m, marginals[0]) for m in marginals)
    pair = joint.sum(4)  # (K, y, lag1, lag2)
    conditional = pair / pair.sum(1, keepdim=True)
    for lag1 in range(3):
        for lag2 in range(3):
            assert torch.allclose(conditional[:, :, lag1, lag2], tables[:, lag1 + 3 * lag2])


# --- attention probes -----------------------------------------------------------------------------------------------

def test_lag_profile_finds_the_offset_each_hand_built_head_attends_to():
    """Head h attends to offset lag[h] (or to position 0 when the query is younger): its profile peaks there."""
    B, T, lags = 3, 12, [1, 2, 0]
    pattern = torch.zeros(B, len(lags), T, T)
    for h, lag in enumerate(lags):
        for t in range(T):
            pattern[:, h, t, max(t - lag, 0)] = 1.0
    rows = torch.where(torch.arange(T) >= 2, torch.arange(T), -1).expand(B, T)
    profile = metrics.lag_profile(pattern, rows)
    assert profile.shape == (3, T) and torch.allclose(profile.sum(1), torch.ones(3, dtype=torch.float64))
    assert profile.argmax(1).tolist() == lags and profile.max(1).values.tolist() == [1.0, 1.0, 1.0]
    result = metrics.lag_metrics(profile, order=3)
    assert [result[f"attn/lag_L0H{h}"] for h in range(3)] == [1.0, 2.0, 0.0]
    assert result["attn/parent_coverage"] == 1.0 and result["attn/parent_mass_1"] == result["attn/parent_mass_2"] == 1.0
    assert metrics.lag_metrics(profile[2:], order=3)["attn/parent_coverage"] == 0.0
    split = torch.zeros(1, T, dtype=torch.float64)
    split[0, 1], split[0, 2] = 0.6, 0.4  # one head splitting its attention between both parents
    result = metrics.lag_metrics(split, order=3)
    assert result["attn/parent_coverage"] == 0.5 and result["attn/parent_mass_2"] == pytest.approx(0.4)


def test_lag_profile_of_a_query_row():
    """A layer that ran at the query only (T_q = 1): offsets are counted from each sequence's query position."""
    pattern = torch.zeros(2, 1, 1, 10)
    pattern[0, 0, 0, 7] = 1.0  # query 9 attends to 7: offset 2
    pattern[1, 0, 0, 3] = 1.0  # query 5 attends to 3: offset 2
    profile = metrics.lag_profile(pattern, torch.tensor([[9], [5]]))
    assert profile[0, 2].item() == 1.0 and profile.sum().item() == 1.0


# --- the task: config, diversity, summary -------------------------------------------------------------------------

@pytest.mark.parametrize("override, key", [
    ("task.order=1", "task.order"), ("task.alpha=0", "task.alpha"), ("task.seq_len=2", "task.seq_len"),
    ("task.pool_size=-1", "task.pool_size"), ("task.first=stationary", "task.first"),
    ("task.loss_on=every", "task.loss_on"),
    ("task.vocab_size=20", "task.order"),
])
def test_bad_config_names_the_key(override, key):
    with pytest.raises(ConfigError) as error:
        config.load(CONFIGS / "debug_markov_ngram.yaml", [override])
    assert error.value.key == key


def test_diversity_is_finite_and_grows_as_the_pool_shrinks():
    measures = [TASK.diversity(replace(SMALL, pool_size=k))["data/inv_pool"] for k in (1, 4, 64, 0)]
    assert measures == [1.0, 0.25, 1 / 64, 0.0]
    assert TASK.query_only(replace(SMALL, loss_on="last")) and not TASK.query_only(SMALL)


def test_the_ood_evaluation_set_does_not_depend_on_the_pool_size():
    """Runs of a pool-size sweep are compared on the same OOD sequences (drawn before the pool's ID set)."""
    ood = [init_state(config.load(CONFIGS / "debug_markov_ngram.yaml", [f"task.pool_size={k}"]))[1]["ood"]
           for k in (0, 1, 8)]
    assert all(torch.equal(o.tokens, ood[0].tokens) and torch.equal(o.targets, ood[0].targets) for o in ood)



@pytest.mark.parametrize("model", ["{name: one_step, n_samples_V: 64, n_samples_KQ: 64}", "{name: transformer}"],
                         ids=["one_step", "transformer"])
def test_loss_on_last_trains_to_its_final_readout(model):
    """With loss_on=last the readout reads attention at the query, as evaluation does: the one-step model has no
    other rows to read (it once crashed here)."""
    cfg = config.load(CONFIGS / "debug_markov_ngram.yaml", ["task.loss_on=last", f"model={model}", "optim.max_steps=4",
                                                            "eval.every=2", "eval.n_id=16", "eval.n_ood=16"])
    result = train(cfg)
    assert result.metrics["status"] == "completed" and "mi/argmax_is_parents" in result.metrics
    profile = result.arrays["lag_profile"]  # (layers, heads, offsets): each head's mass sums to 1
    assert profile.shape[-1] == cfg.task.seq_len and np.allclose(profile.sum(-1), 1.0)

def test_summary_reads_the_first_step_at_each_stage():
    history = [{"step": 10, "ood/stage": 0.0}, {"step": 20, "ood/stage": 1.0}, {"step": 30, "ood/stage": 1.0},
               {"step": 40, "ood/stage": 3.0}]
    summary = TASK.summary(SMALL, history)
    assert summary["ood/first_step_at_uniform"] == 10 and summary["ood/first_step_at_unigram"] == 20
    assert summary["ood/first_step_at_bayes"] == 40 and math.isnan(summary["ood/first_step_at_bigram"])


# --- the search over the pool size -------------------------------------------------------------------------------

POOL_NEEDED = 24  # the fake model learns in context from this pool size on


@pytest.fixture
def fake_gap_tune(monkeypatch):
    """tests/unit/conftest.py's fake executor, writing this task's success metric: ood/gap small (0.001) from
    POOL_NEEDED tables on, large (0.3) below. Returns the list of every call's points."""
    return fake_executor(monkeypatch, lambda point, m: 0.001 if point["task.pool_size"] >= POOL_NEEDED else 0.3,
                         metric="ood/gap")


def test_pool_search_finds_the_smallest_pool_with_a_small_gap(tmp_path, fake_gap_tune):
    """The real search loop on the shipped search config (threshold sampler over task.pool_size): success is read in
    the task's direction (ood/gap <= threshold), and bisection finds the fake's smallest successful pool."""
    base, search = load_search(CONFIGS / "markov_pool_search.yaml", [])
    assert search.success.metric == "ood/gap" and search.success.direction == "<="
    all_slices = search_studies.slices(base, search, base.name)
    storage = search_studies.storage_for(None, tmp_path)
    studies = {sl.study_name: search_studies.open_study(sl, search, storage) for sl in all_slices}
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    for sl in all_slices:
        pooled = bisection.evidence(studies[sl.study_name].get_trials(), "task.pool_size")
        assert bisection.minimal_value(sl.values, pooled, search.success.min_seeds / len(search.success.seeds)) \
            == POOL_NEEDED
    assert fake_gap_tune  # the fake ran
