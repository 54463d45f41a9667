"""Several drivers on one study (sweep/search/owners.py), with real Optuna storages (a journal file and SQLite) and
real processes standing in for the other drivers: which trials are zombies, which study is taken, which of two
simultaneous asks goes ahead. Two real searches at once are in tests/integration/test_concurrent_search.py."""
import datetime
import subprocess
import time
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from sweep.storage.out_dir import OutDir

from sweep.search import loop, owners, samplers
from sweep.search import studies as search_studies
from sweep.search.config import load_search
from tests.conftest import CONFIGS
from tests.unit.conftest import WIDTH_NEEDED
from trainables.io import write_json
from sweep.space import member_dir

KEY = "task.lengths.width"
ONE_SLICE = "search.slices=[{key: task.lengths.low, values: [2]}]"


@pytest.fixture(params=["journal", "sqlite"])
def storage(request, tmp_path):
    if request.param == "journal":
        return search_studies.storage_for(None, tmp_path)
    return search_studies.storage_for(f"sqlite:///{tmp_path / 'studies.db'}", tmp_path)


@pytest.fixture
def peer():
    """The identity of another live driver on this host: a process this test started (and stops, by its pid)."""
    process = subprocess.Popen(["sleep", "300"])
    yield owners.driver(process.pid)
    process.kill()
    process.wait()


@pytest.fixture
def dead():
    """The identity of a driver that has exited."""
    process = subprocess.Popen(["sleep", "300"])
    identity = owners.driver(process.pid)
    process.kill()
    process.wait()
    return identity


def open_one(storage, *overrides):
    # the bisection sampler: these tests follow its candidates (owners.py is the same for every sampler)
    base, search = load_search(CONFIGS / "debug_search.yaml", [ONE_SLICE, "search.guide.metric=",
                                                               "search.sampler=bisection", *overrides])
    [sl] = search_studies.slices(base, search, base.name)
    return base, search, sl, search_studies.open_study(sl, search, storage, search_studies.fingerprint(base, search))


def ask_as(study, sl, who):
    """Ask in `who`'s name the value the bisection sampler chooses from the study's completed trials."""
    chosen = {KEY: samplers.Bisection(KEY, sl.values, 1.0, 20).choose(study.get_trials(), 20, {})}
    return owners.ask(study, sl.distributions(KEY), chosen, who)


def states(study) -> list[TrialState]:
    return [t.state for t in study.get_trials()]


def left_long_ago(study, sl) -> int:
    """A RUNNING trial with no driver, started longer than GRACE_S ago (a killed driver's leftover, or one from
    before drivers were recorded); its number."""
    trial = optuna.trial.create_trial(state=TrialState.RUNNING, params={KEY: sl.values[0]},
                                      distributions={KEY: sl.distributions(KEY)[KEY]})
    trial.datetime_start -= datetime.timedelta(seconds=owners.GRACE_S + 1)
    study.add_trial(trial)
    return study.get_trials()[-1].number


def test_a_trial_records_its_driver(storage):
    _, _, sl, study = open_one(storage)
    trial, in_flight = owners.ask(study, sl.distributions(KEY), {KEY: sl.values[2]})
    [frozen] = study.get_trials()
    assert frozen.user_attrs[owners.DRIVER] == owners.driver() and in_flight == []
    assert frozen.state == TrialState.RUNNING and frozen.params == trial.params == {KEY: sl.values[2]}


def test_only_trials_of_gone_drivers_are_failed_as_zombies(storage, peer, dead):
    base, search, sl, study = open_one(storage)
    elsewhere = {"host": "another-host", "boot": "b", "pid": 1, "started": 1}
    mine, peers, deads = ask_as(study, sl, owners.driver())[0], ask_as(study, sl, peer)[0], ask_as(study, sl, dead)[0]
    fresh, stale = ask_as(study, sl, elsewhere)[0], ask_as(study, sl, elsewhere)[0]
    stale.set_user_attr(owners.HEARTBEAT, time.time() - owners.STALE_S - 1)  # its host stopped saying it is alive
    legacy = left_long_ago(study, sl)
    asking = study.ask(sl.distributions(KEY)).number  # a driver between study.ask and writing its record
    reopened = search_studies.open_study(sl, search, storage, search_studies.fingerprint(base, search))
    by_number = {t.number: t for t in reopened.get_trials()}
    alive = [peers.number, fresh.number, asking]
    assert all(by_number[n].state == TrialState.RUNNING for n in alive) and not owners.zombies(reopened) & set(alive)
    # this process's own running trial too: a driver opens its studies before asking, so it is a leftover of an
    # interrupted earlier run in this process (tests/unit/test_guide.py kills and re-runs a search in-process)
    failed = [mine.number, deads.number, stale.number, legacy]
    assert all(by_number[n].state == TrialState.FAIL for n in failed) and owners.zombies(reopened) == set(failed)
    assert owners.fail_zombies(reopened) == []  # nothing left to fail, and failing twice is harmless


def test_a_trial_without_its_driver_yet_is_live_for_the_grace_period(storage):
    """study.ask creates a trial before its driver can write its record: meanwhile the trial is another live
    driver's (its study taken, a later ask gives way to it); past GRACE_S it is a zombie."""
    _, _, sl, study = open_one(storage)
    asking = study.ask(sl.distributions(KEY))  # another driver, inside owners.ask
    _, in_flight = ask_as(study, sl, owners.driver())
    assert owners.lost_to(in_flight).number == asking.number and owners.taken(study)
    assert owners.fail_zombies(study) == []
    [frozen] = in_flight
    assert owners.alive(frozen, now=time.time() + owners.GRACE_S - 5)
    assert not owners.alive(frozen, now=time.time() + owners.GRACE_S + 1)


def test_a_study_with_a_live_peers_trial_is_taken_and_a_dead_ones_is_not(storage, peer, dead):
    _, _, sl, study = open_one(storage)
    ask_as(study, sl, dead)
    assert not owners.taken(study)
    ask_as(study, sl, peer)
    assert owners.taken(study) and not owners.taken(study, me=peer)


def test_of_two_simultaneous_asks_of_one_candidate_the_earlier_goes_ahead(storage, peer):
    """Both drivers saw the study free; the threshold sampler, a function of the completed trials, gives both the
    same width. The later trial saw the earlier still running when it was created: it gives way, from both sides."""
    _, _, sl, study = open_one(storage)
    first, first_in_flight = ask_as(study, sl, peer)
    second, second_in_flight = ask_as(study, sl, owners.driver())
    assert first.params == second.params  # a duplicate, were both trained
    assert owners.lost_to(first_in_flight, me=peer) is None  # the peer's view: it goes ahead
    assert owners.lost_to(second_in_flight).number == first.number  # ours: we give way


def test_the_loop_fails_the_trial_that_gives_way_and_trains_nothing(storage, peer, tmp_path):
    base, search, sl, study = open_one(storage)
    ask_as(study, sl, peer)  # the peer asked a moment before us
    checks, base_dict = search.constraint_checks(), search_studies.config.to_dict(base)
    sampler = samplers.for_slice(search, sl.values)
    chosen = sampler.next(study.get_trials(), sampler.per_slice)
    assert loop.ask(study, sl, sampler, chosen, sampler.per_slice, search, checks, base_dict, round_index=1) is None
    [_, ours] = study.get_trials()
    assert ours.state == TrialState.FAIL and ours.user_attrs[owners.LOST_TO] == 0 and "seed_list" not in ours.user_attrs
    assert owners.taken(study)  # and the study is left to the peer this round


def test_a_trial_whose_peer_died_goes_ahead(storage, dead):
    _, _, sl, study = open_one(storage)
    ask_as(study, sl, dead)
    _, in_flight = ask_as(study, sl, owners.driver())
    assert owners.lost_to(in_flight) is None


def test_seeds_count_only_earlier_evaluations(storage, peer):
    """Re-evaluations get fresh seeds by trial number: a later ask of the same candidate (by any driver) never
    shifts the seeds of an earlier one."""
    _, search, sl, study = open_one(storage, "search.success.seeds=[0,1]")
    first, _ = ask_as(study, sl, owners.driver())
    second, _ = ask_as(study, sl, peer)
    assert second.params == first.params
    sampler, trials = samplers.for_slice(search, sl.values), study.get_trials()
    assert sampler.seeds(trials, first, 0, 20) == [0, 1] and sampler.seeds(trials, second, 0, 20) == [2, 3]


def test_the_rounds_wait_for_a_live_peer_and_go_on_with_its_result(storage, peer, tmp_path, monkeypatch):
    """While another driver trains the study's candidate, this driver's rounds yield nothing to train; once the
    peer has told its result, they ask the next candidate, informed by it."""
    monkeypatch.setattr(loop, "POLL_S", 0.0)
    base, search, sl, study = open_one(storage)
    theirs, _ = ask_as(study, sl, peer)
    rounds = loop.rounds(base, search, [sl], {sl.study_name: study}, tmp_path, extend=0)
    assert next(rounds) == [] and next(rounds) == []
    point = sl.point | {KEY: theirs.params[KEY], "seed": 0}
    write_json(member_dir(tmp_path, point) / "result.json", {"ood/acc": 1.0, "status": "completed"})
    theirs.set_user_attr("seed_list", [0])
    loop.tell(study, theirs, [point], search, tmp_path)  # the peer finishes its trial
    [ours] = next(rounds)
    assert ours[KEY] != theirs.params[KEY] and ours[KEY] < theirs.params[KEY]  # bisection went on below a success
    rounds.close()


def test_a_dead_peers_candidate_is_asked_again_with_the_same_seeds(storage, dead, tmp_path, fake_width_tune):
    base, search, sl, study = open_one(storage)
    theirs, _ = ask_as(study, sl, dead)
    opened = {sl.study_name: search_studies.open_study(sl, search, storage)}
    loop.run(base, search, [sl], opened, OutDir(tmp_path), extend=0)
    trials = study.get_trials()
    assert trials[0].state == TrialState.FAIL and owners.zombies(study) == {0}
    assert trials[1].params == theirs.params and trials[1].user_attrs["seed_list"] == [0]
    pooled = optuna_evidence(study)
    assert min(v for v, ok in pooled.items() if ok) == WIDTH_NEEDED


def optuna_evidence(study) -> dict[int, bool]:
    return {t.params[KEY]: t.user_attrs["successes"] > 0 for t in study.get_trials() if t.state == TrialState.COMPLETE}


def test_with_a_live_peer_in_the_roster_a_driver_asks_in_its_share_of_the_free_studies(storage, peer, dead):
    base, search = load_search(CONFIGS / "debug_search.yaml", ["search.guide.metric="])
    all_slices = search_studies.slices(base, search, base.name)
    studies = {sl.study_name: search_studies.open_study(sl, search, storage) for sl in all_slices}
    first = studies[all_slices[0].study_name]
    roster = owners.Roster(first)
    owners.Roster(first, me=dead).announce()  # a driver that has exited counts for nothing
    assert loop.my_share(all_slices, studies, roster) == all_slices and roster.live() == 1
    owners.Roster(first, me=peer).announce()
    ask_as(studies[all_slices[1].study_name], all_slices[1], owners.driver())  # we worked on the second slice last
    assert roster.live() == 2 and loop.my_share(all_slices, studies, roster) == [all_slices[1]]


def test_the_heartbeat_refreshes_each_trial_of_each_study(storage):
    """Trial numbers repeat across studies: trial 0 of one study is not trial 0 of another."""
    base, search = load_search(CONFIGS / "debug_search.yaml", ["search.guide.metric="])
    all_slices = search_studies.slices(base, search, base.name)
    opened = [search_studies.open_study(sl, search, storage) for sl in all_slices[:2]]
    trials = [ask_as(study, sl, owners.driver())[0] for study, sl in zip(opened, all_slices)]
    assert [t.number for t in trials] == [0, 0]
    beat, since = owners.Heartbeat(interval=0.05), time.time()
    for trial in trials:
        beat.add(trial)
    time.sleep(0.5)
    beat.stop()
    assert all(study.get_trials()[0].user_attrs[owners.HEARTBEAT] > since for study in opened)


def test_optuna_is_used_through_its_public_api_only():
    """Its private attributes (a study's storage and ids, a trial's id, its suggest) change between releases."""
    private = ("SLF001", "._storage", "._study_id", "._trial_id", "._thread_local", "._suggest")
    for path in (Path(__file__).parents[2] / "sweep" / "search").glob("*.py"):
        assert not [word for word in private if word in path.read_text()], path
