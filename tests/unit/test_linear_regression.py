"""In-context linear regression (trainables/tasks/linear_regression/): the interleaved layout, the nested pool fixed by
its own seed, the population sampler (a member draws as alone, the same operations for any member count), the Bayes
baselines against a brute-force loop and against each other where each is optimal, the metrics, validation, readouts
and figures."""
import dataclasses
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from tests.unit.samplers import draw_op_counts, same_batches
from trainables.errors import ConfigError
from trainables.streams import GeneratorDraws, Streams
from trainables.tasks import TASKS, metric_range
from trainables.tasks.linear_regression import baselines, data, metrics
from trainables.tasks.linear_regression.data import FRESH, X, Y, LinearRegressionConfig

TASK = TASKS["linear_regression"]
SMALL = LinearRegressionConfig(dim=3, n_points=5, n_tasks=8, noise=0.25)


def draw(cfg, n, seed=0, split="train"):
    return TASK.sample(cfg, n, torch.Generator().manual_seed(seed), split)


def task_vectors(batch):
    """(B, D) each sequence's w, recovered by least squares from its n noiseless pairs (n > D: a unique solution)."""
    x, y = metrics.pairs(batch)
    return torch.linalg.lstsq(x, y[..., None]).solution[..., 0]


# --- layout ---------------------------------------------------------------------------------------------------------

def test_layout_interleaves_x_and_y_and_scores_each_x():
    batch = draw(SMALL, 6)
    N, D, T = SMALL.n_points, SMALL.dim, 2 * SMALL.n_points - 1
    assert TASK.dims(SMALL) == (1, T) and TASK.input_width(SMALL) == D + 1 and not TASK.query_only(SMALL)
    assert batch.inputs.shape == (6, T, D + 1) and batch.targets.shape == (6, T, 1) and batch.tokens.shape == (6, T)
    assert batch.targets.is_floating_point() and batch.query is None and batch.model_input is batch.inputs
    position = torch.arange(T)
    is_x = position % 2 == 0
    assert torch.equal(batch.tokens, torch.where(is_x, X, Y).expand(6, T))
    assert torch.equal(batch.loss_mask, is_x.expand(6, T))
    expected_labels = torch.tensor([0, N, 1, N + 1, 2, N + 2, 3, N + 3, 4])  # k-1 at x_k, n+k-1 at y_k
    assert torch.equal(batch.labels, expected_labels.expand(6, T))
    assert (batch.labels >= 0).all()  # no padding label: every sequence has T positions
    assert (batch.inputs[:, 0::2, 0] == 0).all() and (batch.inputs[:, 1::2, 1:] == 0).all()
    assert (batch.inputs[:, 0::2, 1:] != 0).all()  # x_k itself: N(0, 1) coordinates, never exactly 0
    # the target at x_k is y_k, which the inputs show at the next position (y_n is never shown)
    assert torch.equal(batch.targets[:, 0:-1:2, 0], batch.inputs[:, 1::2, 0])
    assert (batch.targets[:, 1::2] == 0).all() and (batch.targets[:, -1, 0] != 0).all()
    assert batch.inputs.dtype == batch.targets.dtype == torch.float32
    assert batch.info["task_index"].shape == (6,)


def test_padding_keeps_the_draws():
    batch, padded = draw(SMALL, 4), TASK.sample(SMALL, 4, torch.Generator().manual_seed(0), pad_to=12)
    T = batch.tokens.shape[1]
    assert padded.inputs.shape == (4, 12, SMALL.dim + 1) and torch.equal(padded.inputs[:, :T], batch.inputs)
    assert torch.equal(padded.scored_targets(), batch.scored_targets())


# --- pools ----------------------------------------------------------------------------------------------------------

def test_pools_are_nested_and_fixed_by_their_own_seed():
    chunk = data.POOL_CHUNK
    large = data.pool(3, 2 * chunk + 5, 4)  # three randn calls
    data._pool_chunks.cache_clear()  # the smaller pools drawn anew, not sliced from the large one's cache
    for size in (1, chunk - 1, chunk, chunk + 7):
        assert torch.equal(data.pool(3, size, 4), large[:size]), size
    assert not torch.equal(data.pool(4, 16, 4), large[:16])  # another seed, another pool
    assert large.shape == (2 * chunk + 5, 4) and abs(float(large.mean())) < 0.05 and abs(float(large.var()) - 1) < 0.05


def test_pool_tasks_come_from_the_pool_whatever_the_members_seed():
    """Noiseless pairs give each sequence's w exactly: on the train split it is the pool vector info names, for every
    sampling seed (the pool is the sweep's, not the member's); fresh tasks are none of the pool's."""
    cfg = replace(SMALL, noise=0.0, n_points=6)
    pool = data.pool_of(cfg)
    for seed in (0, 1):
        batch = draw(cfg, 200, seed)
        index = batch.info["task_index"]
        assert set(index.tolist()) == set(range(cfg.n_tasks))  # uniform over the pool: all 8 among 200
        assert torch.allclose(task_vectors(batch), pool[index], atol=1e-4)
    fresh = draw(cfg, 200, 0, "fresh")
    assert (fresh.info["task_index"] == FRESH).all()
    distance = torch.cdist(task_vectors(fresh), pool).min(1).values  # (B,): to the nearest pool vector
    assert (distance > 1e-2).all()


def test_the_ood_set_does_not_depend_on_the_pool():
    assert list(TASK.eval_splits(SMALL)) == ["ood", "id"]  # drawn first from the evaluation generator
    assert same_batches(draw(SMALL, 16, 5, "fresh"), draw(replace(SMALL, n_tasks=64, pool_seed=9), 16, 5, "fresh"))


# --- the population sampler -----------------------------------------------------------------------------------------

MEMBERS = [replace(SMALL, n_tasks=m, noise=s, pool_seed=seed)
           for m, s, seed in [(8, 0.25, 0), (1, 0.0, 0), (2000, 1.0, 0), (3, 0.25, 7), (8, 0.0, 7)]]
KEYS = [11, 7, 2**40 + 3, 0, 5]


def test_the_members_of_a_pack_differ_in_their_data_distribution_only():
    shapes = {f.name for f in dataclasses.fields(LinearRegressionConfig)} - set(TASK.member_fields)
    assert shapes == {"name", "dim", "n_points"}


def test_a_member_draws_the_same_batches_whatever_it_is_packed_with():
    together, streams = data.sampler(MEMBERS, "cpu"), Streams(KEYS)
    alone = [(data.sampler([cfg], "cpu"), Streams([key])) for cfg, key in zip(MEMBERS, KEYS)]
    for _ in range(2):  # the streams advance alike
        batch = together(32, streams)
        assert batch.inputs.shape == (len(MEMBERS), 32, 9, SMALL.dim + 1)
        for p, (draw_one, stream) in enumerate(alone):
            mine = draw_one(32, stream).member(0)
            assert same_batches(batch.member(p), mine) and torch.equal(batch.member(p).inputs, mine.inputs), p
            stream.advance()
        streams.advance()
    for p, cfg in enumerate(MEMBERS):  # each member's tasks from its own pool, with its own noise
        mine = batch.member(p)
        assert mine.info["task_index"].max() < cfg.n_tasks
        x, y = metrics.pairs(mine)
        clean = (x @ data.pool_of(cfg)[mine.info["task_index"]][..., None])[..., 0]  # (B, N): w . x
        residual = (y - clean).square().mean()
        assert residual < 1e-12 if cfg.noise == 0 else abs(float(residual) / cfg.noise - 1) < 0.3, p


def test_the_id_set_is_drawn_by_the_training_sampler():
    trained = data.sampler([SMALL], "cpu")(20, GeneratorDraws(torch.Generator().manual_seed(3))).member(0)
    batch = draw(SMALL, 20, 3)
    assert same_batches(batch, trained) and torch.equal(batch.inputs, trained.inputs)


def test_a_draw_dispatches_the_same_operations_for_any_member_count_and_reads_nothing_back():
    populations = [[MEMBERS[p % len(MEMBERS)] for p in range(members)] for members in (1, 5, 16)]
    found = draw_op_counts(data.sampler, populations, 16)
    assert found[0] == found[1] == found[2]


# --- the Bayes baselines --------------------------------------------------------------------------------------------

def brute_force(x, y, noise, pool):
    """(B, N) ridge and dMMSE predictions, one sequence and one k at a time in numpy: the formulas as written."""
    B, N, D = x.shape
    ridge, dmmse = np.zeros((B, N)), np.zeros((B, N))
    for b in range(B):
        for k in range(N):  # predict y_k from pairs 0..k-1 (0-indexed)
            X, Y = x[b, :k], y[b, :k]
            if noise > 0:
                w_ridge = np.linalg.solve(X.T @ X + noise * np.eye(D), X.T @ Y)
            else:  # the minimum-norm least-squares solution (0 without pairs)
                w_ridge = np.linalg.lstsq(X, Y, rcond=None)[0] if k else np.zeros(D)
            ridge[b, k] = x[b, k] @ w_ridge
            rss = ((Y[None, :] - pool @ X.T) ** 2).sum(1)  # (M,)
            if noise > 0:
                log_w = -rss / (2 * noise)
                weights = np.exp(log_w - log_w.max())
            else:  # the limit: the exact fits (up to the data's float32 rounding), averaged
                weights = (rss <= rss.min() + 1e-9).astype(float)
            dmmse[b, k] = x[b, k] @ (weights @ pool / weights.sum())
    return ridge, dmmse


@pytest.mark.parametrize("noise", [0.25, 0.0])
def test_baselines_equal_a_brute_force_loop(noise, monkeypatch):
    """On pool tasks (at noise 0 the true vector fits exactly) and fresh ones; one pool vector per chunk, so the
    streaming log-sum-exp rescales at every step."""
    monkeypatch.setattr(baselines, "CHUNK_ELEMENTS", 1)
    cfg = replace(SMALL, noise=noise, n_tasks=7)
    pool = data.pool_of(cfg)
    for split in ("train", "fresh"):
        x, y = metrics.pairs(draw(cfg, 6, 1, split))
        ridge, dmmse = brute_force(x.numpy(), y.numpy(), noise, pool.numpy())
        np.testing.assert_allclose(baselines.ridge(x, y, noise).numpy(), ridge, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(baselines.dmmse(x, y, noise, pool).numpy(), dmmse, rtol=1e-7, atol=1e-7)


def test_each_baseline_wins_where_its_prior_holds():
    """dMMSE is the Bayes estimator on pool tasks, ridge on fresh ones: each has the lower MSE there (by far, at
    M = 16 and 2000 sequences: the margins below are many standard errors). Ridge's first prediction is 0, so its MSE
    is E[y^2] = E|w|^2 + sigma^2 = D + sigma^2 on fresh tasks: Var(y^2) = 3 E[s^4] - (E s^2)^2 with s^2 = |w|^2 +
    sigma^2 gives a standard deviation of 7.8 for D = 4, sigma^2 = 0.25, so a standard error of 0.17 over 2000
    sequences; 0.7 is 4 of them (the batch is seeded: the test is deterministic, the tolerance says it is not tuned)."""
    cfg = LinearRegressionConfig(dim=4, n_points=8, n_tasks=16, noise=0.25)
    on = {}
    for split in ("train", "fresh"):
        batch = draw(cfg, 2000, 2, split)
        curves = metrics.baseline_mse_by_k(cfg, batch)
        on[split] = {name: float(curve.mean()) for name, curve in curves.items()}
        if split == "fresh":
            assert abs(curves["ridge"][0] - (cfg.dim + cfg.noise)) < 0.7
    assert on["train"]["dmmse"] < 0.8 * on["train"]["ridge"]
    assert on["fresh"]["ridge"] < 0.8 * on["fresh"]["dmmse"]
    assert on["train"]["dmmse"] > cfg.noise * 0.9  # nothing beats the noise


# --- metrics, validation, readouts ----------------------------------------------------------------------------------

def test_metrics_are_finite_named_as_documented_and_the_baselines_computed_once(monkeypatch):
    cfg, batch = SMALL, draw(SMALL, 32, 4, "fresh")
    predictions = torch.randn(32, 9, 1, generator=torch.Generator().manual_seed(0))
    first = TASK.metrics(cfg, "ood", batch, predictions, {})
    names = {f"ood/{m}" for m in ("mse", "ridge_mse", "dmmse_mse", "ridge_gap", "dmmse_gap")}
    assert set(first) == names | {f"ood/mse_at_{k}" for k in range(1, cfg.n_points + 1)}
    assert all(isinstance(v, float) and math.isfinite(v) for v in first.values())
    assert first["ood/ridge_gap"] == pytest.approx(first["ood/mse"] - first["ood/ridge_mse"])
    assert first["ood/dmmse_gap"] == pytest.approx(first["ood/mse"] - first["ood/dmmse_mse"])
    assert first["ood/mse"] == pytest.approx(np.mean([first[f"ood/mse_at_{k}"] for k in range(1, 6)]))
    y = metrics.pairs(batch)[1]
    assert first["ood/mse"] == pytest.approx(float((predictions[:, ::2, 0].double() - y).square().mean()))
    assert metric_range("ood/mse") == metric_range("ood/ridge_mse") == (0.0, math.inf)
    assert metric_range(TASK.success_metric) == (-math.inf, math.inf) and not TASK.success_above
    monkeypatch.setattr(baselines, "dmmse", lambda *args: pytest.fail("recomputed for the same batch"))
    assert TASK.metrics(cfg, "ood", batch, predictions, {}) == first


@pytest.mark.parametrize("override, key", [({"dim": 0}, "task.dim"), ({"n_points": 0}, "task.n_points"),
                                           ({"n_tasks": 0}, "task.n_tasks"), ({"noise": -1.0}, "task.noise"),
                                           ({"noise": math.inf}, "task.noise")])
def test_bad_config_names_the_key(override, key):
    with pytest.raises(ConfigError) as error:
        TASK.validate(replace(SMALL, **override))
    assert error.value.key == key and str(error.value).startswith(f"{key}: must be")
    TASK.validate(replace(SMALL, noise=0.0))  # noiseless regression is valid


def test_diversity_and_names():
    assert TASK.diversity(SMALL) == {"data/n_tasks": 8.0} and TASK.diversity_axis == "data/n_tasks"
    assert TASK.run_name(SMALL) == "lr_M8_D3"


class ZeroModel(torch.nn.Module):
    """Predicts 0 everywhere: its MSE at k is E[y_k^2]."""

    def run_with_cache(self, inputs, query=None):
        return torch.zeros(*inputs.shape[:2], 1), {}


def test_readouts_give_per_k_curves_that_the_figures_draw():
    from trainables.tasks import view_of

    ood = draw(SMALL, 64, 0, "fresh")
    arrays, final = TASK.readouts(SMALL, ZeroModel(), ood, torch.Generator().manual_seed(1), 4)
    n = SMALL.n_points
    assert final == {} and np.array_equal(arrays["k"], np.arange(1, n + 1))
    for split in ("ood", "id"):
        for name in ("", "ridge_", "dmmse_"):
            assert arrays[f"{split}_{name}mse_by_k"].shape == (n,)
    assert arrays["ood_ridge_mse_by_k"][0] == pytest.approx(arrays["ood_mse_by_k"][0])  # both predict 0 at k = 1
    view = view_of(TASK)
    assert set(view.short_names) <= set(view.headline)
    assert set(view.figures(arrays)) == {"regression/mse_by_k"}
    image, caption = view.images(arrays)["regression/mse_by_k"]
    assert image.dtype == np.uint8 and image.ndim == 3 and caption


def test_the_pool_sweep_draws_the_model_beside_both_baselines_on_pool_and_fresh_tasks():
    """The paper's figure from a grid's results.csv: per split, the seeds' mean MSE and the two baselines'."""
    import pandas as pd

    from trainables.tasks.linear_regression.figures import pool_sweep

    rows = [{"task.n_tasks": m, "seed": s, **{f"{p}/{name}mse": 1.0 + m + s + i for i, name in
                                               enumerate(("", "ridge_", "dmmse_"))}}
            for m in (1, 16) for s in (0, 1) for p in ("id", "ood")]
    frame = pd.DataFrame(rows).groupby(["task.n_tasks", "seed"]).first().reset_index()
    fig = pool_sweep(frame)
    for ax in fig.axes:
        model, ridge, dmmse = (line.get_ydata() for line in ax.get_lines())
        assert list(model) == [2.5, 17.5] and list(ridge) == [3.5, 18.5] and list(dmmse) == [4.5, 19.5]
