"""search.guide: verdicts carried between slices through R, with a fake executor (real Optuna journal storage, no
Ray): same answers as unguided bisection in fewer evaluations, pilots first, and a kill at any point of a round's
asks or tells resumes to exactly the uninterrupted sequence of evaluations (the fake executor of
tests/unit/conftest.py)."""
import optuna
import pytest

from sweep.storage.out_dir import OutDir

from sweep.search import bisection, guide, loop, samplers
from sweep.search import studies as search_studies
from sweep.search.config import load_search
from tests.conftest import CONFIGS
from trainables.errors import ConfigError

SLICES = ["search.slices=[{key: task.lengths.low, values: [2, 3, 4, 5, 6]}]", "task.max_len=40",
          "search.knob.high=16", "search.constraints=[task.lengths.low + task.lengths.width <= 19]"]
UNGUIDED = SLICES + ["search.guide.metric="]  # how a user turns the debug config's guide off
GUIDED = SLICES + ["search.guide.metric=data/max_sum_ratio", "search.guide.across=[task.lengths.low]"]


def search_in(tmp_path, overrides):
    base, search = load_search(CONFIGS / "debug_search.yaml", overrides)
    all_slices = search_studies.slices(base, search, base.name)
    tmp_path.mkdir(parents=True, exist_ok=True)
    storage = search_studies.storage_for(None, tmp_path)
    open_all = lambda: {sl.study_name: search_studies.open_study(sl, search, storage) for sl in all_slices}
    return base, search, all_slices, open_all


def answers_and_counts(search, all_slices, studies):
    """Per l_min: (K*_q, values evaluated, seeds trained) of the threshold sampler, or (the bisection's answer,
    values evaluated, evaluations)."""
    result = {}
    for sl in all_slices:
        trials = studies[sl.study_name].get_trials()
        pooled = bisection.evidence(trials, search.knob.key)
        if search.sampler == "threshold":
            fit = samplers.for_slice(search, sl.values).fit(trials)
            result[sl.point["task.lengths.low"]] = (sl.values[fit.star], len(pooled), bisection.seeds_asked(trials))
        else:
            result[sl.point["task.lengths.low"]] = (bisection.minimal_value(sl.values, pooled, 1.0), len(pooled),
                                                    sum(e.evaluations for e in pooled.values()))
    return result


@pytest.mark.parametrize("sampler", ["threshold", "bisection"])
def test_guided_search_finds_the_same_answers_in_fewer_trainings_pilot_first(tmp_path, fake_r_tune, sampler):
    plain = search_in(tmp_path / "plain", UNGUIDED + [f"search.sampler={sampler}"])
    studies = plain[3]()
    loop.run(plain[0], plain[1], plain[2], studies, OutDir(tmp_path / "plain"), extend=0)
    unguided = answers_and_counts(plain[1], plain[2], studies)
    fake_r_tune.clear()

    base, search, all_slices, open_all = search_in(tmp_path / "guided", GUIDED + [f"search.sampler={sampler}"])
    studies = open_all()
    loop.run(base, search, all_slices, studies, OutDir(tmp_path / "guided"), extend=0)
    guided = answers_and_counts(search, all_slices, studies)

    assert {low: a for low, (a, *_) in guided.items()} == {low: a for low, (a, *_) in unguided.items()}
    assert all(answer is not None for answer, *_ in guided.values())
    evaluations = lambda counts: sum(n for *_, n in counts.values())
    assert evaluations(guided) < evaluations(unguided)
    pilot_rounds = [points for points in fake_r_tune if {p["task.lengths.low"] for p in points} == {2}]
    assert pilot_rounds and fake_r_tune[:len(pilot_rounds)] == pilot_rounds  # the pilot (l_min = 2) goes alone first
    assert all(len({p["task.lengths.low"] for p in points}) > 1 for points in fake_r_tune[len(pilot_rounds):][:1])


@pytest.mark.parametrize("phase, kill_after", [("tell", 1), ("tell", 8), ("ask", 6)])
def test_a_kill_mid_round_resumes_to_the_uninterrupted_evaluations(tmp_path, fake_r_tune, monkeypatch, phase,
                                                                   kill_after):
    def sequence(studies):
        return {name: [(t.params, t.user_attrs["seed_list"], t.user_attrs["round"]) for t in study.get_trials()
                       if t.state == optuna.trial.TrialState.COMPLETE] for name, study in studies.items()}

    base, search, all_slices, open_all = search_in(tmp_path / "whole", GUIDED)
    studies = open_all()
    loop.run(base, search, all_slices, studies, OutDir(tmp_path / "whole"), extend=0)
    uninterrupted = sequence(studies)

    base, search, all_slices, open_all = search_in(tmp_path / "killed", GUIDED)
    original, calls = getattr(loop, phase), []

    def die_midway(*args):
        if len(calls) == kill_after:
            raise KeyboardInterrupt  # the driver dies: the round's later asks (or tells) never happen
        calls.append(1)
        return original(*args)

    monkeypatch.setattr(loop, phase, die_midway)
    with pytest.raises(KeyboardInterrupt):
        loop.run(base, search, all_slices, open_all(), OutDir(tmp_path / "killed"), extend=0)
    monkeypatch.setattr(loop, phase, original)
    studies = open_all()  # the re-run: zombies failed, the interrupted round re-run first
    loop.run(base, search, all_slices, studies, OutDir(tmp_path / "killed"), extend=0)
    assert sequence(studies) == uninterrupted


def test_predictions_carry_successes_down_and_failures_up_the_measure():
    values = [1, 2, 3, 4, 5]
    measures = {1: 0.9, 2: 0.5, 3: 0.35, 4: 0.28, 5: 0.2}  # R falls as the width grows
    others = [({7: bisection.Evidence(1, 1, 1), 6: bisection.Evidence(0, 1, 1)}, {7: 0.3, 6: 0.4})]
    assert guide.predictions(values, measures, others, 1.0) == {1: False, 2: False, 4: True, 5: True}
    contradicting = [({7: bisection.Evidence(1, 1, 1), 6: bisection.Evidence(0, 1, 1)}, {7: 0.4, 6: 0.3})]
    assert 3 not in guide.predictions(values, measures, contradicting, 1.0)
    assert bisection.next_value(values, {}, 1.0, predicted={1: False, 2: False, 3: False, 4: True, 5: True}) == 4


@pytest.mark.parametrize("overrides, key, meant", [
    (["search.guide.metric=ood/acc", "search.guide.across=[task.lengths.low]"], "search.guide.metric", None),
    (["search.guide.metric=data/max_sum_ratio", "search.guide.across=[task.n_trigers]"], "search.guide.across",
     "task.n_triggers"),
    (["search.slices=[{key: task.lengths.lo, values: [2, 4]}]"], "search.slices[0].key", "task.lengths.low"),
    (["search.constraints=[task.lengths.lo + task.lengths.width <= 9]"], "search.constraints[0]", "task.lengths.low"),
    (["search.guide.across=[]"], "search.guide.across", None),
])
def test_bad_guides_and_slice_keys_name_their_key(overrides, key, meant):
    """(tpe and exhaustive ignore a guide: search.sampler=exhaustive runs a guided config's reference unchanged.) A
    typo gets the key it meant."""
    with pytest.raises(ConfigError) as error:
        load_search(CONFIGS / "debug_search.yaml", overrides)
    assert error.value.key == key
    assert meant is None or f"(did you mean {meant}?)" in str(error.value)


def test_narrowing_to_other_slices_is_one_override_that_says_what_it_dropped(capsys):
    """The slices replaced by one override: the guide across the slice key gone is turned off, and the constraint
    on it reads its value in the config (3), each said in one line; the search is as if written that way."""
    base, search = load_search(CONFIGS / "debug_search.yaml", [
        "search.slices=[{key: task.n_triggers, values: [1, 2]}]", "task.lengths.low=3"])
    assert not guide.active(search) and search.constraints == ["3 + task.lengths.width <= 9"]
    notes = capsys.readouterr().err.splitlines()
    assert notes == ["headsweep: search.guide.across: task.lengths.low is no longer a slice key; the guide is off "
                     "(each slice searched on its own)",
                     "headsweep: search.constraints[0]: task.lengths.low is not swept, read as 3 "
                     "('3 + task.lengths.width <= 9')"]
    [sl] = [s for s in search_studies.slices(base, search, base.name) if s.point["task.n_triggers"] == 1]
    assert max(sl.values) == 6  # the constraint cuts the knob (high 7) at low = 3


def test_a_knob_range_that_no_slice_can_reach_is_one_line():
    """search.knob.high=40 against the constraint low + width <= 9 (slices low = 2, 4): widths 8..40 break it in every
    slice, said in one line (once the search starts: tests/integration/test_search.py) rather than searched up to 7
    without a word; the shipped range says nothing (7 is reachable at low = 2, though not at low = 4: that is the
    constraint's point)."""
    for overrides, said in ((["search.knob.high=40"], "search.knob: task.lengths.width = 8..40 breaks "
                                                       "search.constraints in every slice: not searched"),
                            ([], None)):
        base, search = load_search(CONFIGS / "debug_search.yaml", overrides)
        all_slices = search_studies.slices(base, search, base.name)
        assert max(max(sl.values) for sl in all_slices) == 7
        assert search_studies.unreachable_note(search, all_slices) == said
