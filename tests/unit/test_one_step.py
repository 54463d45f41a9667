"""The one-step model (SPEC §2): features, masking, the gather formulation against Definition 3 written out with
the one-hot X (forward, gradients, whole trials), and Algorithm 1 against the closed-form gradients."""
import math

import pytest
import torch

from trainables import config
from trainables.models import one_step
from trainables.models.one_step import OneHotOneStepModel, OneStepModel
from trainables.population import Batches, Stack
from trainables.train import init_state, train
from tests.conftest import CONFIGS

SMALL = ["task.vocab_size=10", "task.max_len=14", "task.n_triggers=2", "task.lengths.low=2", "task.lengths.high=5",
         "model.n_samples_V=64", "model.n_samples_KQ=48", "model.eta_V=3.0", "model.eta_KQ=7.0", "eval.n_id=32",
         "eval.n_ood=32"]


def test_features_are_position_current_and_previous_one_hots():
    model = OneHotOneStepModel(vocab_size=5, max_len=6)
    X = model.embed(torch.tensor([[3, 0, 4]]))[0]  # (T, D), D = 6 + 2 * 5
    assert X.shape == (3, 16)
    assert X[:, :6].argmax(1).tolist() == [0, 1, 2]  # p_t
    assert X[:, 6:11].argmax(1).tolist() == [3, 0, 4]  # e_{z_t}
    assert X[0, 11:].sum() == 0 and X[1:, 11:].argmax(1).tolist() == [3, 0]  # e_{z_{t-1}}, e_{z_0} = 0
    assert X.sum(1).tolist() == [2, 3, 3]


def test_padding_after_the_query_changes_nothing():
    torch.manual_seed(0)
    model = OneStepModel(vocab_size=7, max_len=10)
    with torch.no_grad():
        model.W_KQ.normal_(), model.W_V.normal_()
    tokens = torch.randint(7, (4, 8))
    query = torch.tensor([3, 5, 7, 4])
    logits, cache = model.run_with_cache(tokens, query)
    attention = cache["blocks.0.attn.hook_pattern"]
    padded = tokens.clone()
    padded[torch.arange(8)[None, :] > query[:, None]] = 1  # rewrite everything after each query
    logits2, cache2 = model.run_with_cache(padded, query)
    assert torch.allclose(logits, logits2) and torch.allclose(attention, cache2["blocks.0.attn.hook_pattern"])
    assert attention.shape == (4, 1, 1, 8) and (attention[0, 0, 0, 4:] == 0).all()


def random_pair(seed: int, N: int = 9, L: int = 14) -> tuple[OneStepModel, OneHotOneStepModel]:
    """The fast model and the one-hot reference with the same random (nonzero) weights."""
    fast, reference = OneStepModel(N, L), OneHotOneStepModel(N, L)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(seed)
        for p in fast.parameters():
            p.copy_(torch.randn(p.shape, generator=generator))
        reference.load_state_dict(fast.state_dict())
    return fast, reference


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gathers_equal_the_one_hot_definition_forward_and_backward(seed):
    fast, reference = random_pair(seed)
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(9, (32, 13), generator=generator)
    query = torch.randint(1, 13, (32,), generator=generator)
    targets = torch.randint(9, (32,), generator=generator)
    outputs = []
    for model in (fast, reference):
        logits, cache = model.run_with_cache(tokens, query)
        torch.nn.functional.cross_entropy(logits, targets).backward()
        outputs.append((logits, cache["blocks.0.attn.hook_pattern"], model.W_KQ.grad, model.W_V.grad))
    for mine, theirs in zip(*outputs):
        assert torch.allclose(mine, theirs, rtol=1e-5, atol=1e-5)
    assert outputs[0][2].abs().max() > 1e-3  # the gradients compared are not all zero


def test_a_paper_trial_equals_the_one_hot_definitions_on_every_metric(monkeypatch):
    cfg = config.load(CONFIGS / "paper_theory.yaml", ["model.n_samples_V=2048", "model.n_samples_KQ=2048"])
    fast = train(cfg)
    monkeypatch.setattr(one_step.SPEC, "build", lambda model_cfg, d_vocab, n_ctx: OneHotOneStepModel(d_vocab, n_ctx))
    reference = train(cfg)
    assert set(fast.metrics) == set(reference.metrics)
    for key, value in reference.metrics.items():
        if isinstance(value, float) and key != "seconds" and not math.isnan(value):
            assert fast.metrics[key] == pytest.approx(value, rel=1e-5, abs=1e-5), key
    for key in ("W_KQ", "W_V", "acc_by_pair"):
        assert torch.allclose(torch.from_numpy(fast.arrays[key]), torch.from_numpy(reference.arrays[key]),
                              rtol=1e-5, atol=1e-5, equal_nan=True), key


def closed_form_algorithm_1(cfg):
    """Algorithm 1 by hand: the two gradients written out, on the same fresh batches train() draws (its stream)."""
    state = init_state(cfg)[0]
    batches = Batches([cfg], [state])
    model = OneHotOneStepModel(cfg.task.vocab_size, cfg.task.max_len)
    N = cfg.task.vocab_size

    def features(batch):
        X = model.embed(batch.tokens)  # (B, T, D)
        valid = (torch.arange(X.shape[1])[None, :] <= batch.query[:, None]).double()  # (B, T) keys up to the query
        return X.double(), valid, X[torch.arange(len(X)), batch.query].double()  # x_T: (B, D)

    # Step 1 at W_KQ = W_V = 0: attention is uniform over the T positions and softmax(f) is uniform over N, so
    # grad W_V = mean_b (1/N - e_o) x̄_b^T with x̄ the average feature.
    batch = batches.draw(cfg.model.n_samples_V).member(0)
    X, valid, _ = features(batch)
    x_mean = (X * valid[..., None]).sum(1) / valid.sum(1, keepdim=True)  # (B, D)
    residual = 1 / N - torch.nn.functional.one_hot(batch.scored_targets(), N).double()  # (B, N): softmax(f) - e_o
    W_V = -cfg.model.eta_V * residual.T @ x_mean / len(batch.query)  # (N, D)

    # Step 2 at W_KQ = 0 and the new W_V: d loss / d s_t = a_t (u_t - sum_t' a_t' u_t') with a uniform and
    # u_t = x_t^T W_V^T g, g = softmax(f) - e_o; then grad W_KQ = mean_b sum_t (d loss / d s_t) x_t x_T^T.
    batch = batches.draw(cfg.model.n_samples_KQ).member(0)
    X, valid, x_T = features(batch)
    a = valid / valid.sum(1, keepdim=True)  # (B, T)
    f = torch.einsum("nd,btd,bt->bn", W_V, X, a)
    g = f.softmax(-1) - torch.nn.functional.one_hot(batch.scored_targets(), N).double()  # (B, N)
    u = torch.einsum("btd,nd,bn->bt", X, W_V, g)  # (B, T)
    ds = a * (u - (a * u).sum(1, keepdim=True))  # (B, T)
    grad_KQ = torch.einsum("bt,btd,be->de", ds, X, x_T) / len(batch.query)  # (D, D): rows key, columns query
    return W_V, -cfg.model.eta_KQ * grad_KQ


def test_algorithm_1_equals_the_closed_form_gradient_steps():
    cfg = config.load(CONFIGS / "paper_theory.yaml", SMALL)
    result = train(cfg)
    W_V, W_KQ = closed_form_algorithm_1(cfg)
    assert torch.allclose(torch.from_numpy(result.arrays["W_V"]).double(), W_V, atol=1e-5)
    assert torch.allclose(torch.from_numpy(result.arrays["W_KQ"]).double(), W_KQ, rtol=1e-4, atol=1e-5)
    assert W_KQ.abs().max() > 1e-2  # the check is not vacuous
    assert result.metrics["steps"] == 2


def test_the_w_kq_step_uses_the_updated_w_v():
    """At W_V = 0 the W_KQ gradient would vanish (f = 0 for every attention); a real step means W_V came first."""
    cfg = config.load(CONFIGS / "paper_theory.yaml", SMALL)
    assert abs(train(cfg).arrays["W_KQ"]).max() > 1e-2


def test_each_step_differentiates_only_the_weight_it_updates():
    """Algorithm 1's W_V step leaves W_KQ without a gradient (its backward through the attention would be wasted
    work) and the W_KQ step W_V; the results above show the steps themselves are unchanged."""
    cfg = config.load(CONFIGS / "paper_theory.yaml", SMALL)
    state, _, _ = init_state(cfg)
    stack, batches, model = Stack([state]), Batches([cfg], [state]), state.model  # a pack of one: the member's module
    stack.step(batches.draw(state.phases[0].batch_size), 0)
    assert model.W_V.grad is not None and model.W_KQ.grad is None
    model.W_V.grad = None
    stack.step(batches.draw(state.phases[1].batch_size), 1)
    assert model.W_KQ.grad is not None and model.W_V.grad is None
