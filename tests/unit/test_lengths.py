"""Length distributions D_l and their diversity measures (SPEC §1: max-sum ratio, Proposition 8)."""
import math
from fractions import Fraction

import pytest

from trainables.errors import ConfigError
from trainables.tasks.lengths import (
    LengthsConfig,
    data_cost,
    distribution,
    diversity_metrics,
    entropy,
    max_sum_ratio,
    optimal_distribution,
)


def uniform_q(low: int, width: int) -> dict[int, Fraction]:
    """Exact Unif{low .. low + width - 1}."""
    return {l: Fraction(1, width) for l in range(low, low + width)}


def normalised(raw: dict[int, Fraction]) -> dict[int, Fraction]:
    total = sum(raw.values())
    return {l: Fraction(w) / total for l, w in raw.items()}


def assert_matches(q: dict[int, float], exact: dict[int, Fraction]) -> None:
    """Same support in the same (increasing) order, and the same probabilities."""
    assert list(q) == list(exact)
    assert [q[l] for l in q] == pytest.approx([float(exact[l]) for l in exact], rel=1e-12)


# --- max-sum ratio, exactly -------------------------------------------------------------------------------------------


def test_ratio_of_uniform_1_to_10_is_inverse_harmonic_number():
    """R(Unif{1..10}) = 1 / H_10 = 2520 / 7381, exactly."""
    assert max_sum_ratio(uniform_q(1, 10)) == Fraction(2520, 7381)


@pytest.mark.parametrize("low, width", [(1, 1), (1, 4), (3, 13), (5, 2), (7, 9), (10, 30)])
def test_ratio_of_uniform_matches_closed_form(low, width):
    """R(Unif{l0..l0+K-1}) = (1/l0) / sum_{k<K} 1/(l0+k), exactly."""
    expected = Fraction(1, low) / sum(Fraction(1, low + k) for k in range(width))
    assert max_sum_ratio(uniform_q(low, width)) == expected


def test_ratio_falls_as_width_grows():
    """With l0 fixed, R strictly decreases in K (a wider support dilutes the positional signal)."""
    for low in (1, 3, 8):
        ratios = [max_sum_ratio(uniform_q(low, width)) for width in range(1, 16)]
        assert ratios[0] == 1
        assert all(a > b for a, b in zip(ratios, ratios[1:]))


def test_ratio_falls_as_lowest_length_grows():
    """With K fixed, R strictly decreases in l0."""
    for width in (2, 5, 13):
        ratios = [max_sum_ratio(uniform_q(low, width)) for low in range(1, 16)]
        assert all(a > b for a, b in zip(ratios, ratios[1:]))


def test_ratio_of_a_two_point_distribution_by_hand():
    """q = {2: 1/3, 5: 2/3}: q/l = 1/6 and 2/15, so R = (1/6) / (1/6 + 2/15) = 5/9."""
    assert max_sum_ratio({2: Fraction(1, 3), 5: Fraction(2, 3)}) == Fraction(5, 9)


def test_ratio_picks_the_max_not_the_first_length():
    """q = {1: 1/10, 4: 9/10}: q/l = 1/10 and 9/40, the max is at l = 4, R = (9/40) / (13/40) = 9/13."""
    assert max_sum_ratio({1: Fraction(1, 10), 4: Fraction(9, 10)}) == Fraction(9, 13)


def test_power_exponent_one_on_1_to_n_is_proposition_8():
    """power(1, n, exponent=1) is q_l = l / Z: the same as optimal_distribution(n), and R = 1/n."""
    for n in (1, 4, 7):
        q = distribution(LengthsConfig(family="power", low=1, high=n, exponent=1.0), n_triggers=99)
        exact = optimal_distribution(n)
        assert_matches(q, exact)
        assert max_sum_ratio(q) == pytest.approx(1 / n)


@pytest.mark.parametrize("n", range(1, 11))
def test_optimal_distribution_has_ratio_and_cost_exactly(n):
    """Proposition 8: q_l = l / Z on {1..n} has R = 1/n and data cost E[l^2] = n(n+1)/2, both exactly."""
    q = optimal_distribution(n)
    assert list(q) == list(range(1, n + 1))
    assert sum(q.values()) == 1
    assert max_sum_ratio(q) == Fraction(1, n)
    assert data_cost(q) == Fraction(n * (n + 1), 2)


# --- distribution(cfg) per family ---------------------------------------------------------------------------------


@pytest.mark.parametrize("low, high", [(3, 15), (1, 1), (2, 9)])
def test_uniform_family_matches_exact(low, high):
    """uniform(low, high) is 1/K on {low..high}, and its R matches the exact closed form."""
    q = distribution(LengthsConfig(family="uniform", low=low, high=high), n_triggers=4)
    exact = uniform_q(low, high - low + 1)
    assert_matches(q, exact)
    assert sum(q.values()) == pytest.approx(1.0)
    assert max_sum_ratio(q) == pytest.approx(float(max_sum_ratio(exact)))


def test_weights_family_indexes_from_one_and_drops_zeros():
    """weights[i] is the weight of l = i + 1; zero weights leave the support."""
    q = distribution(LengthsConfig(family="weights", weights=[0.0, 1.0, 3.0, 0.0, 2.0]), n_triggers=4)
    exact = {2: Fraction(1, 6), 3: Fraction(1, 2), 5: Fraction(1, 3)}
    assert_matches(q, exact)
    assert sum(q.values()) == pytest.approx(1.0)
    assert max_sum_ratio(q) == pytest.approx(float(max_sum_ratio(exact)))


def test_weights_two_point_ratio_matches_hand_value():
    """weights = [0, 1, 0, 0, 2] is the two-point q = {2: 1/3, 5: 2/3}, with R = 5/9."""
    q = distribution(LengthsConfig(family="weights", weights=[0, 1, 0, 0, 2]), n_triggers=4)
    assert_matches(q, {2: Fraction(1, 3), 5: Fraction(2, 3)})
    assert max_sum_ratio(q) == pytest.approx(5 / 9)


@pytest.mark.parametrize("low, high, exponent", [(3, 15, 1.0), (2, 6, 2.0), (1, 5, -1.0), (4, 4, 3.0)])
def test_power_family_matches_exact(low, high, exponent):
    """power(low, high, a) is q_l ∝ l^a on {low..high} (integer a, so the exact weights are Fractions)."""
    q = distribution(LengthsConfig(family="power", low=low, high=high, exponent=exponent), n_triggers=4)
    exact = normalised({l: Fraction(l) ** int(exponent) for l in range(low, high + 1)})
    assert_matches(q, exact)
    assert sum(q.values()) == pytest.approx(1.0)
    assert max_sum_ratio(q) == pytest.approx(float(max_sum_ratio(exact)))


def test_optimal_family_zero_means_n_triggers():
    """optimal with optimal_n = 0 is Proposition 8 on {1..N_trg}; a positive optimal_n overrides N_trg."""
    q = distribution(LengthsConfig(family="optimal", optimal_n=0), n_triggers=6)
    assert_matches(q, optimal_distribution(6))
    assert sum(q.values()) == pytest.approx(1.0)
    assert max_sum_ratio(q) == pytest.approx(1 / 6)
    assert_matches(distribution(LengthsConfig(family="optimal", optimal_n=3), n_triggers=6), optimal_distribution(3))


def test_optimal_family_ignores_low_and_high():
    """The optimal family's support is {1..n}, whatever low and high say."""
    q = distribution(LengthsConfig(family="optimal", low=5, high=9, optimal_n=4), n_triggers=8)
    assert list(q) == [1, 2, 3, 4]


# --- entropy, width, cost -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [1, 2, 5, 13])
def test_entropy_of_uniform_is_log_width(width):
    """H(Unif over K lengths) = log K nats."""
    q = distribution(LengthsConfig(family="uniform", low=3, high=3 + width - 1), n_triggers=4)
    assert entropy(q) == pytest.approx(math.log(width))


def test_entropy_of_a_two_point_distribution_by_hand():
    """H({1/4, 3/4}) = -(1/4 log 1/4 + 3/4 log 3/4)."""
    assert entropy({2: Fraction(1, 4), 7: Fraction(3, 4)}) == pytest.approx(
        -(0.25 * math.log(0.25) + 0.75 * math.log(0.75)))


def test_diversity_metrics_report_support_width_and_inverse_ratio():
    """data/width is the number of lengths with q_l > 0 (zeros in weights do not count); data/inv_ratio = 1/R."""
    q = distribution(LengthsConfig(family="weights", weights=[0.0, 1.0, 3.0, 0.0, 2.0, 0.0]), n_triggers=4)
    m = diversity_metrics(q)
    assert m["data/width"] == 3.0
    assert m["data/max_sum_ratio"] == pytest.approx(float(max_sum_ratio({2: Fraction(1, 6), 3: Fraction(1, 2),
                                                                         5: Fraction(1, 3)})))
    assert m["data/inv_ratio"] == pytest.approx(1 / m["data/max_sum_ratio"])
    assert m["data/cost"] == pytest.approx(4 / 6 + 9 / 2 + 25 / 3)
    assert m["data/entropy"] == pytest.approx(entropy(q))


def test_diversity_metrics_width_of_uniform_is_k():
    """For uniform(low, high) the width is K = high - low + 1."""
    assert diversity_metrics(distribution(LengthsConfig(low=3, high=15), n_triggers=4))["data/width"] == 13.0


# --- invalid configs ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg, n_triggers, key", [
    (LengthsConfig(family="uniform", low=5, high=4), 4, "high"),
    (LengthsConfig(family="uniform", low=0, high=4), 4, "low"),
    (LengthsConfig(family="uniform", low=-2, high=4), 4, "low"),
    (LengthsConfig(family="power", low=6, high=2), 4, "high"),
    (LengthsConfig(family="power", low=0, high=2), 4, "low"),
    (LengthsConfig(family="weights", weights=[1.0, -0.5, 2.0]), 4, "weights"),
    (LengthsConfig(family="weights", weights=[1.0, math.nan]), 4, "weights"),
    (LengthsConfig(family="weights", weights=[1.0, math.inf]), 4, "weights"),
    (LengthsConfig(family="weights", weights=[0.0, 0.0, 0.0]), 4, "weights"),
    (LengthsConfig(family="weights", weights=[]), 4, "weights"),
    (LengthsConfig(family="gaussian"), 4, "family"),
    (LengthsConfig(family="Uniform"), 4, "family"),
    (LengthsConfig(family="optimal", optimal_n=-1), 4, "optimal_n"),
    (LengthsConfig(family="optimal", optimal_n=0), 0, "optimal_n"),
], ids=["high<low", "low=0", "low<0", "power high<low", "power low=0", "negative weight", "nan weight",
        "inf weight", "all-zero weights", "no weights", "unknown family", "family is case-sensitive",
        "optimal_n<0", "optimal_n=0 and no triggers"])
def test_invalid_config_raises_config_error_with_key(cfg, n_triggers, key):
    """Every config that describes no distribution raises ConfigError naming the offending key."""
    with pytest.raises(ConfigError) as info:
        distribution(cfg, n_triggers)
    assert info.value.key == key


def test_optimal_distribution_rejects_zero():
    """optimal_distribution(0) has no support: ConfigError on optimal_n."""
    with pytest.raises(ConfigError) as info:
        optimal_distribution(0)
    assert info.value.key == "optimal_n"


def test_power_with_non_finite_exponent_raises_config_error():
    """A NaN exponent describes no distribution, so it must be a ConfigError on `exponent`."""
    with pytest.raises(ConfigError) as info:
        distribution(LengthsConfig(family="power", low=3, high=15, exponent=math.nan), n_triggers=4)
    assert info.value.key == "exponent"


def test_power_with_large_exponent_is_a_distribution_or_a_config_error():
    """A large finite exponent either gives a proper distribution (finite, sums to 1) or a ConfigError, never a
    crash."""
    try:
        q = distribution(LengthsConfig(family="power", low=3, high=15, exponent=1000.0), n_triggers=4)
    except ConfigError:
        return
    assert all(math.isfinite(p) and p > 0 for p in q.values())
    assert sum(q.values()) == pytest.approx(1.0)
