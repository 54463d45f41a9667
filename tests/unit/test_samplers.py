"""The threshold search: bisection to the boundary, re-checks with fresh seeds, robustness to a noisy seed, and the
same answer whatever the history, as long as the evidence is the same."""
import pytest

from sweep.search.bisection import Evidence, boundary, minimal_value, next_value

VALUES = list(range(2, 14))  # widths 2..13


def run_threshold(oracle, values=VALUES, min_rate=1.0, seeds=2, limit=50):
    """Drive next_value with oracle(value, evaluation_index) -> successes out of `seeds`; return (answer, trace)."""
    pooled, trace = {}, []
    for _ in range(limit):
        value = next_value(values, pooled, min_rate)
        if value is None:
            return minimal_value(values, pooled, min_rate), trace
        e = pooled.setdefault(value, Evidence())
        e.successes += oracle(value, e.evaluations)
        e.seeds += seeds
        e.evaluations += 1
        trace.append(value)
    raise AssertionError(f"did not stop: {trace}")


@pytest.mark.parametrize("star", VALUES)
def test_bisection_finds_every_threshold_in_few_evaluations(star):
    answer, trace = run_threshold(lambda v, k: 2 if v >= star else 0)
    assert answer == star
    assert len(trace) <= 6  # ceil(log2(13)) bisections + 1 re-check; the exhaustive grid takes 12
    assert trace[0] == VALUES[(len(VALUES) - 1) // 2]


def test_the_success_side_is_always_rechecked_the_failure_side_when_split():
    answer, trace = run_threshold(lambda v, k: 2 if v >= 7 else 0)
    assert answer == 7 and trace.count(7) == 2 and trace.count(6) == 1
    answer, trace = run_threshold(lambda v, k: 2 if v >= 7 else (1 if v == 6 else 0))  # 6: one seed of two
    assert answer == 7 and trace.count(6) == 2


def test_a_lucky_success_below_the_threshold_is_caught_by_the_recheck():
    """Width 5 passes once by luck (2/2), fails its re-check (0/2): pooled 2/4 < m/n, so the search moves up to 7."""
    answer, trace = run_threshold(lambda v, k: 2 if v >= 7 or (v == 5 and k == 0) else 0)
    assert answer == 7 and 5 in trace


def test_m_of_n_pools_the_seeds_of_every_evaluation():
    # 3 of 4 seeds per evaluation; min rate 0.75 accepts, 1.0 rejects everything
    assert run_threshold(lambda v, k: 3 if v >= 5 else 0, seeds=4, min_rate=0.75)[0] == 5
    assert run_threshold(lambda v, k: 3 if v >= 5 else 0, seeds=4, min_rate=1.0)[0] is None


def test_nothing_generalizes_in_range():
    answer, trace = run_threshold(lambda v, k: 0)
    assert answer is None and trace[-1] == 13 and trace.count(13) == 1 and len(trace) <= 5


def test_boundary_ignores_a_success_below_a_failure():
    verdicts = {3: True, 5: False, 8: True, 13: True}
    assert boundary(VALUES, verdicts) == (VALUES.index(5), VALUES.index(8))
    assert boundary(VALUES, {13: False, 9: True}) == (VALUES.index(13), len(VALUES))  # no consistent success
