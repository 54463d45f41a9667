"""A tpe search over params with a metric to minimise (the distribution search): validation, candidates from
Optuna's params, point ids of list values, and the loop with a fake executor (real Optuna journal storage, no Ray)."""
import json

import optuna
import pytest
import yaml

from sweep.search import loop, tables
from sweep.search import studies as search_studies
from sweep.storage.out_dir import OutDir
from sweep.search.config import load_search
from sweep.space import point_id
from tests.conftest import CONFIGS
from tests.unit.conftest import R_NEEDED
from trainables.errors import ConfigError
from trainables.tasks.lengths import data_cost

DEBUG = CONFIGS / "debug_optimal_distribution.yaml"


def setup(tmp_path, *overrides):
    base, search = load_search(DEBUG, list(overrides))
    all_slices = search_studies.slices(base, search, base.name)
    storage = search_studies.storage_for(None, tmp_path)
    studies = {sl.study_name: search_studies.open_study(sl, search, storage) for sl in all_slices}
    return base, search, all_slices, studies, storage


def write_config(tmp_path, search_changes: dict) -> str:
    raw = yaml.safe_load(DEBUG.read_text())
    changes = dict(search_changes)
    raw["search"] |= changes | {"tpe": raw["search"].get("tpe", {}) | changes.get("tpe", {})}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


@pytest.mark.parametrize("changes, key", [
    ({"sampler": "threshold"}, "search.knob.key"),  # no knob: bisection has nothing to bisect
    ({"sampler": "grid", "knob": {"key": "task.lengths.low", "low": 1, "high": 3}}, "search.tpe.params"),
    ({"tpe": {"params": []}, "knob": {"key": "task.lengths.low"}, "sampler": "grid"}, "search.tpe.minimize"),
    ({"per_round": 0}, "search.per_round"),
    ({"tpe": {"params": [{"key": "task.lengths.nope"}]}}, "search.tpe.params[0].key"),
    ({"tpe": {"params": [{"key": "task.lengths.exponent", "type": "complex"}]}}, "search.tpe.params[0].type"),
    ({"tpe": {"params": [{"key": "task.lengths.exponent", "low": 1.0, "high": 1.0}]}}, "search.tpe.params[0].high"),
    ({"tpe": {"params": [{"key": "task.lengths.exponent", "low": 0.0, "log": True}]}}, "search.tpe.params[0].low"),
    ({"tpe": {"params": [{"key": "task.lengths.exponent", "when": {"task.vocab_size": 16}}]}},
     "search.tpe.params[0].when"),
    ({"reference": {"task.lengths.shape": "optimal"}}, "search.reference.task.lengths.shape"),
    ({"reference": {"task.lengths.family": "cubic"}}, "task.lengths.family"),
])
def test_bad_params_name_their_key(tmp_path, changes, key):
    path = write_config(tmp_path, changes)
    with pytest.raises(ConfigError) as error:
        base, search = load_search(path, [])
        search_studies.slices(base, search, base.name)
    assert error.value.key == key


def test_threshold_with_per_round_above_one_is_refused(tmp_path):
    with pytest.raises(ConfigError) as error:
        load_search(CONFIGS / "debug_search.yaml", ["search.per_round=2"])
    assert error.value.key == "search.per_round"


def test_params_apply_only_to_their_slices_and_lists_are_gathered_back():
    base, search = load_search(DEBUG, [])
    power, weights = search_studies.slices(base, search, base.name)
    assert list(power.distributions("")) == ["task.lengths.low", "task.lengths.high", "task.lengths.exponent"]
    assert list(weights.distributions("")) == [f"task.lengths.weights[{i}]" for i in range(6)]
    params = {f"task.lengths.weights[{i}]": w for i, w in enumerate([0.1 + 0.2, 0, 1.0, 0.25, 0.5, 0.75])}
    # 0.30000000000000004 rounded
    assert weights.candidate(params, "") == {"task.lengths.weights": [0.3, 0, 1.0, 0.25, 0.5, 0.75]}


def test_point_ids_of_lists_read_well_and_long_ones_stay_unique_and_short():
    assert point_id({"task.lengths.weights": [0.5, 1, 0], "seed": 0}) == "weights=0.5_1_0,seed=0"
    long_a = {"task.lengths.weights": [0.05 * i for i in range(20)], "seed": 0}
    long_b = {"task.lengths.weights": [0.05 * i for i in range(20)], "seed": 1}
    assert len(point_id(long_a)) <= 120 and point_id(long_a) != point_id(long_b)
    assert point_id(long_a) == point_id(dict(long_a))  # a function of the point alone: resumption finds it


def test_distribution_search_finds_cheap_feasible_distributions_and_evaluates_the_reference_once(tmp_path, fake_r_tune):
    base, search, all_slices, studies, storage = setup(tmp_path)
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    references = [p for points in fake_r_tune for p in points if p["task.lengths.family"] == "optimal"]
    assert references == [{"task.lengths.family": "optimal", "seed": 0}]  # both slices share Proposition 8's point
    assert len(fake_r_tune) == 2  # budget 6 at 3 candidates a round
    for study in studies.values():
        done = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE]
        assert len(done) == 6
        for trial in done:  # the constraint says whether the candidate generalized
            assert (trial.constraints["success"] <= 0) == (trial.user_attrs["successes"] == 1)

    best = tables.best_rows(studies, all_slices, search, base, tmp_path)
    for (_, row), study in zip(best.iterrows(), studies.values()):
        feasible = [t for t in study.get_trials() if t.state.name == "COMPLETE" and t.constraints["success"] <= 0]
        assert row["n_feasible"] == len(feasible)
        if feasible:
            assert row["data/cost"] == min(t.value for t in feasible)
            assert row["data/max_sum_ratio"] <= R_NEEDED
            assert row["data/cost"] == pytest.approx(data_cost(row["q"]))
        assert row["reference data/cost"] == 3.0 and row["reference success_rate"] == 0.0  # q = (1/3, 2/3): R = 1/2

    # a re-run with the budget spent asks nothing and trains nothing
    studies = {sl.study_name: search_studies.open_study(sl, search, storage) for sl in all_slices}
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    assert len(fake_r_tune) == 2


def test_invalid_proposals_are_pruned_with_their_reason(tmp_path, fake_r_tune):
    """All-zero weights leave an empty support: Optuna's proposal is told PRUNED, never trained."""
    base, search, all_slices, studies, _ = setup(tmp_path)
    weights_study = studies[all_slices[1].study_name]
    weights_study.enqueue_trial({f"task.lengths.weights[{i}]": 0.0 for i in range(6)})
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    pruned = [t for t in weights_study.get_trials() if t.state == optuna.trial.TrialState.PRUNED]
    assert pruned and "positive weight" in pruned[0].user_attrs["pruned_because"]
    trained = [p for points in fake_r_tune for p in points if p["task.lengths.family"] == "weights"]
    assert all(any(w > 0 for w in p["task.lengths.weights"]) for p in trained)


def test_a_repeated_candidate_in_one_round_gets_fresh_seeds(tmp_path, fake_r_tune):
    base, search, all_slices, studies, _ = setup(tmp_path, "search.budget.per_slice=3")
    power = studies[all_slices[0].study_name]
    same = {"task.lengths.low": 1, "task.lengths.high": 6, "task.lengths.exponent": 1.0}
    power.enqueue_trial(same)
    power.enqueue_trial(same)
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    seeds = [t.user_attrs["seed_list"] for t in power.get_trials() if t.params == same]
    assert seeds == [[0], [1]]


def test_success_constraint_is_the_graded_shortfall_of_the_mth_best_seed(tmp_path, fake_r_tune):
    base, search = load_search(CONFIGS / "debug_search.yaml", ["search.sampler=tpe",
                                                                         "search.success.seeds=[0,1,2]",
                                                                         "search.success.min_seeds=2"])
    study = optuna.create_study()
    cases = (([0.95, 0.5, 0.91], -0.01), ([0.95, 0.5, 0.7], 0.2), ([float("nan")] * 3, 1e6))
    for case, (accs, shortfall) in enumerate(cases):
        trial = study.ask({"task.lengths.width": optuna.distributions.IntDistribution(1, 7)})
        points = []
        for seed, acc in enumerate(accs):
            point = {"task.lengths.width": trial.params["task.lengths.width"], "seed": seed, "case": case}
            (tmp_path / "trials" / point_id(point)).mkdir(parents=True)
            (tmp_path / "trials" / point_id(point) / "result.json").write_text(json.dumps({"ood/acc": acc}))
            points.append(point)
        loop.tell(study, trial, points, search, tmp_path)
        assert study.trials[-1].constraints["success"] == pytest.approx(shortfall)


@pytest.mark.parametrize("values, kind", [([1, 2, 3, 4], optuna.distributions.IntDistribution),
                                          ([2, 8, 32], optuna.distributions.CategoricalDistribution),
                                          ([0.1, 0.5], optuna.distributions.CategoricalDistribution)])
def test_tpe_asks_only_for_the_knob_values_given(values, kind):
    """A range of every integer is an IntDistribution; sparse values (2, 8, 32) are choices, never 17."""
    sl = search_studies.Slice(point={}, values=values, study_name="s", params=[])
    asked = sl.distributions("task.k")["task.k"]
    assert isinstance(asked, kind)
    if kind is optuna.distributions.CategoricalDistribution:
        assert list(asked.choices) == values
