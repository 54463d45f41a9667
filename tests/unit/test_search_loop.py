"""The search loop's bookkeeping with the fake executor of tests/unit/conftest.py (real Optuna journal storage, no
Ray): budgets, --extend, zombie trials, fresh seeds on re-evaluation. The real Ray path is in
tests/integration/test_search.py."""
import math
import subprocess

import optuna
import pandas as pd
import pytest

from dashboards import figures
from sweep import space, tuner
from sweep.search import bisection, estimate, loop, owners, samplers, tables
from sweep.search import studies as search_studies
from sweep.search.config import STREAK, SuccessConfig, load_search
from sweep.storage.out_dir import OutDir
from tests.conftest import CONFIGS
from tests.unit.conftest import WIDTH_NEEDED, fake_executor
from trainables import config
from trainables.errors import ConfigError
from trainables.io import ERROR_FILE, atomic_write, write_json

def setup(tmp_path, *overrides):
    base, search = load_search(CONFIGS / "debug_search.yaml", list(overrides))
    all_slices = search_studies.slices(base, search, base.name)
    storage = search_studies.storage_for(None, tmp_path)
    studies = {sl.study_name: search_studies.open_study(sl, search, storage) for sl in all_slices}
    return base, search, all_slices, studies, storage


def completed(study) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials() if t.state == optuna.trial.TrialState.COMPLETE]


def estimated(search, sl, study):
    """The slice's K*_q estimate from its study (estimate.py), as min_diversity.csv states it."""
    sampler = samplers.for_slice(search, sl.values)
    return sampler.fit(study.get_trials()) if isinstance(sampler, samplers.Threshold) else None


def test_threshold_search_finds_the_fake_threshold_in_every_slice(tmp_path, fake_width_tune):
    """A sharp transition (every seed passes from WIDTH_NEEDED on): K*_q is WIDTH_NEEDED and the slice ends once its
    interval spans one knob step, inside its budget (30: showing p >= 1/2 and p < 1/2 at 95% takes 6 seeds on each
    side of the boundary, beside the bisection's probes); every seed asked is trained once."""
    base, search, all_slices, studies, _ = setup(tmp_path, "search.budget.trainings=30")
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    table, curve = tables.min_diversity_rows(studies, all_slices, search, base)
    assert list(table["diversity_star"]) == [WIDTH_NEEDED] * len(all_slices)
    assert (table["diversity_star_low"] <= WIDTH_NEEDED).all() and (table["diversity_star_high"] >= WIDTH_NEEDED).all()
    assert (table["diversity_star_high"] - table["diversity_star_low"] <= search.threshold.resolution).all()
    assert table["finished"].all() and (table["seeds"] <= search.budget.trainings).all()
    seeds = sum(bisection.seeds_asked(s.get_trials()) for s in studies.values())
    assert sum(map(len, fake_width_tune)) == seeds == table["seeds"].sum() == curve["trained"].sum()
    passed = curve[curve["trained"] > 0]
    assert ((passed["passed"] == passed["trained"]) == (passed["task.lengths.width"] >= WIDTH_NEEDED)).all()


def test_threshold_search_draws_consecutive_seeds_from_the_configs_seed(tmp_path, fake_width_tune):
    """seed=S: a slice's seeds are S, S + 1, ... in the order asked, search.threshold.batch per evaluation, none at two
    knob values (independent draws), so a replication with disjoint seeds is one override."""
    base, search, all_slices, studies, _ = setup(tmp_path, "seed=1000", "search.threshold.batch=3")
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    for sl in all_slices:
        trials = completed(studies[sl.study_name])
        seeds = [seed for trial in trials for seed in trial.user_attrs["seed_list"]]
        assert len(trials) > 1 and seeds == list(range(1000, 1000 + len(seeds)))
        assert {len(t.user_attrs["seed_list"]) for t in trials} <= {1, 2, 3}


def test_tpe_respects_the_budget_and_extend_adds_to_it(tmp_path, fake_width_tune):
    base, search, all_slices, studies, storage = setup(tmp_path, "search.sampler=tpe", "search.budget.per_slice=4")
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    assert [len(completed(s)) for s in studies.values()] == [4, 4]
    studies = {sl.study_name: search_studies.open_study(sl, search, storage) for sl in all_slices}  # as a re-run would
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=3)
    assert [len(completed(s)) for s in studies.values()] == [7, 7]
    # success is a constraint (<= 0: feasible), so TPE's best trial is the smallest width that generalizes
    for trial in completed(studies["debug_search.low=2"]):
        assert (trial.system_attrs["constraints:success"] <= 0) == (trial.params["task.lengths.width"] >= WIDTH_NEEDED)


def test_the_total_budget_caps_all_slices(tmp_path, fake_width_tune):
    base, search, all_slices, studies, _ = setup(tmp_path, "search.sampler=exhaustive", "search.budget.total=5")
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    assert sum(len(completed(s)) for s in studies.values()) == 5


def test_zombies_are_failed_and_their_candidate_asked_again_with_the_same_seeds(tmp_path, fake_width_tune):
    base, search, all_slices, studies, storage = setup(tmp_path)
    sl = all_slices[0]
    zombie = studies[sl.study_name].ask({"task.lengths.width": optuna.distributions.IntDistribution(1, 7)})
    zombie.set_user_attr("seed_list", [0])  # a killed driver left it RUNNING
    gone = subprocess.Popen(["true"])
    gone.wait()
    zombie.set_user_attr(owners.DRIVER, owners.driver(gone.pid))
    studies = {s.study_name: search_studies.open_study(s, search, storage) for s in all_slices}
    states = [t.state for t in studies[sl.study_name].get_trials()]
    assert states == [optuna.trial.TrialState.FAIL]
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    first = completed(studies[sl.study_name])[0]
    assert first.params == zombie.params and first.user_attrs["seed_list"][0] == 0
    # trials.csv has one row per trained seed: the zombie's seed appears once, under the trial that re-asked it
    frame = tables.member_rows(studies, all_slices, search, tmp_path)
    assert not frame.duplicated(["study", "task.lengths.width", "seed"]).any()
    again = frame[(frame["study"] == sl.study_name) & (frame["optuna_trial"] == first.number)]
    assert len(again) == len(first.user_attrs["seed_list"]) and set(again["state"]) == {"COMPLETE"}


def test_a_stopped_driver_fails_its_trials_in_training_so_no_driver_waits_for_their_heartbeat(tmp_path, monkeypatch):
    """Ctrl-C or SIGTERM (a Slurm requeue) mid-round: the trials this driver was training are failed as zombies on
    the way out, not left RUNNING for STALE_S (a driver on another host would wait for their heartbeat to age), and
    the resumed search asks their candidates again with the same seeds."""
    stopped = []

    def stopped_mid_round(base, search, rounds, out, summary=None, job_type="search", **packing):
        stopped.append(next(rounds))
        raise KeyboardInterrupt

    monkeypatch.setattr(tuner, "run_rounds", stopped_mid_round)
    base, search, all_slices, studies, storage = setup(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    failed = {}
    for name, study in studies.items():
        trials = study.get_trials()  # a guided search's first round asks in its pilot slices only
        assert {t.state for t in trials} <= {optuna.trial.TrialState.FAIL}
        assert owners.zombies(study) == {t.number for t in trials}
        failed[name] = [(t.params, t.user_attrs["seed_list"]) for t in trials]
    assert sum(len(f) for f in failed.values()) and stopped[0]

    fake_executor(monkeypatch, lambda point, m: 1.0 if point["task.lengths.width"] >= WIDTH_NEEDED else 0.2)
    studies = {sl.study_name: search_studies.open_study(sl, search, storage) for sl in all_slices}  # as a re-run would
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    for name, study in studies.items():
        again = completed(study)[:len(failed[name])]
        assert [(t.params, t.user_attrs["seed_list"]) for t in again] == failed[name]


@pytest.mark.parametrize("sampler", ["threshold", "bisection"])
def test_a_settled_study_asks_nothing_and_leaves_no_trial(tmp_path, fake_width_tune, sampler):
    """A settled study's sampler says so before Optuna is asked (nothing is raised through study.ask): a round over
    settled studies creates no trial, so none is left RUNNING or failed for nothing."""
    base, search, all_slices, studies, _ = setup(tmp_path, f"search.sampler={sampler}")
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)  # every study settled
    sl = all_slices[0]
    chooser, trials = samplers.for_slice(search, sl.values), studies[sl.study_name].get_trials()
    assert chooser.next(trials, chooser.budget(trials, 0)) is None
    assert next(loop.rounds(base, search, all_slices, studies, tmp_path, extend=0), None) is None
    assert len(studies[sl.study_name].get_trials()) == len(trials)


def test_a_reevaluated_value_gets_fresh_seeds(tmp_path, fake_width_tune):
    base, search, all_slices, studies, _ = setup(tmp_path, "search.sampler=bisection", "search.success.seeds=[0,1]")
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    by_value = {}
    for trial in completed(studies[all_slices[0].study_name]):
        by_value.setdefault(trial.params["task.lengths.width"], []).append(trial.user_attrs["seed_list"])
    assert by_value[WIDTH_NEEDED] == [[0, 1], [2, 3]]  # the boundary's success side, re-checked with new seeds


def test_the_all_pass_bisection_states_its_own_answer_without_an_interval(tmp_path, fake_width_tune):
    """The bisection trains the same seeds at every width, which the interval's tests cannot treat as independent
    draws: its table gives its m-of-n answer alone, with no interval columns and no --extend estimate."""
    base, search, all_slices, studies, _ = setup(tmp_path, "search.sampler=bisection", "search.success.seeds=[0,1]")
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    table, _ = tables.min_diversity_rows(studies, all_slices, search, base)
    assert list(table["diversity_star"]) == [WIDTH_NEEDED] * len(all_slices)
    assert not {"diversity_star_low", "diversity_star_high", "to_settle"} & set(table.columns)
    shown = figures.answer_table(table, [a.key for a in search.slices], "data/max_sum_ratio")
    assert list(shown["K*_q [interval]"]) == [f"{WIDTH_NEEDED}"] * len(all_slices)
    assert tables.extend_note(table) is None


def test_a_slice_out_of_budget_says_why_and_how_many_more_trainings_would_settle_it(tmp_path, fake_width_tune):
    """Six trainings cannot show both ends of a sharp transition: each slice stops on its budget, says so, and
    estimates the trainings that would settle it (the terminal's --extend line); extended by that many, it settles."""
    base, search, all_slices, studies, storage = setup(tmp_path, "search.budget.trainings=6")
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    table, _ = tables.min_diversity_rows(studies, all_slices, search, base)
    assert list(table["stopped"]) == ["budget"] * len(all_slices) and (table["to_settle"] > 0).all()
    assert "--extend" in tables.extend_note(table)
    # at the rates estimated, plus two batches of slack
    more = int(table["to_settle"].max()) + 2 * search.threshold.batch
    studies = {sl.study_name: search_studies.open_study(sl, search, storage) for sl in all_slices}
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=more)
    table, _ = tables.min_diversity_rows(studies, all_slices, search, base)
    assert list(table["stopped"]) == ["settled"] * len(all_slices) and (table["to_settle"] == 0).all()
    assert tables.extend_note(table) == ""


def test_rates_sitting_at_q_are_a_plateau_not_a_budget_to_extend():
    """A slice that spent its budget with every rate inside its interval within 0.15 of q stops as "plateau near q",
    and the note says more seeds will not settle it."""
    _, search = load_search(CONFIGS / "debug_search.yaml", [])
    passed, trained = [0, 0, 4, 5, 4], [6, 6, 9, 9, 9]
    fit = estimate.fit(passed, trained, 0.5, 0.95)
    assert tables.stop_reason(fit, passed, trained, search, done=True) == "plateau near q"
    assert tables.stop_reason(fit, passed, trained, search, done=False) == "open"
    table = pd.DataFrame({"stopped": ["plateau near q"], "to_settle": [10_000], "finished": [True]})
    assert "will not settle" in tables.extend_note(table)


def test_success_reads_the_direction_of_its_metric():
    """A loss gap succeeds at or below its threshold, an accuracy at or above; a missing value never succeeds."""
    at_most = SuccessConfig(metric="ood/gap", direction="<=", threshold=0.1)
    at_least = SuccessConfig(metric="ood/acc", direction=">=", threshold=0.9)
    assert at_most.margin(0.05) == pytest.approx(0.05) and at_most.margin(0.2) == pytest.approx(-0.1)
    assert at_least.margin(0.95) == pytest.approx(0.05) and at_least.margin(0.5) == pytest.approx(-0.4)
    assert at_most.margin(None) == at_least.margin(float("nan")) == -math.inf


def test_the_direction_defaults_to_the_tasks_for_its_own_metric():
    _, search = load_search(CONFIGS / "debug_search.yaml", [])
    assert (search.success.metric, search.success.direction) == ("ood/acc", ">=")
    with pytest.raises(ConfigError, match="search.success.direction"):
        load_search(CONFIGS / "debug_search.yaml", ["search.success.direction=above"])


ALPHAS = [0.1, 0.2, 0.3, 0.5, 0.7, 0.9]
ALPHA_NEEDED = 0.5


def test_a_knob_of_explicit_float_values_is_bisected(tmp_path, monkeypatch):
    """The mixed n-gram task's knob is a share (floats): `search.knob.values` orders them and bisection finds the
    fake threshold among them, as it does among integers."""
    calls = fake_executor(monkeypatch, lambda point, m: 1.0 if point["task.alpha"] >= ALPHA_NEEDED else 0.0,
                          metric="ood/icl_acc")
    search_section = (f"search={{knob: {{key: task.alpha, values: {ALPHAS}}}, sampler: bisection, "
                      "success: {threshold: 0.9, seeds: [0]}, budget: {per_slice: 8}}")
    path = tmp_path / "alpha_search.yaml"
    path.write_text((CONFIGS / "debug_mixed_ngram.yaml").read_text())
    base, search = load_search(path, [search_section])
    assert search.success.metric == "ood/icl_acc"
    [sl] = search_studies.slices(base, search, "alpha")
    studies = {sl.study_name: search_studies.open_study(sl, search, search_studies.storage_for(None, tmp_path))}
    loop.run(base, search, [sl], studies, OutDir(tmp_path), extend=0)
    pooled = bisection.evidence(studies[sl.study_name].get_trials(), "task.alpha")
    assert bisection.minimal_value(sl.values, pooled, 1.0) == ALPHA_NEEDED
    assert len(calls) < len(ALPHAS)  # bisection, not every value
    with pytest.raises(ConfigError, match="search.knob.values"):
        load_search(path, ["search={knob: {key: task.alpha, values: [0.1, 0.1]}}"])


def test_the_progress_line_counts_trained_members_and_estimates_what_is_left(tmp_path):
    from sweep.progress import ProgressView

    for name in ("a", "b"):
        (tmp_path / "trials" / name).mkdir(parents=True)
        (tmp_path / "trials" / name / "result.json").write_text("{}")
    view = ProgressView("grid", tmp_path, total=4, summary=lambda: "1 generalize OOD")
    (tmp_path / "trials" / "c").mkdir()
    (tmp_path / "trials" / "c" / "result.json").write_text("{}")  # one finished since the view started
    line = view.line(["RUNNING", "TERMINATED", "ERROR"])
    assert line.startswith("grid  3/4 trained  1 running  1 failed") and line.endswith("1 generalize OOD")
    assert "ETA" in line and "/min  " in line


def test_the_progress_rate_is_trainings_per_minute_whatever_the_speed():
    """One unit: a slow transformer search and a fast one-step grid both read in trainings per minute."""
    from sweep.progress import _per_minute

    assert _per_minute(0.0) == "0.00/min"
    assert _per_minute(1 / 3600) == "0.02/min"  # one an hour
    assert _per_minute(144 / 3000) == "2.9/min"  # 144 trainings in 50 minutes
    assert _per_minute(3.9) == "234/min"  # 3.9 a second
    assert all(not text.endswith(("/s", "/h")) for text in map(_per_minute, (0.001, 0.1, 1.0, 10.0)))


def test_a_diverged_seed_counts_as_a_failure_whatever_its_last_finite_evaluation(tmp_path, monkeypatch):
    """Every width 'generalizes' by its metric, but widths below WIDTH_NEEDED diverged: the answer is WIDTH_NEEDED."""
    fake_executor(monkeypatch, lambda point, m: 1.0)
    real_write = loop.read_result

    def diverged_below(point, out):
        result = real_write(point, out)
        if result is not None and point["task.lengths.width"] < WIDTH_NEEDED:
            result |= {"status": "diverged", "diverged_because": "train/loss = nan at step 3"}
        return result

    monkeypatch.setattr(loop, "read_result", diverged_below)
    base, search, all_slices, studies, _ = setup(tmp_path)
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    for sl in all_slices:
        fit = estimated(search, sl, studies[sl.study_name])
        assert sl.values[fit.star] == WIDTH_NEEDED


OOM = "RuntimeError: CUDA error: out of memory"


def test_a_seed_that_fails_on_every_try_fails_its_candidate_with_its_error_in_trials_csv(tmp_path, monkeypatch):
    """A trial Tune gave up on leaves its error (trainable.py writes ERROR_FILE) and no result.json: its candidate is
    told FAIL with the error as failed_because, trials.csv shows the error, and the search still finishes."""
    fake_executor(monkeypatch, lambda point, m: 1.0 if point["task.lengths.width"] >= WIDTH_NEEDED else 0.2)
    fake_run_rounds = tuner.run_rounds

    def failing_at_needed(base, search, rounds, out, summary=None, job_type="search", **packing):
        def erring(rounds):  # between the fake's writes and the tell: the width that would first succeed errs
            for points in rounds:
                yield points
                for point in points:
                    if point["task.lengths.width"] == WIDTH_NEEDED:
                        (space.member_dir(out.local, point) / "result.json").unlink()
                        atomic_write(space.member_dir(out.local, point) / ERROR_FILE, OOM + "\n")
        fake_run_rounds(base, search, erring(rounds), out)

    monkeypatch.setattr(tuner, "run_rounds", failing_at_needed)
    base, search, all_slices, studies, _ = setup(tmp_path)
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    tables.write(tmp_path, base, search, studies, all_slices)
    frame = pd.read_csv(tmp_path / "trials.csv")
    erred = frame[frame["task.lengths.width"] == WIDTH_NEEDED]
    assert len(erred) and set(erred["status"]) == {"error"}
    assert set(erred["error"]) == {OOM}
    for study in studies.values():
        failed = [t for t in study.get_trials() if t.state == optuna.trial.TrialState.FAIL]
        assert failed and {t.user_attrs["failed_because"] for t in failed} == {OOM}


def test_a_seed_stopped_once_its_candidate_was_decided_has_no_verdict_of_its_own(tmp_path):
    """Seed 0 failed (2 of 2 needed), so seed 1 stopped where it was (verdict_known): it does not count as a success,
    although its last evaluation passed; the candidate fails, with 0 of its 2 seeds passing."""
    base, search, [sl, _], studies, _ = setup(tmp_path, "search.sampler=bisection", "search.success.seeds=[0,1]",
                                             "search.success.min_seeds=2")
    study = studies[sl.study_name]
    trial = study.ask(sl.distributions(search.knob.key))
    points = [sl.point | trial.params | {"seed": seed} for seed in (0, 1)]
    write_json(space.member_dir(tmp_path, points[0]) / "result.json", {"ood/acc": 0.5, "status": "completed"})
    write_json(space.member_dir(tmp_path, points[1]) / "result.json", {"ood/acc": 0.95, "status": "verdict_known"})
    loop.tell(study, trial, points, search, tmp_path)
    [told] = study.get_trials()
    assert told.user_attrs["successes"] == 0 and told.user_attrs["seeds"] == 2 and told.constraints["success"] > 0
    assert told.user_attrs["judged"] == 1  # the success curve sees only the seed that was judged


def test_a_search_rule_groups_each_evaluations_seeds_apart(tmp_path):
    """Seeds [0, 1] are the first evaluation of a candidate, [2, 3] its re-check (Sampler.seeds): two groups."""
    _, search, *_ = setup(tmp_path, "search.sampler=bisection", "search.success.seeds=[0,1]",
                          "search.success.min_seeds=2")
    rule = loop.verdict_rule(search)
    groups = [rule({"task.lengths.low": 2, "task.lengths.width": 3, "seed": s})["group"] for s in range(4)]
    assert groups[0] == groups[1] != groups[2] == groups[3]
    assert rule({"task.lengths.low": 2, "task.lengths.width": 3, "seed": 0}) | {"group": ""} == {
        "metric": "ood/acc", "threshold": 0.9, "above": True, "streak": STREAK, "group": "", "needed": 2, "size": 2}
    off = loop.verdict_rule(load_search(CONFIGS / "debug_search.yaml", ["search.stop.streak=0",
                                                                       "search.stop.decided=false"])[1])
    assert off({"task.lengths.low": 2, "seed": 0}) is None


def test_the_threshold_sampler_judges_every_seed_on_its_own(tmp_path):
    """No m-of-n groups: each seed stops only on its own streak, so every seed is a point of the success curve."""
    _, search, *_ = setup(tmp_path)
    rule = loop.verdict_rule(search, first=0)
    rules = [rule({"task.lengths.low": 2, "task.lengths.width": 3, "seed": s}) for s in range(3)]
    assert {(r["needed"], r["size"]) for r in rules} == {(1, 1)} and len({r["group"] for r in rules}) == 3


def test_a_stopped_evaluations_finished_seeds_count_and_a_slice_without_seeds_has_no_answer(tmp_path):
    """A driver stopped mid-evaluation fails its trial as a zombie (owners.py): the seeds of it that finished count in
    the table (judged as tell judges them) and their rows say STOPPED, not FAIL; an unfinished seed counts nowhere.
    A slice with no seed at all has a blank answer and interval, and the table's --extend note leaves open slices
    to a rerun."""
    base, search, all_slices, studies, _ = setup(tmp_path)
    first, second = all_slices
    study = studies[first.study_name]
    trial, _ = owners.ask(study, first.distributions(search.knob.key))
    seeds = [0, 1, 2]
    trial.set_user_attr("seed_list", seeds)
    point = first.point | first.candidate(trial.params, search.knob.key)
    for seed, acc in ((0, 1.0), (1, 0.1)):  # seed 2 never finished
        path = space.member_dir(tmp_path, point | {"seed": seed})
        path.mkdir(parents=True)
        write_json(path / "result.json", {"ood/acc": acc, "status": "completed"})
    owners.fail_as_zombie(study, trial.number)

    table, curve = tables.min_diversity_rows(studies, all_slices, search, base, tmp_path)
    stopped, empty = table.iloc[0], table.iloc[1]
    assert stopped["seeds"] == 2 and not stopped["finished"] and stopped["stopped"] == "open"
    at = curve[(curve["study"] == first.study_name) & (curve["trained"] > 0)]
    assert list(at[["trained", "passed"]].iloc[0]) == [2, 1] and len(at) == 1
    assert empty["seeds"] == 0 and empty[["diversity_star", "diversity_star_low", "diversity_star_high"]].isna().all()
    shown = figures.answer_table(table, [a.key for a in search.slices], "data/max_sum_ratio")
    assert shown["K*_q [interval]"].iloc[1] == "-"
    assert tables.extend_note(table) == ""
    # without the output directory (what an Optuna-only reader has) the stopped seeds are not seen
    assert tables.min_diversity_rows(studies, all_slices, search, base)[0]["seeds"].sum() == 0
    rows = tables.member_rows(studies, all_slices, search, tmp_path)
    assert sorted(zip(rows["seed"], rows["state"], rows["status"])) == [
        (0, "STOPPED", "completed"), (1, "STOPPED", "completed"), (2, "STOPPED", "unfinished")]


def test_a_driver_waits_while_a_study_it_saw_taken_may_want_more(tmp_path, monkeypatch):
    """Every study was another driver's as the round began, and its trial was told before this driver looked again:
    the driver waits and looks again (a round of nothing) rather than ending with the studies unfinished, as it did
    when the other driver's tell fell between its two looks."""
    base, search, all_slices, studies, _ = setup(tmp_path)
    looks = iter([True] * len(studies))  # the round's first look: every study taken; then told, free
    monkeypatch.setattr(owners, "taken", lambda study, me=None: next(looks, False))
    monkeypatch.setattr(loop, "POLL_S", 0.0)
    asked = loop.rounds(base, search, all_slices, studies, tmp_path, extend=0)
    assert next(asked) == []  # waited
    assert next(asked)  # and then asks the studies itself


def test_a_slice_whose_seeds_all_fail_stops_asking_and_says_it_finished(tmp_path, monkeypatch):
    """Every seed errs: a slice stops asking once three times the evaluations its budget allows have failed
    (Sampler.spent), and its row says it finished because its evaluations kept failing, not "open", which reads as a
    search stopped by hand that a rerun would continue (a rerun asks nothing more), nor "budget" (--extend would not
    help)."""
    fake_executor(monkeypatch, lambda point, m: 0.2)
    fake_run_rounds = tuner.run_rounds

    def all_failing(base, search, rounds, out, summary=None, job_type="search", **packing):
        def erring(rounds):
            for points in rounds:
                yield points
                for point in points:
                    (space.member_dir(out.local, point) / "result.json").unlink()
                    atomic_write(space.member_dir(out.local, point) / ERROR_FILE, OOM + "\n")
        fake_run_rounds(base, search, erring(rounds), out)

    monkeypatch.setattr(tuner, "run_rounds", all_failing)
    base, search, all_slices, studies, _ = setup(tmp_path, "search.budget.trainings=6")
    loop.run(base, search, all_slices, studies, OutDir(tmp_path), extend=0)
    tables.write(tmp_path, base, search, studies, all_slices)
    minimal = pd.read_csv(tmp_path / "min_diversity.csv")
    assert minimal["finished"].all() and set(minimal["stopped"]) == {"failing"}, minimal
    for study in studies.values():  # 6 seed trainings in batches of 3: 2 evaluations allowed, 3 x 2 failed
        assert [t.state for t in study.get_trials()] == [optuna.trial.TrialState.FAIL] * 6
